"""LangGraph: a ``BaseStore`` whose items are ledgermem knowledge, one user per namespace.

One line gives a graph a long-term store that searches by meaning::

    from ledgermem import Memory
    from ledgermem.adapters.langgraph import LedgermemStore

    store = LedgermemStore(Memory.open("memory.db"))        # the user is namespace[0]
    graph = builder.compile(checkpointer=checkpointer, store=store)
    # in a node: store.put(("alice", "memories"), "diet", {"text": "Vegetarian"})
    #            store.search(("alice", "memories"), query="what does she eat?")

**Scoping.** The label at ``user_index`` (0 by default: ``(user_id, "memories")``) of
every namespace is the ledgermem user id, the isolation boundary enforced in the store;
the other labels are a ledgermem context (``langgraph:memories``, the labels
percent-encoded and joined by ``/``). A namespace, search prefix or listing without the
user label is refused (``InvalidInput``, also LangGraph's ``InvalidNamespaceError``), so
no operation reads across users.

**What is stored.** Each ``(namespace, key)`` is one knowledge item (category ``note``,
source ``tool``, never merged with another key), whose content is the text to search
(the strings of the value, or of the ``index`` fields) and whose metadata keeps the
namespace, the key, the value as given and its TTL. ``put`` writes or updates it,
``delete`` forgets it (its text is blanked everywhere, the ledger included), and its
history is in the ledger like any memory's. ``search`` with a ``query`` is ledgermem's
hybrid search (keywords + the memory's embedder, fused, with salience) among the items
under the prefix that pass the ``filter``; without one, the newest first.

**TTL.** ``supports_ttl``: an item put with ``ttl`` (minutes, or ``TTLConfig``'s
``default_ttl``) expires that long after it was last written or read (reads refresh it
unless ``refresh_ttl=False``); expired items are never returned, and ``sweep_ttl()``
(or the sweeper thread, ``start_ttl_sweeper``) forgets them. A ``ttl`` that is not a
number of minutes above 0 (up to ``MAX_TTL_MINUTES``) is refused (``InvalidInput``).

**Size.** A store returns what was put, so a value is never cut: one whose item
metadata would be over ``MAX_JSON_CHARS`` of JSON is refused (``InvalidInput``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, unquote

import anyio
import anyio.to_thread

from ..aio import AsyncMemory
from ..clock import iso
from ..errors import InvalidInput, NotFound
from ..memory import Memory
from ..types import MAX_CONTENT, ItemQuery
from ..types import Item as LedgerItem
from ..user_memory import UserMemory
from ..validation import MAX_DAYS, MAX_JSON_CHARS, json_chars
from . import missing_extra

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
    )
    from langgraph.store.base.embed import get_text_at_path, tokenize_path
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra(__name__, "langgraph", "langgraph", exc) from exc

__all__ = ["CONTEXT_PREFIX", "LedgermemStore", "NamespaceError"]

log = logging.getLogger("ledgermem.adapters.langgraph")

CONTEXT_PREFIX = "langgraph:"
"""Contexts of store items start with this; the rest is the namespace without the user."""
META = "langgraph"
"""Item metadata: namespace, key, value, created_at, updated_at, ttl, expires_at."""
MAX_TTL_MINUTES = MAX_DAYS * 24 * 60
"""Longest TTL, in minutes: ``MAX_DAYS`` (about 270 years)."""


class NamespaceError(InvalidInput, InvalidNamespaceError):
    """A namespace (or prefix, or listing) that names no user, or a bad label."""


class LedgermemStore(BaseStore):
    """LangGraph's ``BaseStore`` over ledgermem's knowledge items.

    Args:
        memory: a ``Memory`` or ``AsyncMemory``.
        user_index: which namespace label is the user id (0: ``(user, ...)``).
        index: fields of a value to search by (LangGraph paths: ``"text"``,
            ``"facts[*].text"``); default every string in the value.
        ttl: TTL behaviour (``default_ttl`` and ``sweep_interval_minutes`` in minutes,
            ``refresh_on_read``).
        threads: ``abatch`` calls run in worker threads at once.

    Raises:
        InvalidInput: a bad ``user_index`` or ``default_ttl`` (see ``put``'s ``ttl``).
    """

    supports_ttl: bool = True

    def __init__(self, memory: Memory | AsyncMemory, *, user_index: int = 0,
                 index: Sequence[str] | None = None, ttl: TTLConfig | None = None,
                 threads: int = 8) -> None:
        sync = memory.sync if isinstance(memory, AsyncMemory) else memory
        if not isinstance(sync, Memory):
            raise InvalidInput(f"expected a Memory or AsyncMemory, not {type(memory).__name__}")
        if isinstance(user_index, bool) or not isinstance(user_index, int) or user_index < 0:
            raise InvalidInput(f"user_index must be a non-negative integer, not {user_index!r}")
        self.memory = sync
        self.user_index = user_index
        self.fields = [(field, tokenize_path(field)) for field in index or ()]
        _ttl((ttl or {}).get("default_ttl"))
        self.ttl_config = ttl
        self._limiter = anyio.CapacityLimiter(threads)
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    # BaseStore ----------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; each sees the writes of those before it."""
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread."""
        todo = list(ops)
        return await anyio.to_thread.run_sync(self.batch, todo, limiter=self._limiter)

    # TTL --------------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Forget every expired item of every user; returns how many."""
        now = iso(self.memory.clock())
        swept = 0
        for user in self.memory.store.user_ids():
            handle = self.memory.for_user(user)
            for item in self._items(handle, None):
                if _expired(item, now):
                    handle.forget(item.id)
                    swept += 1
        return swept

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep every ``sweep_interval_minutes`` (default: the TTL config's, else 5) in
        a daemon thread until ``stop_ttl_sweeper``."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get(
            "sweep_interval_minutes") or 5
        if self._sweeper is not None:
            return
        self._stop.clear()
        self._sweeper = threading.Thread(target=self._sweep_every, args=(minutes * 60,),
                                         name="ledgermem-langgraph-ttl", daemon=True)
        self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; whether it stopped within ``timeout`` seconds."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is None:
            return True
        self._stop.set()
        sweeper.join(timeout)
        return not sweeper.is_alive()

    def _sweep_every(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            try:
                self.sweep_ttl()
            except Exception:  # keep sweeping; the next run tries again
                log.exception("TTL sweep failed")

    # operations ---------------------------------------------------------------------
    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, ListNamespacesOp):
            return self._list(op)
        raise InvalidInput(f"unknown store operation {type(op).__name__}")

    def _get(self, op: GetOp) -> Item | None:
        handle, path = self._user(op.namespace)
        found = self._find(handle, path, op.key)
        if found is None or _expired(found, iso(self.memory.clock())):
            return None
        found = self._refreshed(handle, found, op.refresh_ttl)
        return _as_item(found)

    def _put(self, op: PutOp) -> None:
        handle, path = self._user(op.namespace)
        _check_key(op.key)
        found = self._find(handle, path, op.key)
        if op.value is None:
            if found is not None:
                handle.forget(found.id)
            return
        ttl = _ttl(op.ttl)
        value = to_jsonable_python(dict(op.value), fallback=str)
        moment = self.memory.clock()
        now = iso(moment)
        # one moment for both on a first put; an update keeps the first put's
        created = now if found is None else _created(found)
        meta = {"namespace": list(op.namespace), "key": op.key, "value": value,
                "created_at": created, "updated_at": now, "ttl": ttl,
                "expires_at": _expiry(moment, ttl)}
        text = self._text(op.key, value, op.index)
        _check_size(op.key, meta, text)
        if found is None:
            handle.remember(text, "note", source="tool", context=_context(path),
                            metadata={META: meta}, dedup=False)
        else:
            handle.update(found.id, content=text, metadata={META: meta})

    def _search(self, op: SearchOp) -> list[SearchItem]:
        handle, path = self._user(op.namespace_prefix)
        _check_filter(op.filter)
        now = iso(self.memory.clock())
        pool = [item for item in self._items(handle, path) if not _expired(item, now)
                and _matches(_meta(item)["value"], op.filter)]
        if op.limit <= 0 or op.offset < 0:
            return []
        wanted = op.offset + op.limit
        ranked: list[tuple[LedgerItem, float | None]]
        if op.query and op.query.strip() and pool:
            by_id = {item.id: item for item in pool}
            hits = self.memory.searcher.search_items(
                handle.user_id, op.query, ItemQuery(ids=tuple(by_id)), wanted,
                now=self.memory.clock())
            ranked = [(by_id[hit.id], hit.score) for hit in hits if hit.id in by_id]
        else:
            pool.sort(key=lambda item: _meta(item)["updated_at"], reverse=True)
            ranked = [(item, None) for item in pool[:wanted]]
        found = []
        for item, score in ranked[op.offset:wanted]:
            item = self._refreshed(handle, item, op.refresh_ttl)
            found.append(_as_search_item(item, score))
        return found

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        users = {c.path[self.user_index] for c in op.match_conditions or ()
                 if c.match_type == "prefix" and len(c.path) > self.user_index
                 and c.path[self.user_index] != "*"}
        if len(users) != 1:
            raise NamespaceError(
                f"list_namespaces needs a prefix condition naming one user at label "
                f"{self.user_index} (ledgermem never lists across users)")
        user = next(iter(users))
        handle = self.memory.for_user(user)
        now = iso(self.memory.clock())
        spaces = {tuple(_meta(item)["namespace"]) for item in self._items(handle, None)
                  if not _expired(item, now)}
        spaces = {ns for ns in spaces
                  if all(_does_match(c, ns) for c in op.match_conditions or ())}
        if op.max_depth is not None:
            spaces = {ns[:op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset:op.offset + op.limit]

    # internals ----------------------------------------------------------------------
    def _user(self, namespace: tuple[str, ...]) -> tuple[UserMemory, tuple[str, ...]]:
        """The handle of the namespace's user and the namespace without that label."""
        if not isinstance(namespace, tuple) or len(namespace) <= self.user_index:
            raise NamespaceError(
                f"the namespace {namespace!r} has no user label at position "
                f"{self.user_index} (LedgermemStore(user_index=…) says where it is)")
        for label in namespace:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label:
                raise NamespaceError(f"bad namespace label {label!r} in {namespace!r}: "
                                     "labels are non-empty text without '.' or NUL")
        user = namespace[self.user_index]
        path = namespace[:self.user_index] + namespace[self.user_index + 1:]
        return self.memory.for_user(user), path

    def _items(self, handle: UserMemory, prefix: tuple[str, ...] | None) -> list[LedgerItem]:
        """The user's live store items whose namespace (without the user) starts with
        ``prefix`` (all of them for None)."""
        found: list[LedgerItem] = []
        for context, _ in handle.contexts():
            if not context.startswith(CONTEXT_PREFIX):
                continue
            if prefix is not None and _path(context)[:len(prefix)] != prefix:
                continue
            items, _ = self.memory.store.query_items(handle.user_id,
                                                     ItemQuery(context=context))
            found.extend(item for item in items if META in item.metadata)
        return found

    def _find(self, handle: UserMemory, path: tuple[str, ...], key: str) -> LedgerItem | None:
        items, _ = self.memory.store.query_items(handle.user_id,
                                                 ItemQuery(context=_context(path)))
        return next((item for item in items
                     if META in item.metadata and _meta(item)["key"] == key), None)

    def _refreshed(self, handle: UserMemory, item: LedgerItem, refresh: bool) -> LedgerItem:
        """The item with its TTL restarted when reads refresh it."""
        meta = _meta(item)
        if meta.get("ttl") is None or not refresh \
                or not (self.ttl_config or {}).get("refresh_on_read", True):
            return item
        meta = {**meta, "expires_at": _expiry(self.memory.clock(), meta["ttl"])}
        try:
            return handle.update(item.id, metadata={META: meta})
        except NotFound:  # deleted meanwhile
            return item

    def _text(self, key: str, value: Mapping[str, Any],
              index: Literal[False] | list[str] | None) -> str:
        """What the item is found by: the ``index`` fields (the store's by default, else
        every string of the value); the key alone with ``index=False``."""
        if index is False:
            return key
        fields = [(f, tokenize_path(f)) for f in index] if index else self.fields
        texts = ([t for _, path in fields for t in get_text_at_path(value, path)]
                 if fields else _strings(value))
        text = "\n".join(t for t in texts if t and t.strip())
        return text or json.dumps(value, ensure_ascii=False) or key


# pure helpers ---------------------------------------------------------------------------
def _context(path: tuple[str, ...]) -> str:
    return CONTEXT_PREFIX + "/".join(quote(label, safe="") for label in path)


def _path(context: str) -> tuple[str, ...]:
    rest = context[len(CONTEXT_PREFIX):]
    return tuple(unquote(label) for label in rest.split("/")) if rest else ()


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"a store key must be non-empty text, not {key!r:.60}")


def _meta(item: LedgerItem) -> dict[str, Any]:
    meta: dict[str, Any] = item.metadata[META]
    return meta


def _ttl(value: Any) -> float | None:
    """A TTL in minutes: None (never expires) or a number above 0 and at most
    ``MAX_TTL_MINUTES``. 0 or less is refused: the item would expire as it is written."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 < value <= MAX_TTL_MINUTES:  # NaN fails the comparison too
        raise InvalidInput(f"ttl must be a number of minutes above 0 and at most "
                           f"{MAX_TTL_MINUTES:,}, or None for no expiry; not {value!r:.60}")
    return float(value)


def _expiry(now: datetime, ttl: float | None) -> str | None:
    return None if ttl is None else iso(now + timedelta(minutes=float(ttl)))


def _created(item: LedgerItem) -> str:
    """When the key was first put. Items written before ``created_at`` was kept in the
    metadata had ``updated_at`` stamped a moment before the item itself."""
    meta = _meta(item)
    return str(meta.get("created_at") or min(item.created_at, meta["updated_at"]))


def _check_size(key: str, meta: Mapping[str, Any], text: str) -> None:
    """Refuse a value whose item metadata would be over ``MAX_JSON_CHARS`` of JSON, with
    an error naming the limit: a store returns what was put, so a value is never cut."""
    flags = {"truncated": True, "original_length": len(text.strip())} \
        if len(text.strip()) > MAX_CONTENT else {}
    try:
        size = json_chars({META: meta, **flags})
    except (TypeError, ValueError):
        return   # not JSON (NaN…): the store refuses it, saying why
    if size > MAX_JSON_CHARS:
        raise InvalidInput(
            f"the value of key {key!r:.60} is too long: stored with its namespace and key "
            f"it is {size:,} characters of JSON, and a LedgermemStore item holds at most "
            f"{MAX_JSON_CHARS:,} (ledgermem.validation.MAX_JSON_CHARS)")


def _expired(item: LedgerItem, now: str) -> bool:
    expires = _meta(item).get("expires_at")
    return expires is not None and expires <= now


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _matches(value: Any, wanted: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter: exact values (nested dicts and lists compared as JSON) or
    the operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``."""
    if not wanted:
        return True
    return isinstance(value, Mapping) and all(
        _compare(value.get(key), expected) for key, expected in wanted.items())


def _compare(value: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        if any(str(k).startswith("$") for k in expected):
            return all(_operator(value, op, operand) for op, operand in expected.items())
        return isinstance(value, Mapping) and all(
            _compare(value.get(k), v) for k, v in expected.items())
    if isinstance(expected, list | tuple):
        return isinstance(value, list | tuple) and len(value) == len(expected) and all(
            _compare(v, e) for v, e in zip(value, expected, strict=True))
    return bool(value == expected)


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _check_filter(wanted: Any) -> None:
    """Refuse an operator LangGraph's filters do not have, before any item is read."""
    if isinstance(wanted, Mapping):
        for key, value in wanted.items():
            if str(key).startswith("$") and key not in _OPERATORS:
                raise InvalidInput(f"unsupported filter operator {key!r} "
                                   f"({', '.join(_OPERATORS)})")
            _check_filter(value)
    elif isinstance(wanted, list | tuple):
        for value in wanted:
            _check_filter(value)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    try:
        left, right = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right,
            "$lte": left <= right}[op]


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path, strict=False) if condition.match_type == "prefix" \
        else zip(reversed(namespace), reversed(path), strict=False)
    return all(p == "*" or n == p for n, p in pairs)


def _as_item(item: LedgerItem) -> Item:
    meta = _meta(item)
    return Item(value=meta["value"], key=meta["key"], namespace=tuple(meta["namespace"]),
                created_at=datetime.fromisoformat(_created(item)),
                updated_at=datetime.fromisoformat(meta["updated_at"]))


def _as_search_item(item: LedgerItem, score: float | None) -> SearchItem:
    meta = _meta(item)
    return SearchItem(namespace=tuple(meta["namespace"]), key=meta["key"],
                      value=meta["value"], created_at=datetime.fromisoformat(_created(item)),
                      updated_at=datetime.fromisoformat(meta["updated_at"]), score=score)
