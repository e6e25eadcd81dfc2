"""Input checks shared by the API: each turns bad input into ``InvalidInput``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidInput
from .types import MAX_CONTENT

__all__ = [
    "ROLES",
    "TRUNCATION_KEYS",
    "check_choice",
    "check_confidence",
    "check_limit",
    "check_text",
    "clean_content",
    "clean_context",
    "clean_entity",
    "json_object",
    "merge_metadata",
]

ROLES = ("user", "assistant", "system", "tool")
TRUNCATION_KEYS = frozenset({"truncated", "original_length"})


def clean_content(content: Any, metadata: Mapping[str, Any] | None
                   ) -> tuple[str, dict[str, Any]]:
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("content must be non-empty text")
    check_text(content)
    meta = json_object(dict(metadata or {}), "metadata")
    text = content.strip()
    if len(text) > MAX_CONTENT:
        meta.update(truncated=True, original_length=len(text))
        text = text[:MAX_CONTENT]
    return text, meta


def check_text(text: str) -> None:
    """Refuse what no backend can store: NUL characters and lone surrogates."""
    if "\x00" in text:
        raise InvalidInput("text cannot contain NUL (U+0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"text is not valid Unicode: {exc.reason}") from exc


def merge_metadata(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` updated with ``new``; truncation flags describe the newest content only."""
    merged = {k: v for k, v in old.items() if k not in TRUNCATION_KEYS}
    merged.update(new)
    return merged


def json_object(value: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} must be JSON-serialisable: {exc}") from exc
    return value


def check_choice(what: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise InvalidInput(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")
    return str(value)


def check_confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidInput(f"confidence must be a number from 0 to 1, not {value!r}")
    return float(value)


def check_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 10_000:
        raise InvalidInput(f"limit must be a whole number from 1 to 10000, not {value!r}")
    return value


def clean_context(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("context must be non-empty text")
    return value.strip()


def clean_entity(value: Any) -> str | None:
    """``Person: Sarah Chen`` → ``person:sarah_chen``; ``None`` stays ``None``."""
    if value is None:
        return None
    if not isinstance(value, str) or value.count(":") < 1:
        raise InvalidInput(f"entity must look like 'type:name', not {value!r}")
    kind, name = value.split(":", 1)
    kind, name = kind.strip().lower(), "_".join(name.strip().lower().split())
    if not kind or not name:
        raise InvalidInput(f"entity must look like 'type:name', not {value!r}")
    return f"{kind}:{name}"
