"""Knowledge items: remember (one, or many in one transaction), list, get, update,
revise, invalidate, restore, forget, history, search (every filter and ``as_of``), and
search across knowledge and conversations. Each route is one call of
``AsyncUserMemory``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Response

from ...errors import InvalidInput
from ...store.sql import SORTABLE
from ..deps import Acting, Handle, Shared, acting, unbound
from ..errors import ERROR_RESPONSES
from ..models import (
    Category,
    CountOut,
    EventOut,
    HitOut,
    InvalidateRequest,
    ItemOut,
    ItemPage,
    ItemsOut,
    RememberManyRequest,
    RememberRequest,
    RestoreRequest,
    ReviseRequest,
    SearchAllRequest,
    SearchRequest,
    Source,
    UpdateRequest,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["knowledge"], responses=ERROR_RESPONSES)

Sort = Literal["created_at", "updated_at", "confidence", "last_used_at", "use_count",
               "category", "due_at"]
assert frozenset(Sort.__args__) == SORTABLE  # type: ignore[attr-defined]

ItemId = Annotated[str, Path(min_length=1, max_length=1000, description="An item's id.")]
Whole = Annotated[Acting, Depends(acting)]


def _items(items: list[Any]) -> list[ItemOut]:
    return [ItemOut.model_validate(item) for item in items]


def _hits(hits: list[Any]) -> list[HitOut]:
    return [HitOut.model_validate(hit) for hit in hits]


@router.post("/memories", status_code=201, summary="Remember")
async def remember(body: RememberRequest, memory: Handle) -> ItemOut:
    """Store a knowledge item verbatim, or refresh the active item this text restates
    (``written`` says which)."""
    item = await memory.remember(**body.model_dump())
    return ItemOut.model_validate(item)


@router.post("/memories/batch", status_code=201, summary="Remember many")
async def remember_many(body: RememberManyRequest, memory: Handle) -> ItemsOut:
    """Store many items in one transaction, each deduplicated as a remember would be
    (against what is stored and the entries before it); the items come back in the
    entries' order, each with ``written``. A bad entry answers 422 naming its index
    (``item 3: …``, or the field's path ``body.items.3.…``) and nothing is stored."""
    entries = [entry.model_dump() for entry in body.items]
    return ItemsOut(items=_items(await memory.remember_many(entries, dedup=body.dedup)))


@router.get("/memories", summary="List")
async def list_memories(
    memory: Handle,
    category: Category | None = None,
    context: Annotated[str | None, Query(max_length=1000)] = None,
    entity: Annotated[str | None, Query(max_length=2001)] = None,
    sensitive: bool | None = None,
    source: Source | None = None,
    sort: Sort = "updated_at",
    order: Literal["asc", "desc"] = "desc",
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 50,
    include_superseded: bool = False,
) -> ItemPage:
    """A page of items, filtered and sorted, with the total matching."""
    page = await memory.all_knowledge(
        category=category, context=context, entity=entity, sensitive=sensitive, source=source,
        sort=sort, order=order, offset=offset, limit=limit,
        include_superseded=include_superseded)
    return ItemPage(items=_items(page["items"]), total=page["total"], offset=page["offset"],
                    limit=page["limit"])


@router.delete("/memories", summary="Forget many")
async def forget_many(
    memory: Handle, who: Whole,
    source: Annotated[Source | None, Query(description="Forget every item from it.")] = None,
    everything: Annotated[bool, Query(alias="all", description=(
        "Forget every item, and mark the turns not yet consolidated so they are not "
        "learnt again."))] = False,
) -> CountOut:
    """Forget every item of one source, or everything (``all=true``). Needs a key not
    bound to an agent."""
    unbound(who)
    if everything == (source is not None):
        raise InvalidInput("give either source or all=true")
    count = await (memory.forget_all() if everything else memory.forget_by_source(
        source or ""))
    return CountOut(count=count)


@router.get("/memories/upcoming", summary="Upcoming")
async def upcoming(
    memory: Handle,
    days: Annotated[float, Query(ge=0, le=100_000, allow_inf_nan=False)] = 7,
) -> list[ItemOut]:
    """Items due within ``days`` (0 to 100,000) or overdue that nobody was reminded of."""
    return _items(await memory.upcoming(days))


@router.post("/memories/search", summary="Search")
async def search(body: SearchRequest, memory: Handle, shared: Shared) -> list[HitOut]:
    """Knowledge by keywords and meaning, best first, with every filter; ``as_of``
    searches what was known and true then."""
    with shared.metrics.searching("knowledge"):
        hits = await memory.search(**body.model_dump())
    return _hits(hits)


@router.post("/search", summary="Search knowledge and conversations")
async def search_all(body: SearchAllRequest, memory: Handle, shared: Shared) -> list[HitOut]:
    """Knowledge and past conversations in one list, best first."""
    with shared.metrics.searching("all"):
        hits = await memory.search_all(**body.model_dump())
    return _hits(hits)


@router.get("/memories/{item_id}", summary="Get")
async def get(
    item_id: ItemId, memory: Handle,
    as_of: Annotated[str | None, Query(max_length=200, description=(
        "The item as the ledger knew it at this time."))] = None,
) -> ItemOut:
    """One item; another user's ids answer 404."""
    return ItemOut.model_validate(await memory.get(item_id, as_of=as_of))


@router.patch("/memories/{item_id}", summary="Update")
async def update(item_id: ItemId, body: UpdateRequest, memory: Handle) -> ItemOut:
    """Change the fields given, in place (``revise`` keeps the old version instead)."""
    fields = body.model_dump(include=body.model_fields_set)
    return ItemOut.model_validate(await memory.update(item_id, **fields))


@router.delete("/memories/{item_id}", status_code=204, response_class=Response,
               summary="Forget")
async def forget(item_id: ItemId, memory: Handle) -> Response:
    """Delete an item and blank its text everywhere, the ledger included."""
    await memory.forget(item_id)
    return Response(status_code=204)


@router.post("/memories/{item_id}/revise", status_code=201, summary="Revise")
async def revise(item_id: ItemId, body: ReviseRequest, memory: Handle) -> ItemOut:
    """A new version (a new id) that supersedes the item, which stays in history. Fields
    left out are the old version's; ``null`` clears ``entity``, ``domain`` or
    ``due_at``."""
    fields = body.model_dump(include=body.model_fields_set)
    return ItemOut.model_validate(await memory.revise(item_id, **fields))


@router.post("/memories/{item_id}/invalidate", summary="Invalidate")
async def invalidate(item_id: ItemId, memory: Handle,
                     body: InvalidateRequest | None = None) -> ItemOut:
    """Mark the item as no longer true; ``restore`` undoes it."""
    fields = (body or InvalidateRequest()).model_dump()
    return ItemOut.model_validate(await memory.invalidate(item_id, **fields))


@router.post("/memories/{item_id}/restore", summary="Restore")
async def restore(item_id: ItemId, memory: Handle,
                  body: RestoreRequest | None = None) -> ItemOut:
    """Make a superseded or invalidated version active again."""
    fields = (body or RestoreRequest()).model_dump()
    return ItemOut.model_validate(await memory.restore(item_id, **fields))


@router.post("/memories/{item_id}/reminded", summary="Mark reminded")
async def reminded(item_id: ItemId, memory: Handle) -> ItemOut:
    """Record that the user was reminded of a due item."""
    return ItemOut.model_validate(await memory.mark_reminded(item_id))


@router.get("/memories/{item_id}/history", summary="History")
async def history(item_id: ItemId, memory: Handle) -> list[EventOut]:
    """Every ledger entry about the item and the versions in its lineage, oldest first."""
    return [EventOut.model_validate(event) for event in await memory.history(item_id)]
