"""Input checks shared by the API: each turns bad input into ``InvalidInput``.

One validation for every backend: what reaches a store is text both SQLite and
PostgreSQL keep (no NUL, which PostgreSQL refuses in text and in ``jsonb`` strings, and
no lone surrogates, which no UTF-8 encoder takes), numbers in range, and the types the
store expects. A store never sees input these checks would refuse, so a database the
default store wrote can always be migrated to PostgreSQL.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .errors import InvalidInput
from .types import MAX_CONTENT, Scope

__all__ = [
    "MAX_DAYS",
    "MAX_JSON_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_NAME_CHARS",
    "MAX_OFFSET",
    "ROLES",
    "TRUNCATION_KEYS",
    "Limits",
    "check_bool",
    "check_choice",
    "check_confidence",
    "check_days",
    "check_filters",
    "check_id",
    "check_ids",
    "check_json",
    "check_limit",
    "check_limits",
    "check_name",
    "check_number",
    "check_offset",
    "check_optional_limit",
    "check_optional_name",
    "check_optional_text",
    "check_query",
    "check_scope",
    "check_text",
    "check_turn_content",
    "check_turns",
    "clean_content",
    "clean_context",
    "clean_entity",
    "json_chars",
    "json_object",
    "merge_metadata",
]

ROLES = ("user", "assistant", "system", "tool")
TRUNCATION_KEYS = frozenset({"truncated", "original_length"})
MAX_NAME_CHARS = 1_000
"""Longest identifier: user, agent and session ids, context, domain, tool name, and
each side of an entity's ``type:name``."""
MAX_DAYS = 100_000
"""Longest span a ``days`` argument may name (about 270 years), so that the clock plus
or minus it is always a date."""
MAX_OFFSET = 2**63 - 1
"""Largest offset a store can bind (a signed 64-bit integer)."""
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class Limits:
    """Size limits on input, checked before anything is stored, embedded or searched.

    Attributes:
        max_query_chars: longest search query (``search``, ``search_all``,
            ``search_conversations``). Embedders read at most their model's context
            anyway (a longer query is cut, and its hits say ``query_truncated``); this
            bounds the rest of the work (keyword terms, time expressions).
        max_turn_chars: longest conversation turn (``add_turn``, ``add_turns``) and tool
            error message. Knowledge items are cut to 2,000 characters instead (and
            flagged in their metadata).

    Example:
        >>> Memory(store, limits=Limits(max_turn_chars=20_000))  # doctest: +SKIP
    """

    max_query_chars: int = 10_000
    max_turn_chars: int = 100_000

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{field.name} must be a positive whole number, "
                                   f"not {_show(value)}")


def _show(value: Any) -> str:
    """``repr(value)``, cut short: an error message must not echo 100 kB of input."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


# text -------------------------------------------------------------------------------
def check_text(text: str, what: str = "text") -> None:
    """Refuse what no backend can store: NUL characters and lone surrogates."""
    if "\x00" in text:
        raise InvalidInput(f"{what} cannot contain NUL (U+0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} is not valid Unicode: {exc.reason}") from exc


def check_optional_text(value: Any, what: str, max_chars: int | None = None) -> str | None:
    """Free text (a reason, an error message) or None: storable, at most ``max_chars``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be text, not {type(value).__name__}")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{what} is {len(value):,} characters; the limit is {max_chars}")
    check_text(value, what)
    return value


def check_name(value: Any, what: str) -> str:
    """An identifier (user id, session id, context, domain, tool name): non-blank
    storable text of at most ``MAX_NAME_CHARS``, returned as given."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{what} must be non-empty text, not {_show(value)}")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{what} is {len(value):,} characters; the limit is "
                           f"{MAX_NAME_CHARS}")
    check_text(value, what)
    return value


def check_optional_name(value: Any, what: str) -> str | None:
    """``check_name``, with None allowed."""
    return None if value is None else check_name(value, what)


def check_id(value: Any, what: str = "id") -> str:
    """An id a caller passes back (an item's, a turn's): storable text."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be non-empty text, not {_show(value)}")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{what} is {len(value):,} characters; no id is that long")
    check_text(value, what)
    return value


def check_ids(values: Any, what: str = "ids") -> list[str] | None:
    """A sequence of ids (``turn_ids``) as a list, or None."""
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise InvalidInput(f"{what} must be a list of ids, not {_show(values)}")
    return [check_id(value, what) for value in values]


def check_query(value: Any, limits: Limits) -> str:
    """A search query: text of at most ``limits.max_query_chars``.

    NUL and lone surrogates are not refused here: a query is never stored, and search
    drops what no store or model can take.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"a query must be text, not {type(value).__name__}")
    if len(value) > limits.max_query_chars:
        raise InvalidInput(f"the query is {len(value):,} characters; the limit is "
                           f"{limits.max_query_chars} characters (Limits.max_query_chars)")
    return value


def check_turn_content(value: Any, limits: Limits) -> str:
    """A turn's content: non-blank storable text of at most ``limits.max_turn_chars``."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("a turn's content must be non-empty text")
    if len(value) > limits.max_turn_chars:
        raise InvalidInput(f"a turn is {len(value):,} characters; the limit is "
                           f"{limits.max_turn_chars} (Limits.max_turn_chars)")
    check_text(value, "a turn's content")
    return value


def clean_content(content: Any, metadata: Any) -> tuple[str, dict[str, Any]]:
    """A knowledge item's content (stripped, cut to ``MAX_CONTENT`` and flagged in the
    metadata when longer) and its metadata (see ``json_object``)."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("content must be non-empty text")
    check_text(content, "content")
    meta = json_object(metadata, "metadata")
    text = content.strip()
    if len(text) > MAX_CONTENT:
        meta.update(truncated=True, original_length=len(text))
        text = text[:MAX_CONTENT]
    return text, meta


def clean_context(value: Any) -> str:
    """A context, stripped."""
    return check_name(value, "context").strip()


def clean_entity(value: Any) -> str | None:
    """``Person: Sarah Chen`` → ``person:sarah_chen``; ``None`` stays ``None``."""
    if value is None:
        return None
    if not isinstance(value, str) or value.count(":") < 1:
        raise InvalidInput(f"entity must look like 'type:name', not {_show(value)}")
    kind, name = value.split(":", 1)
    kind, name = kind.strip().lower(), "_".join(name.strip().lower().split())
    if not kind or not name:
        raise InvalidInput(f"entity must look like 'type:name', not {_show(value)}")
    if max(len(kind), len(name)) > MAX_NAME_CHARS:
        raise InvalidInput(f"an entity's type and name are at most {MAX_NAME_CHARS} "
                           "characters each")
    check_text(kind, "entity")
    check_text(name, "entity")
    return f"{kind}:{name}"


def check_scope(scope: Scope) -> Scope:
    """A handle's scope (``Memory.for_user``): every id is an identifier both backends
    can store; they are kept as given, not stripped."""
    check_name(scope.user_id, "user_id")
    check_optional_name(scope.agent_id, "agent_id")
    check_optional_name(scope.session_id, "session_id")
    check_name(scope.context, "context")
    return scope


def check_limits(value: Any) -> Limits:
    """``Memory(limits=…)``: a ``Limits``, or None for the defaults."""
    if value is None:
        return Limits()
    if not isinstance(value, Limits):
        raise InvalidInput(f"limits must be a Limits, not {type(value).__name__}")
    return value


# metadata ---------------------------------------------------------------------------
MAX_JSON_CHARS = 100_000
"""Longest JSON object (item and turn metadata, tool-call arguments), counted as its JSON
text: the same bound as a turn (``Limits.max_turn_chars``). It is stored twice, in the
ledger and in a view, and read back with every hit."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of a JSON object a caller writes (item and turn metadata, tool-call
arguments, event payloads): the object itself is level 1, each object or list inside it
one level more. Real metadata is a few levels deep. The cap keeps every stored value
readable: the REST server's serialiser (pydantic) stops at 255 levels, counted from the
response around the value (a list of hits, an export), and Python's ``json`` near the
recursion limit. A value stored deeper than either made every later read of it fail."""


def json_object(value: Any, what: str, max_chars: int | None = MAX_JSON_CHARS
                ) -> dict[str, Any]:
    """A JSON object both backends store and every read can serialise again (``None`` →
    ``{}``): text keys, no NUL, lone surrogate, NaN or infinity anywhere in it, nested at
    most ``MAX_JSON_DEPTH`` levels, and at most ``max_chars`` long as JSON (None: the
    caller checks the length)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what} must be a mapping (a JSON object), not "
                           f"{type(value).__name__}")
    result = dict(value)
    check_json(result, what)
    try:
        size = json_chars(result)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{what} must be JSON-serialisable: {exc}") from exc
    if max_chars is not None and size > max_chars:
        raise InvalidInput(f"{what} is {size:,} characters as JSON, longer than "
                           f"{max_chars:,}")
    return result


def json_chars(value: Any) -> int:
    """How long ``value`` is as JSON, as the limits on JSON count it (characters, not
    bytes). Raises ``ValueError`` for NaN or infinity and ``TypeError`` for what JSON
    cannot hold."""
    return len(json.dumps(value, allow_nan=False, ensure_ascii=False))


def check_json(value: Any, what: str) -> None:
    """Refuse what no store keeps or no read serialises again, anywhere in a JSON value:
    unstorable text (``check_text``), keys that are not text, and containers nested
    deeper than ``MAX_JSON_DEPTH`` (``json_object``'s walk, without its size check)."""
    _check_json(value, what, 1)


def _check_json(value: Any, what: str, depth: int) -> None:
    """``check_json`` of ``value`` at level ``depth``. The walk stops at the cap, so a
    value nested past the recursion limit, or one that holds itself, is refused the
    same way."""
    if isinstance(value, str):
        check_text(value, what)
        return
    if isinstance(value, dict | list | tuple):
        pass                    # JSON's own types, tested first: an ABC check is slower
    elif not isinstance(value, Mapping):
        return
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
    children: Iterable[Any] = value
    if isinstance(value, dict | Mapping):
        for key in value:
            if not isinstance(key, str):
                raise InvalidInput(f"{what} keys must be text, not {_show(key)}")
            check_text(key, f"{what} key")
        children = value.values()
    for child in children:
        _check_json(child, what, depth + 1)


def merge_metadata(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` updated with ``new``; truncation flags describe the newest content only."""
    merged = {k: v for k, v in old.items() if k not in TRUNCATION_KEYS}
    merged.update(new)
    return merged


# numbers and choices ----------------------------------------------------------------
def check_choice(what: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(f"unknown {what} {_show(value)}; expected one of "
                           f"{', '.join(allowed)}")
    return value


def check_number(value: Any, what: str, low: float, high: float) -> float:
    """A finite real number from ``low`` to ``high`` (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number, not {_show(value)}")
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        raise InvalidInput(f"{what} must be a number from {low:g} to {high:g}, "
                           f"not {_show(value)}")
    return float(value)


def check_bool(value: Any, what: str) -> bool:
    """A flag: True or False only (``bool("no")`` is True, so nothing else is read as
    one)."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{what} must be True or False, not {_show(value)}")
    return value


def check_confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidInput(f"confidence must be a number from 0 to 1, not {_show(value)}")
    return float(value)


def check_days(value: Any, what: str = "days") -> float:
    """A span in days: a number from 0 to ``MAX_DAYS`` (a negative span would reach into
    the future: ``prune(days=-1)`` would prune what was just written)."""
    return check_number(value, what, 0, MAX_DAYS)


def check_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}, "
                           f"not {_show(value)}")
    return value


def check_optional_limit(value: Any) -> int | None:
    """``check_limit``, with None (no limit) allowed."""
    return None if value is None else check_limit(value)


def check_offset(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OFFSET:
        raise InvalidInput(f"offset must be a whole number from 0 to 2**63 - 1, "
                           f"not {_show(value)}")
    return value


_UNSET: Any = object()


def check_filters(*, context: Any = None, session_id: Any = None, name: Any = None,
                  sensitive: Any = None, sort: Any = _UNSET, offset: Any = _UNSET) -> None:
    """The filters of a read, as both backends can bind them: ``context``,
    ``session_id`` and a tool's ``name`` are identifiers (or None), ``sensitive`` a bool
    (or None), ``sort`` text, ``offset`` a 64-bit whole number ≥ 0."""
    check_optional_name(context, "context")
    check_optional_name(session_id, "session_id")
    check_optional_name(name, "name")
    if sensitive is not None:
        check_bool(sensitive, "sensitive")
    if sort is not _UNSET and not isinstance(sort, str):
        raise InvalidInput(f"sort must be a column name, not {_show(sort)}")
    if offset is not _UNSET:
        check_offset(offset)


def check_turns(turns: Any) -> list[Mapping[str, Any]]:
    """``add_turns``' argument as a list of mappings."""
    if isinstance(turns, str | bytes | Mapping) or not isinstance(turns, Iterable):
        raise InvalidInput("turns must be a list of dicts with 'role' and 'content'")
    found = list(turns)
    for turn in found:
        if not isinstance(turn, Mapping):
            raise InvalidInput(f"a turn must be a dict with 'role' and 'content', "
                               f"not {_show(turn)}")
    return found
