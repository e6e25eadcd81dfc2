"""What a session adapter keeps of a framework's item: whole when it fits, else cut.

A session adapter stores each item the framework hands it (an OpenAI Agents SDK input
item, an ADK event) as JSON in its turn's metadata, so the framework gets it back as it
was given. Turn metadata is capped at ``MAX_JSON_CHARS`` of JSON, while the frameworks'
own sessions take items of any size: one large tool output must not break a run. So an
item that fits is kept whole, and a longer one is kept with its longest strings cut
(each ends with a ``… [cut: N characters]`` marker) until it fits, and the turn says so
with the truncation keys knowledge items use (``truncated``, ``original_length``).

Framework-free: an adapter passes a ``valid`` check when its framework parses the item
back into a model (ADK's ``Event``), so the copy kept is always one the framework reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInput
from ..validation import MAX_JSON_CHARS, json_chars, json_object

__all__ = ["MIN_CUT_CHARS", "cut_strings", "item_metadata"]

MIN_CUT_CHARS = 100
"""Strings this long or shorter are never cut: ids, roles, names and enum values stay
whole, so a cut item still says what it is and where it belongs."""
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def item_metadata(key: str, item: Mapping[str, Any], around: Mapping[str, Any], *,
                  keep_whole: frozenset[str] = frozenset(),
                  valid: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The metadata of the turn that stores ``item``: ``{**around, key: item}`` when that
    is at most ``MAX_JSON_CHARS`` of JSON; else ``item`` with its longest strings cut
    until it fits, flagged with ``truncated`` and ``original_length`` (the item's own
    length as JSON).

    Args:
        key: the metadata key holding the item (``openai_item``, ``adk_event``).
        item: the item as JSON data.
        around: the rest of the turn's metadata, as it will be stored (the channel
            included), so the whole fits.
        keep_whole: top-level fields of the item never cut (data the framework reads
            back as such, like ADK's state deltas).
        valid: whether a cut copy is still an item the framework reads back; a copy it
            refuses is cut again with base64 strings (bytes) cut at a 4-character
            boundary and without the marker, which would make them unreadable.

    Raises:
        InvalidInput: an item that cannot be stored (see ``json_object``), or one too
            long even with every string over ``MIN_CUT_CHARS`` cut to that.
    """
    whole = {**around, key: dict(item)}
    try:
        if _size(whole) <= MAX_JSON_CHARS:
            return whole
    except (TypeError, ValueError, RecursionError):
        return whole  # not JSON: the store refuses it, saying why
    data = json_object(item, "a session item", max_chars=None)
    length = _size(data)
    flags = {"truncated": True, "original_length": length}
    # the item's room: the cap less the rest of the metadata around an empty object
    room = MAX_JSON_CHARS - (_size({**around, key: {}, **flags}) - len("{}"))
    for bare in (False, True):
        cut = _cut_to_fit(data, room, keep_whole, bare=bare)
        if cut is None:
            kept = f" (beside {', '.join(sorted(keep_whole))}, kept whole)" \
                if keep_whole else ""
            raise InvalidInput(
                f"a session item is {length:,} characters as JSON and stays over "
                f"{MAX_JSON_CHARS:,} with every string cut to {MIN_CUT_CHARS} "
                f"characters{kept}")
        if valid is None or valid(cut):
            return {**around, key: cut, **flags}
    raise InvalidInput(f"a session item is {length:,} characters as JSON, over "
                       f"{MAX_JSON_CHARS:,}, and no cut copy of it is still valid")


def cut_strings(value: Any, keep: int, *, bare: bool = False) -> Any:
    """A copy of JSON data with every string longer than ``keep`` characters cut to its
    first ``keep`` and a ``… [cut: N characters]`` marker (when that is shorter).
    ``bare``: a string of base64 characters is cut at a multiple of 4 characters without
    the marker, so it still decodes."""
    if isinstance(value, str):
        return _cut(value, keep, bare)
    if isinstance(value, Mapping):
        return {k: cut_strings(v, keep, bare=bare) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [cut_strings(v, keep, bare=bare) for v in value]
    return value


def _cut(text: str, keep: int, bare: bool) -> str:
    if len(text) <= keep:
        return text
    if bare and _BASE64.fullmatch(text):
        return text[:keep - keep % 4]
    cut = f"{text[:keep]}… [cut: {len(text) - keep:,} characters]"
    return cut if len(cut) < len(text) else text


def _cut_to_fit(data: dict[str, Any], room: int, keep_whole: frozenset[str], *,
                bare: bool) -> dict[str, Any] | None:
    """``data`` with its strings (outside the ``keep_whole`` fields) cut to the longest
    length that fits in ``room`` characters of JSON (found by bisection), or None when
    even ``MIN_CUT_CHARS`` does not fit."""
    def fitted(keep: int) -> dict[str, Any] | None:
        cut = {k: v if k in keep_whole else cut_strings(v, keep, bare=bare)
               for k, v in data.items()}
        return cut if _size(cut) <= room else None

    best = fitted(MIN_CUT_CHARS)
    if best is None:
        return None
    low, high = MIN_CUT_CHARS, max(_longest(data), MIN_CUT_CHARS)
    while high - low > 1:  # low fits; high does not (or is the longest string)
        middle = (low + high) // 2
        found = fitted(middle)
        if found is None:
            high = middle
        else:
            low, best = middle, found
    return best


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return max((_longest(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return max((_longest(v) for v in value), default=0)
    return 0


_size = json_chars
"""Length as JSON, counted as ``json_object`` counts it."""
