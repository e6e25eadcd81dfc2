"""The plumbing every per-user handle shares: scope, clock, ledger events, lookups.

``UserMemory`` (what ``Memory.for_user`` returns) is built in three layers:

- ``UserHandle`` (here): the scope, ``user_id``, ``memory``, ``flush`` and the helpers
  the other layers use to stamp times, build ledger events and fetch items;
- ``UserKnowledge`` (``knowledge.py``): knowledge items, their writes, versions and reads;
- ``UserMemory`` (``user_memory.py``): conversations, tool calls, observability and
  housekeeping.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from .clock import iso
from .domain.events import Kind, Payload, new_event
from .retrieval.hybrid import Searcher, SearchOptions
from .types import Event, Item, Scope
from .validation import check_choice

if TYPE_CHECKING:
    from .memory import Memory

__all__ = ["TIME_MODES", "TimeMode", "UserHandle"]

TimeMode = Literal["boost", "filter", "off"]
TIME_MODES: tuple[TimeMode, ...] = ("boost", "filter", "off")
"""What a search does with a time expression in its query ("last week", "in May 2023"):
rank the rows inside the window it names higher, keep only those rows, or ignore it."""


class UserHandle:
    """The base of ``UserMemory``: one user's scope and the plumbing its methods share.

    Not meant to be used on its own; ``Memory.for_user`` returns a ``UserMemory``.
    """

    def __init__(self, memory: Memory, scope: Scope) -> None:
        self._memory = memory
        self._store = memory.store
        self._writer = memory.writer
        self.scope = scope

    @property
    def user_id(self) -> str:
        return self.scope.user_id

    @property
    def memory(self) -> Memory:
        """The ``Memory`` this handle belongs to."""
        return self._memory

    def flush(self) -> int:
        """Finish pending background work (see ``Memory.flush``)."""
        return self._memory.flush()

    # plumbing ---------------------------------------------------------------------
    def _now(self) -> str:
        return iso(self._memory.clock())

    def _event(
        self, kind: Kind, payload: Payload | dict[str, Any], *, subject_id: str | None = None,
        session_id: str | None = None, ts: str | None = None,
    ) -> Event:
        return new_event(self.scope, ts or self._now(), kind, payload, subject_id=subject_id,
                         session_id=session_id)

    def _require(self, item_id: str) -> Item:
        return self._writer.require(self.user_id, item_id)

    def _when(self, value: str | datetime | None) -> str | None:
        return self._memory._when(value)

    def _searcher(self, time_mode: TimeMode | None, min_score: float | None = None
                  ) -> Searcher:
        searcher = self._memory.searcher
        if min_score is not None:
            searcher = searcher.with_options(min_score=min_score)
        if time_mode is None:
            return searcher
        check_choice("time_mode", time_mode, TIME_MODES)
        if time_mode == "off":
            return searcher.with_options(time_weight=0.0, time_filter=False)
        if time_mode == "filter":
            return searcher.with_options(time_filter=True)
        weight = searcher.options.time_weight or SearchOptions.time_weight
        return searcher.with_options(time_weight=weight, time_filter=False)
