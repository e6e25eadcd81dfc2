"""Recall bookkeeping, off the search path.

A search that returns items notes them here and returns; it never waits on a write.
The ``RecallWorker`` thread applies what was noted every ``interval_s`` seconds as one
``memory.recalled`` ledger event per user, dated by its latest search (so it is still
derived from the ledger and replayed by ``as_of``): coalesced per item, an item found
by many searches in one interval gains one use and one ``boost`` of confidence.
``flush`` applies everything noted so far in the caller's thread; ``close`` does too,
then stops.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..background import BackgroundWorker
from ..clock import Clock, iso
from ..errors import StoreClosed
from ..store.base import Store
from ..types import ItemQuery, Scope
from .events import ItemsTouched, Kind, new_event

__all__ = ["RECALL_BOOST", "RecallWorker"]

RECALL_BOOST = 0.02
"""Confidence an item gains each interval in which a search returned it."""


class RecallWorker(BackgroundWorker):
    """Collects recalled item ids per user and appends them in batches (module docs)."""

    thread_name = "ledgermem-recall"
    log_name = "ledgermem.recall"
    drains = False
    """One write per interval: while searches keep noting items, a worker draining them
    wrote a transaction after every few searches, each making the searches' connections
    read their pages again (hybrid search at 100,000 items: 7.4 → 11 ms at the median)."""

    def __init__(self, store: Store, clock: Clock, *, interval_s: float = 2.0,
                 boost: float = RECALL_BOOST) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.boost = boost
        self.idle_wake_s = interval_s
        self._noted: dict[tuple[str, str | None], dict[str, None]] = {}
        self._last: dict[tuple[str, str | None], str] = {}
        """When each user (and agent) was last noted: the time the event records."""
        self._lock = threading.Lock()

    def note(self, scope: Scope, item_ids: Iterable[str]) -> None:
        """Remember that a search of ``scope``'s user returned these items."""
        ids = list(item_ids)
        if not ids:
            return
        key, now = (scope.user_id, scope.agent_id), iso(self.clock())
        with self._lock:
            self._noted.setdefault(key, {}).update(dict.fromkeys(ids))
            self._last[key] = now
        if self._thread is None:
            self.start()

    def pending(self) -> int:
        """Items noted and not yet applied."""
        with self._lock:
            return sum(len(ids) for ids in self._noted.values())

    def run_once(self) -> int:
        with self._lock:
            noted, self._noted = self._noted, {}
            last, self._last = self._last, {}
        if not noted:
            return 0
        try:
            self._apply(noted, last)
        except BaseException:
            with self._lock:  # keep them for the next try
                for key, ids in noted.items():
                    self._noted.setdefault(key, {}).update(ids)
                    self._last[key] = max(last[key], self._last.get(key, ""))
            raise
        return sum(len(ids) for ids in noted.values())

    def _apply(self, noted: dict[tuple[str, str | None], dict[str, None]],
               last: dict[tuple[str, str | None], str]) -> None:
        # One transaction for every user, taking their writer locks in one order (sorted
        # by user), as every writer of several users must: two transactions taking two
        # users' locks in opposite orders would wait on each other for good.
        with self.store.transaction():
            for (user_id, agent_id), ids in sorted(
                    noted.items(), key=lambda entry: (entry[0][0], entry[0][1] or "")):
                with self.store.writing_for(user_id):
                    # Only items that still exist: one forgotten meanwhile (or its user)
                    # gets no ledger entry back. The user's lock keeps them so until the
                    # event is in.
                    kept = {i.id for i in self.store.query_items(user_id, ItemQuery(
                        ids=tuple(ids), include_superseded=True))[0]}
                    if kept:
                        self.store.append([new_event(
                            Scope(user_id, agent_id), last[user_id, agent_id],
                            Kind.MEMORY_RECALLED,
                            ItemsTouched(tuple(i for i in ids if i in kept), self.boost))])

    def flush(self) -> int:
        """Apply everything noted so far, now, in the caller's thread."""
        with self._busy:
            return self.run_once()

    def close(self) -> None:
        """Apply what is noted, then stop the thread. A store already closed keeps
        nothing of what was noted (a warning says how much)."""
        try:
            self.flush()
        except StoreClosed:
            self._log.warning("%d recalled items not applied: the store was closed",
                              self.pending())
        finally:
            super().close()
