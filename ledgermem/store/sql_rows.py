"""The views' rows as the SQL backends read them: column lists, the text a row is
embedded from, a row decoded into a typed value, and filters written as WHERE clauses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime
from operator import itemgetter
from typing import Any

import numpy as np

from ..types import Event, Item, ItemQuery, ToolCall, Turn
from .base import StoredKey, TurnQuery, Vector

ITEM_COLUMNS = (
    "id", "user_id", "agent_id", "category", "content", "domain", "source", "confidence",
    "context", "entity", "sensitive", "due_at", "reminded_at", "superseded_by", "valid_from",
    "valid_to", "created_at", "updated_at", "last_used_at", "use_count", "metadata",
)
TURN_COLUMNS = (
    "id", "user_id", "agent_id", "session_id", "role", "name", "content", "ts",
    "consolidated_at", "metadata",
)
TOOL_COLUMNS = (
    "id", "user_id", "agent_id", "session_id", "name", "arguments", "success", "duration_ms",
    "error", "ts",
)
EVENT_COLUMNS = (
    "id", "ts", "user_id", "agent_id", "session_id", "kind", "subject_id", "payload",
    "visibility",
)
KEY_COLUMNS = (
    "key_id", "user_id", "agent_id", "label", "admin", "secret_hash", "created_at",
    "revoked_at",
)
SORTABLE = frozenset(
    {"created_at", "updated_at", "confidence", "last_used_at", "use_count", "category", "due_at"}
)
REDACTED = "[forgotten]"
PIPELINE_TABLES = ("llm_calls", "comparisons")
"""Views the write pipeline derives from ``llm.called`` and ``memory.compared`` events."""
_EMBED_TEXT = {"knowledge": "{t}content",
               "conversations": "coalesce({t}name || ': ', '') || {t}content"}
EMBED_TEXT = {table: text.format(t="") for table, text in _EMBED_TEXT.items()}
"""The text a row is embedded from, per table: a turn is embedded with its speaker's
name ("Caroline: I went to a support group"), since questions name people."""


def embed_text(table: str, alias: str) -> str:
    """``EMBED_TEXT[table]`` read from the row ``alias`` names: beside
    ``embedding_staging``, whose text column is ``content`` too, a bare column would be
    the staging row's."""
    return _EMBED_TEXT[table].format(t=f"{alias}.")
CONTEXT_TURNS = 2
"""Neighbouring turns on each side whose text is indexed with a turn."""
NEIGHBOUR_SMOOTHING = 0.5
"""Vector search scores a turn as cosine + this × its best neighbour's cosine: an
answer often sits in the turn next to the one that matches the question."""


def spoken_day(timestamp: str) -> str:
    """``2023-05-08T13:56:00+00:00`` → ``8 May 2023 Monday``: the day in words, so
    keyword search matches questions that name a date or month."""
    moment = datetime.fromisoformat(timestamp)
    return f"{moment.day} {moment:%B %Y %A}"


def _in_field_order(kind: type, columns: Sequence[str], last: str) -> Callable[[Any], Any]:
    """The values of a row of ``columns`` in the order of ``kind``'s fields, up to its
    field ``last`` (excluded): a search builds dozens of rows, and positional
    arguments cost half of keywords from a dict."""
    return itemgetter(*(columns.index(name) for name in _fields_before(kind, last)))


def _fields_before(kind: type, last: str) -> list[str]:
    names = [f.name for f in fields(kind)]
    return names[: names.index(last)]


def _metadata(raw: str | None) -> dict[str, Any]:
    return json.loads(raw) if raw and raw != "{}" else {}


_ITEM_VALUES = _in_field_order(Item, ITEM_COLUMNS, "metadata")
_ITEM_METADATA = ITEM_COLUMNS.index("metadata")
_ITEM_CONFIDENCE = _fields_before(Item, "metadata").index("confidence")
_ITEM_SENSITIVE = _fields_before(Item, "metadata").index("sensitive")
_TURN_VALUES = _in_field_order(Turn, TURN_COLUMNS, "metadata")
_TURN_METADATA = TURN_COLUMNS.index("metadata")
_TURN_NAME = TURN_COLUMNS.index("name")
_ITEM: Callable[..., Item] = Item   # built from positional values (not checkable)
_TURN: Callable[..., Turn] = Turn


def item_from_row(row: Sequence[Any]) -> Item:
    values = list(_ITEM_VALUES(row))
    # The driver's types (a 0/1 integer, a Decimal) as the item's.
    values[_ITEM_SENSITIVE] = bool(values[_ITEM_SENSITIVE])
    values[_ITEM_CONFIDENCE] = float(values[_ITEM_CONFIDENCE])
    return _ITEM(*values, metadata=_metadata(row[_ITEM_METADATA]))


def turn_from_row(row: Sequence[Any]) -> Turn:
    metadata = _metadata(row[_TURN_METADATA])
    name = row[_TURN_NAME]
    if name is not None:
        metadata.setdefault("name", name)
    return _TURN(*_TURN_VALUES(row), metadata=metadata)


def tool_from_row(row: Sequence[Any]) -> ToolCall:
    values = dict(zip(TOOL_COLUMNS, row, strict=True))
    values["arguments"] = json.loads(values["arguments"] or "{}")
    values["success"] = bool(values["success"])
    return ToolCall(**values)


def key_from_row(row: Sequence[Any]) -> StoredKey:
    key_id, user_id, agent_id, label, admin, secret_hash, created_at, revoked_at = row
    return StoredKey(key_id, user_id, agent_id, label, bool(admin), secret_hash, created_at,
                     revoked_at)


def event_from_row(row: Sequence[Any]) -> Event:
    values = dict(zip(EVENT_COLUMNS, row, strict=True))
    values["payload"] = json.loads(values["payload"])
    return Event(**values)


def embedded_table(table: str) -> str:
    """``table`` if it holds embeddings (a guard before it is put into SQL)."""
    if table not in ("knowledge", "conversations"):
        raise ValueError(f"no embedded table {table!r}")
    return table



def item_where_sql(user_id: str, query: ItemQuery, prefix: str = "", *,
                   by_id: bool = False, digest: bool = False) -> tuple[str, list[Any]]:
    """WHERE clause (without the keyword) for knowledge filters; ``prefix`` is a table alias.

    ``by_id`` says rows will also be picked by id: SQLite is then told (``+user_id``) not
    to scan the user's whole scope through the user index instead of looking ids up.
    ``digest``: an exact text is found by ``md5(content)`` (PostgreSQL's index, usable
    under row-level security) instead of a prefix of it (SQLite's).
    """
    p = prefix
    clauses: list[str] = [f"+{p}user_id = ?" if by_id else f"{p}user_id = ?"]
    params: list[Any] = [user_id]
    if not query.include_superseded:
        clauses.append(f"{p}superseded_by IS NULL AND {p}valid_to IS NULL")
    texts = (query.content,) if query.content is not None else query.contents
    if texts is not None and not texts:
        clauses.append("1 = 0")
    elif texts is not None and digest:
        clauses.append(f"md5({p}content) IN ({', '.join(['md5(?)'] * len(texts))}) AND "
                       f"{p}content IN ({marks(len(texts))})")
        params.extend([*texts, *texts])
    elif texts is not None:
        # The prefix lets an expression index find the row. `|| ''` keeps SQLite from
        # substituting the full text into the prefix expression, which hides the index.
        clauses.append(f"substr({p}content, 1, 64) IN ({marks(len(texts))}) AND "
                       f"{p}content || '' IN ({marks(len(texts))})")
        params.extend([*(text[:64] for text in texts), *texts])
    for column in ("category", "context", "entity", "source"):
        value = getattr(query, column)
        if value is not None:
            clauses.append(f"{p}{column} = ?")
            params.append(value)
    if query.sensitive is not None:
        clauses.append(f"{p}sensitive = ?")
        params.append(query.sensitive)
    if query.time_from is not None:
        clauses.append(f"{p}created_at >= ?")
        params.append(query.time_from)
    if query.time_to is not None:
        clauses.append(f"{p}created_at <= ?")
        params.append(query.time_to)
    if query.valid_from_min is not None:
        clauses.append(f"coalesce({p}valid_from, {p}created_at) >= ?")
        params.append(query.valid_from_min)
    if query.valid_from_max is not None:
        clauses.append(f"coalesce({p}valid_from, {p}created_at) <= ?")
        params.append(query.valid_from_max)
    if query.ids is not None:
        clauses.append(f"{p}id IN ({marks(len(query.ids)) or 'NULL'})")
        params.extend(query.ids)
    return " AND ".join(clauses), params


def turn_where_sql(user_id: str, query: TurnQuery, prefix: str = "", *,
                   by_id: bool = False) -> tuple[str, list[Any]]:
    """WHERE clause (without the keyword) for conversation filters (see ``item_where_sql``)."""
    p = prefix
    clauses: list[str] = [f"+{p}user_id = ?" if by_id else f"{p}user_id = ?"]
    params: list[Any] = [user_id]
    if query.session_id is not None:
        clauses.append(f"{p}session_id = ?")
        params.append(query.session_id)
    if query.role is not None:
        clauses.append(f"{p}role = ?")
        params.append(query.role)
    if query.time_from is not None:
        clauses.append(f"{p}ts >= ?")
        params.append(query.time_from)
    if query.time_to is not None:
        clauses.append(f"{p}ts <= ?")
        params.append(query.time_to)
    if query.ids is not None:
        clauses.append(f"{p}id IN ({marks(len(query.ids)) or 'NULL'})")
        params.extend(query.ids)
    return " AND ".join(clauses), params


def marks(count: int) -> str:
    """``count`` placeholders, comma-separated."""
    return ", ".join("?" * count)


def pk_text_values(count: int) -> str:
    """A VALUES list of ``count`` (pk, text) pairs: ``column1`` and ``column2``."""
    return ", ".join(["(CAST(? AS BIGINT), ?)"] * count)



def vector_of(value: Any) -> Vector:
    """A stored embedding as float32: a BLOB (SQLite) or an array-like (pgvector)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(value, dtype=np.float32)
    return np.asarray(value, dtype=np.float32)

