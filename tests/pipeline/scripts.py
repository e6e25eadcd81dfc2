"""Helpers that write scripted LLM answers and long-enough turns."""

from __future__ import annotations

import re
from typing import Any

from ledgermem import Event, UserMemory


def ops(*operations: dict[str, Any]) -> dict[str, Any]:
    """An extraction answer."""
    return {"operations": list(operations)}


def add(content: str, **fields: Any) -> dict[str, Any]:
    return {"op": "ADD", "content": content, **fields}


def said(user: UserMemory, text: str, reply: str | None = None, **options: Any) -> list[str]:
    """Add a user turn (and optionally the assistant's reply) with ``infer=True``;
    returns the turn ids."""
    turns = [{"role": "user", "content": text}]
    if reply is not None:
        turns.append({"role": "assistant", "content": reply})
    return [t.id for t in user.add_turns(turns, infer=True, **options)]


def turns_section(prompt: str) -> str:
    """The new-turns part of an extraction prompt (not the memory items shown)."""
    return prompt.split("New conversation turns:", 1)[-1]


def aliases(prompt: str) -> dict[str, str]:
    """Alias → item content, as shown in an extraction prompt."""
    items = prompt.split("Memory items:", 1)[-1].split("New conversation turns:", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\[(\d+)\] \([^)]*\) (.*)$", items,
                                                        re.MULTILINE)}


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


LONG = ("and that is something I would really like you to keep in mind for all of our "
        "future conversations together")
"""Padding that takes a turn over the 20-word threshold."""
