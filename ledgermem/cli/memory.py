"""``ledgermem`` commands over one user's memory: its knowledge items (remember,
remember-many, recall, list, get, update, forget, restore, history, upcoming) and its
conversations (add-turn, add-turns)."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

import click
from rich.table import Table

from ..errors import InvalidInput
from ..memory import TIME_MODES, TimeMode
from ..store.sql import SORTABLE
from ..types import CATEGORIES, SOURCES, Event, Turn
from .core import (
    MAX_DAYS,
    MAX_INT,
    ROLES,
    TURN_FIELDS,
    Context,
    _fields_table,
    _item_line,
    _items_table,
    _table,
    command,
    main,
    shown,
)


# knowledge --------------------------------------------------------------------------
@command(main)
@click.argument("content")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default="fact",
              show_default=True)
@click.option("--source", type=click.Choice(SOURCES), default="user", show_default=True)
@click.option("--context", default="global", show_default=True)
@click.option("--entity", default=None, help="type:name, e.g. person:sarah_chen")
@click.option("--confidence", type=float, default=None)
@click.option("--sensitive", is_flag=True)
@click.option("--due", "due_at", default=None, help="Due date in any common form.")
def remember(obj: Context, content: str, category: str, source: str, context: str,
             entity: str | None, confidence: float | None, sensitive: bool,
             due_at: str | None) -> None:
    """Store a knowledge item."""
    item = obj.handle(context, create=True).remember(
        content, category, source=source, entity=entity, confidence=confidence,
        sensitive=sensitive, due_at=due_at)
    obj.settle()
    verb = "merged into" if getattr(item, "written", None) == "merged" else "remembered"
    obj.emit(item, lambda: obj.console.print(_item_line(verb, item)))


@command(main, "remember-many")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--no-dedup", is_flag=True,
              help="Add every entry, even one that restates a stored item or an earlier entry.")
def remember_many(obj: Context, file: str, no_dedup: bool) -> None:
    """Store the entries of FILE (or - for stdin) in one transaction: a JSON list, or
    JSON Lines, of texts or objects with "content" and remember's fields ("category",
    "context", "entity", "sensitive", "due_at", "metadata"…). Each entry is
    deduplicated as `remember` would; a bad entry stores nothing."""
    wheres: list[str] = []
    try:
        with click.open_file(file, "r", encoding="utf-8") as source:
            entries = _read_entries(source.read(), file)
        wheres = [where for where, _ in entries]
        items = obj.handle(create=True).remember_many(
            [entry for _, entry in entries], dedup=False if no_dedup else None)
    except InvalidInput as exc:
        raise InvalidInput(f"{_located(str(exc), wheres)}; nothing was stored") from exc
    obj.settle()
    merged = sum(item.written == "merged" for item in items)
    obj.emit(items, lambda: obj.console.print(
        f"remembered {len(items)} entries: added {len(items) - merged}, merged {merged}"))


def _read_entries(text: str, name: str) -> list[tuple[str, Any]]:
    """The entries of a ``remember-many`` file, each with where it is in the file: a
    JSON list when the text starts with ``[``, else JSON Lines."""
    if text.lstrip().startswith("["):
        document: list[Any] = _json(text, name)
        entries = [(f"{name}, item {n}", entry) for n, entry in enumerate(document)]
    else:
        entries = [(where, _json(line.strip(), where))
                   for where, line in _json_lines(io.StringIO(text), name)]
    if not entries:
        raise InvalidInput(f"{name} holds no entries")
    return entries


def _json(text: str, where: str) -> Any:
    """``text`` decoded as JSON, or InvalidInput naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = f" at line {exc.lineno}, column {exc.colno}" if "\n" in text else ""
        raise InvalidInput(f"{where}: not JSON ({exc.msg}{at})") from exc
    except RecursionError as exc:  # the decoder recurses once per [ or {
        raise InvalidInput(f"{where}: JSON nested too deeply to read") from exc


def _located(message: str, wheres: Sequence[str]) -> str:
    """``remember_many``'s "item N: …" (``add_turns``' "turn N: …") with where entry N
    is in the file instead."""
    found = re.fullmatch(r"(?:item|turn) (\d+): (.*)", message, re.DOTALL)
    if found is None or int(found[1]) >= len(wheres):
        return message
    return f"{wheres[int(found[1])]}: {found[2]}"


@command(main)
@click.argument("query")
@click.option("--top-k", "-k", type=click.IntRange(1, 10_000), default=5, show_default=True)
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None)
@click.option("--conversations", is_flag=True,
              help="Search past turns instead of knowledge (--category, --context and "
                   "--entity filter knowledge only).")
@click.option("--all", "everything", is_flag=True,
              help="Search knowledge and past turns together, in one list.")
@click.option("--time-mode", type=click.Choice(TIME_MODES), default=None,
              help="What a time in the query (\"last week\", \"in May 2023\") does: boost "
                   "the rows inside it (default), keep only them, or nothing.")
def recall(obj: Context, query: str, top_k: int, category: str | None, context: str | None,
           entity: str | None, conversations: bool, everything: bool,
           time_mode: TimeMode | None) -> None:
    """Search memory by keywords and meaning."""
    if conversations and everything:
        raise click.UsageError("--conversations and --all cannot be combined")
    if conversations:
        _refuse_knowledge_filters(category=category, context=context, entity=entity)
    handle = obj.handle()
    if conversations:
        hits = handle.search_conversations(query, limit=top_k, time_mode=time_mode)
    elif everything:
        hits = handle.search_all(query, top_k=top_k, category=category, context=context,
                                 entity=entity, time_mode=time_mode)
    else:
        hits = handle.search(query, top_k=top_k, category=category, context=context,
                             entity=entity, time_mode=time_mode)

    def render() -> None:
        if not hits:
            obj.console.print("nothing found")
            return
        table = _table(f"recall: {shown(query)}", ("score", "id", "content", "why"),
                       [hit.id for hit in hits])
        for hit in hits:
            why = ", ".join(f"{k}={v}" for k, v in hit.why.items())
            table.add_row(f"{hit.score:.3f}", shown(hit.id), shown(hit.content), shown(why))
        obj.console.print(table)

    obj.emit(hits, render)


def _refuse_knowledge_filters(**filters: str | None) -> None:
    """Refuse the filters given with ``--conversations``: past turns have no category,
    context or entity, and ``search_conversations`` takes none of them, so they would
    be silently ignored."""
    given = [f"--{name}" for name, value in filters.items() if value is not None]
    if given:
        listed = " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 1 else given)
        raise click.UsageError(f"{listed} cannot be combined with --conversations "
                               "(they filter knowledge, not past turns)")


@command(main, "list")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None)
@click.option("--sort", type=click.Choice(sorted(SORTABLE)), default="updated_at",
              show_default=True, help="The field to order the items by.")
@click.option("--order", type=click.Choice(["asc", "desc"]), default="desc", show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0, MAX_INT), default=0, show_default=True)
@click.option("--all", "include_superseded", is_flag=True, help="Include superseded items.")
def list_(obj: Context, category: str | None, context: str | None, entity: str | None,
          sort: str, order: str, limit: int, offset: int, include_superseded: bool) -> None:
    """List knowledge items."""
    page = obj.handle(embed=False).all_knowledge(
        category=category, context=context, entity=entity, sort=sort, order=order,
        limit=limit, offset=offset, include_superseded=include_superseded)
    obj.emit(page, lambda: obj.console.print(
        _items_table(page["items"], f"{page['total']} items (showing {len(page['items'])})")))


@command(main)
@click.argument("item_id")
@click.option("--as-of", default=None, help="The item as it was known then (any common "
                                            "date form).")
def get(obj: Context, item_id: str, as_of: str | None) -> None:
    """Show every field of one item (alias: show)."""
    item = obj.handle(embed=False).get(item_id, as_of=as_of)
    obj.emit(item, lambda: obj.console.print(
        _fields_table(f"memory {shown(item.id)}", dataclasses.asdict(item))))


show = copy.copy(main.commands["get"])
show.help, show.short_help = "Show every field of one item (same as get).", None
main.add_command(show, "show")


@command(main)
@click.argument("item_id")
@click.option("--content", default=None, help="New text (the old one stays in history).")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--confidence", type=float, default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None, help="type:name; an empty value clears it.")
@click.option("--sensitive/--not-sensitive", default=None)
@click.option("--due", "due_at", default=None, help="Due date; an empty value clears it.")
def update(obj: Context, item_id: str, content: str | None, category: str | None,
           confidence: float | None, context: str | None, entity: str | None,
           sensitive: bool | None, due_at: str | None) -> None:
    """Change some fields of an item; the others stay as they are."""
    changes: dict[str, Any] = {
        key: value for key, value in (("content", content), ("category", category),
                                      ("confidence", confidence), ("context", context),
                                      ("sensitive", sensitive))
        if value is not None}
    for key, value in (("entity", entity), ("due_at", due_at)):
        if value is not None:
            changes[key] = value if value.strip() else None
    if not changes:
        raise click.UsageError("nothing to change: give --content, --category, "
                               "--confidence, --context, --entity, --sensitive or --due")
    item = obj.handle(embed="content" in changes).update(item_id, **changes)
    obj.settle()
    obj.emit(item, lambda: obj.console.print(_item_line("updated", item)))


@command(main)
@click.argument("item_id")
def forget(obj: Context, item_id: str) -> None:
    """Delete an item and blank its text everywhere."""
    obj.handle(embed=False).forget(item_id)
    obj.emit({"forgotten": item_id}, lambda: obj.console.print(f"forgot {shown(item_id)}"))


@command(main)
@click.argument("item_id")
def restore(obj: Context, item_id: str) -> None:
    """Make a superseded or invalidated version active again (undo)."""
    item = obj.handle(embed=False).restore(item_id)
    obj.emit(item, lambda: obj.console.print(_item_line("restored", item)))


@command(main)
@click.argument("item_id")
def history(obj: Context, item_id: str) -> None:
    """Every change of an item, from the ledger."""
    events = obj.handle(embed=False).history(item_id)

    def render() -> None:
        table = Table(title=f"history of {shown(item_id)}")
        for column in ("ts", "kind", "payload"):
            table.add_column(column, overflow="fold")
        for event in events:
            table.add_row(event.ts, event.kind, shown(_summary(event)))
        obj.console.print(table)

    obj.emit(events, render)


def _summary(event: Event) -> str:
    payload = event.payload
    if "item" in payload:
        return str(payload["item"].get("content"))
    return json.dumps(payload, ensure_ascii=False)


@command(main)
@click.option("--days", type=click.FloatRange(0, MAX_DAYS), default=7, show_default=True,
              help="How far ahead to look.")
def upcoming(obj: Context, days: float) -> None:
    """Items due within --days, or overdue, that the user was not reminded of."""
    items = obj.handle(embed=False).upcoming(days)

    def render() -> None:
        table = _table(f"due within {days:g} days", ("id", "due", "content"),
                       [item.id for item in items])
        for item in items:
            table.add_row(shown(item.id), item.due_at or "", shown(item.content))
        obj.console.print(table)

    obj.emit(items, render)


# conversations ----------------------------------------------------------------------
session_option = click.option("--session", "session_id", default=None,
                              help="Session id. Default: USER:default.")
infer_option = click.option(
    "--infer", is_flag=True,
    help="Also queue the turns for extraction by the LLM of LEDGERMEM_LLM_BASE_URL and "
         "LEDGERMEM_LLM_MODEL, done before the command returns (without them they wait "
         "in the queue for `maintain`).")


def _keep_turns(obj: Context, turns: Sequence[Mapping[str, Any]], session_id: str | None,
                infer: bool) -> list[Turn]:
    from ..pipeline.extraction import ExtractionOptions

    options: dict[str, Any] = {}
    if infer:
        options = {"llm": obj.llm(), "extraction": ExtractionOptions(background=False)}
    kept = obj.handle(create=True, **options).add_turns(turns, session_id=session_id,
                                                        infer=infer)
    obj.settle()
    if infer and options["llm"] is None and not obj.as_json:
        click.echo("note: no LLM configured; the turns wait for extraction (see `status`)",
                   err=True)
    return kept


@command(main, "add-turn")
@click.argument("content")
@click.option("--role", type=click.Choice(ROLES), default="user", show_default=True)
@session_option
@click.option("--name", default=None, help="The speaker's name.")
@click.option("--at", default=None, help="When it was said (any common form). Default: now.")
@infer_option
def add_turn(obj: Context, content: str, role: str, session_id: str | None,
             name: str | None, at: str | None, infer: bool) -> None:
    """Keep one conversation message."""
    turn = _keep_turns(obj, [{"role": role, "content": content, "name": name, "at": at}],
                       session_id, infer)[0]
    obj.emit(turn, lambda: obj.console.print(
        f"kept turn [bold]{shown(turn.id)}[/] in session {shown(turn.session_id)}"))


@command(main, "add-turns")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@session_option
@infer_option
def add_turns(obj: Context, file: str, session_id: str | None, infer: bool) -> None:
    """Keep the messages of FILE (or - for stdin), JSON Lines of {"role", "content"} and
    optionally "name", "at", "metadata", in one transaction; a bad line stores nothing."""
    entries: list[tuple[str, dict[str, Any]]] = []
    try:
        with click.open_file(file, "r", encoding="utf-8") as source:
            entries = _read_turns(source, file)
        kept = _keep_turns(obj, [turn for _, turn in entries], session_id, infer)
    except InvalidInput as exc:
        raise InvalidInput(f"{_located(str(exc), [where for where, _ in entries])}; "
                           "nothing was stored") from exc
    obj.emit(kept, lambda: obj.console.print(
        f"kept {len(kept)} turns in session {shown(kept[0].session_id)}"))


def _read_turns(source: IO[str], name: str) -> list[tuple[str, dict[str, Any]]]:
    """The turns of an ``add-turns`` file, each with where it is in the file; a field
    ``add_turns`` would not read is refused rather than silently dropped."""
    from ..transfer import parse_object_line

    turns = []
    for where, line in _json_lines(source, name):
        turn = parse_object_line(line, where)
        unknown = sorted(set(turn) - set(TURN_FIELDS))
        if unknown:
            raise InvalidInput(f"{where}: unknown field {unknown[0]!r} (known: "
                               f"{', '.join(TURN_FIELDS)})")
        turns.append((where, turn))
    if not turns:
        raise InvalidInput(f"{name} holds no turns")
    return turns


def _json_lines(lines: Iterable[str], name: str) -> Iterator[tuple[str, str]]:
    """The lines of a JSON Lines file that are not blank, each with where it is
    (``FILE, line N``, for messages)."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield f"{name}, line {number}", line


