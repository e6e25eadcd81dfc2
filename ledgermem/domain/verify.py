"""Does every view say what the ledger says, and is the ledger intact?

``verify`` re-derives every view into a scratch store and compares it with the store
being verified, row by row and field by field, through the ``Store`` read API alone,
so a SQLite and a PostgreSQL store are verified the same way.

**Re-deriving.** The whole ledger (``Store.ledger``: every user's events in ledger
order) is appended to a fresh ``SQLiteStore`` in a temporary directory. Its ``append``
applies each event through the one projection (``projection.project``), as the store
being verified did when the event was written and as ``rebuild`` does. Then, per user
(every user with events or with rows in a view), the two stores' rows are compared:

- knowledge: ``query_items`` with superseded and invalidated versions, by item id,
  every ``Item`` field but ``written`` (not stored);
- conversations: ``query_turns`` and ``extraction_ids`` per state, by turn id, every
  ``Turn`` field and the extraction state;
- tool_history: ``query_tool_calls``, by call id, every ``ToolCall`` field;
- llm_calls: ``llm_usage``, by ``purpose/model``, the sums;
- comparisons: ``compared_pairs``, by pair (``a~b``).

Kinds that change no view (the review queue's ``proposal.*``, agents' own kinds) are
checked as events (id, seq, user, kind, visibility, ts) and projected to nothing.

It costs about what ``rebuild`` does: the projection into SQL dominates (19,000
events, 5,000 items and 9,500 turns take 10 s on a small machine).

Not compared: what is derived from the rows rather than from events, or is not memory.
Embeddings (vector, model, sequence: the embedding worker and ``reembed`` write them
without an event, and ``rebuild`` restores them from a cache), the full-text indexes,
a turn's neighbour text and spoken day (search aids computed from the rows), and
extraction claims (``extraction_claim``, ``extraction_claim_until``: scheduling state
a worker sets without an event). ``llm_calls`` and ``comparisons`` are compared as far
as the read API shows them: calls by their sums per purpose and model, comparisons by
which pairs were compared (not their outcome, similarity or time).

**The search indexes** are derived from the rows and ranked, so what they return is
not compared; that each answers a search is (a damaged SQLite FTS5 index raises, and
so does every write that searches first).

**The ledger.** Problems: an event id used twice (the schema forbids it; this catches
a damaged one); ``seq`` not strictly increasing in ledger order; an event with no user
or kind, a visibility other than ``private`` / ``global``, or a ``ts`` that is not an
ISO 8601 time with a UTC offset (times are compared as text everywhere, which holds
for one format only); an event the projection cannot apply.

Deliberately not problems:

- Gaps in ``seq``. ``forget_user`` deletes a user's events and by design leaves no
  record that they existed, and PostgreSQL's identity column skips the values taken by
  transactions that rolled back. A gap proves nothing; an event lost from the middle of
  a ledger shows instead as a view row (or a field) the scratch does not derive
  (unless its kind changes no view: those the projection does not know).
- Time order. Event times come from the writer's clock: recall bookkeeping is dated by
  its search and appended up to a flush interval later, processes' clocks differ, a
  clock can be set back (tests do). No view depends on it (the projection applies
  events in ``seq`` order; ``as_of`` reads times as the writer dated them), so an
  event dated more than ``CLOCK_TOLERANCE`` before an earlier event of its user is a
  *warning*, summed up in one line per user.
- Ids in time order. Ids are UUIDv7s, monotonic within one process only, and
  ``import`` / ``migrate`` keep the source's ids, so ledger order need not be id order.

**A live store.** Writers may append while ``verify`` reads, and the views read after
the ledger can hold rows of events the pass over the ledger did not see. When a
user's rows differ and that user's ledger has moved on since it was read (its event
count or last event changed), the user is derived again, alone, from the ledger as it
is now, and only the differences found every time are kept: a real difference is the
same each time, one made by reading a moving store is not. After ``RECHECKS`` tries
with the ledger still moving, what remains is reported along with a warning that the
user was being written to (a real difference whose values the writes keep changing
can then go unreported: verify at rest to be sure).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import LedgermemError
from ..store.base import Store, TurnQuery
from ..store.sqlite import SQLiteStore
from ..types import Event, ItemQuery

__all__ = ["CLOCK_TOLERANCE", "VIEWS", "verify"]

VIEWS = ("knowledge", "conversations", "tool_history", "llm_calls", "comparisons")
"""The views compared, in the order differences are reported."""
CLOCK_TOLERANCE = timedelta(minutes=5)
"""How far an event may be dated before an earlier event of its user without a warning."""
EXTRACTION_STATES = ("pending", "done", "skipped", "failed")
RECHECKS = 3
PAGE = 1000

Rows = dict[str, dict[str, Any]]
"""One view of one user: row id → field → value."""


@dataclass
class _UserLedger:
    """What the pass over the ledger saw of one user."""

    events: int = 0
    last_id: str = ""
    latest: datetime | None = None
    backwards: int = 0
    furthest: timedelta = timedelta(0)
    furthest_seq: int = 0

    def head(self) -> tuple[int, str]:
        return self.events, self.last_id


def verify(store: Store, users: Iterable[str] | None = None) -> dict[str, Any]:
    """Re-derive every view from the ledger and compare it with ``store``'s (module docs).

    Args:
        store: the store to verify (any backend); it is only read.
        users: verify these users only (their events, their rows); default every user.

    Returns:
        ``{"users", "events", "items", "rows", "problems", "warnings"}``: users and
        ledger events checked, knowledge items compared, rows compared per view, one
        line per problem (a row only in the view or only in the ledger's derivation, a
        field that differs with both values, a damaged event, a search index that
        fails) and one line per warning (events out of time order, a user written to
        while verified). An empty ``problems`` means the views are what the ledger
        says and the ledger is intact; ``rebuild`` mends differing views.
    """
    wanted = None if users is None else set(users)
    with tempfile.TemporaryDirectory(prefix="ledgermem-verify-") as folder:
        scratch = SQLiteStore(Path(folder) / "scratch.db")
        try:
            ledger, problems = _replay_ledger(store, scratch, wanted)
            names = sorted(wanted if wanted is not None
                           else ledger.keys() | store.user_counts().keys())
            rows = dict.fromkeys(VIEWS, 0)
            warnings = [
                f"{user_id}: {_events(seen.backwards)} dated more than {CLOCK_TOLERANCE} "
                f"before an earlier event of this user (the furthest by {seen.furthest}, "
                f"at seq {seen.furthest_seq}): a clock set back, or events written out "
                "of time order" for user_id, seen in sorted(ledger.items()) if seen.backwards]
            for user_id in names:
                head = ledger[user_id].head() if user_id in ledger else (0, "")
                counted, found, moving = _compare_user(store, scratch, user_id, head,
                                                       Path(folder))
                rows = {view: rows[view] + counted[view] for view in VIEWS}
                problems += found
                warnings += moving
            problems += _search_problems(store, names)
        finally:
            scratch.close()
    return {"users": len(names), "events": sum(seen.events for seen in ledger.values()),
            "items": rows["knowledge"], "rows": rows, "problems": problems,
            "warnings": warnings}


def _search_problems(store: Store, names: Sequence[str]) -> list[str]:
    """Whether each keyword index answers: one search per index, for the longest word
    of a row of the first user who has one. A damaged index raises (SQLite's FTS5 says
    "malformed"), and then writes that search first (``remember``'s dedup) fail too.
    What the index returns is not compared: it is derived, and ranked."""
    problems = []
    for view in ("knowledge", "conversations"):
        for user_id in names:
            rows = (store.query_items(user_id, ItemQuery(), limit=1)[0] if view == "knowledge"
                    else store.query_turns(user_id, TurnQuery(), limit=1))
            words = re.findall(r"\w+", rows[0].content) if rows else []
            if not words:
                continue
            try:
                if view == "knowledge":
                    store.keyword_search_items(user_id, [max(words, key=len)], "or",
                                               ItemQuery(), 1)
                else:
                    store.keyword_search_turns(user_id, [max(words, key=len)], "or",
                                               TurnQuery(), 1)
            except LedgermemError as exc:
                problems.append(f"{user_id}: the keyword index of {view} fails: "
                                f"{type(exc).__name__}: {exc}")
            break
    return problems


# the ledger ---------------------------------------------------------------------------
def _replay_ledger(store: Store, scratch: Store, wanted: set[str] | None
                   ) -> tuple[dict[str, _UserLedger], list[str]]:
    """Check every event and append it to ``scratch``; what was seen per user, problems."""
    seen: dict[str, _UserLedger] = {}
    ids: set[str] = set()
    problems: list[str] = []
    last_seq = 0
    while page := store.ledger(last_seq, PAGE):
        started_at = last_seq
        batch: list[tuple[int, Event]] = []
        for seq, event in page:
            if seq <= last_seq:
                problems.append(f"ledger: seq {seq} comes after seq {last_seq}")
                continue
            last_seq = seq
            if wanted is not None and event.user_id not in wanted:
                continue
            if event.id in ids:
                problems.append(f"{event.user_id}: event {event.id} (seq {seq}) reuses "
                                "the id of an earlier event")
                continue
            ids.add(event.id)
            problems += _check_event(seq, event, seen.setdefault(event.user_id,
                                                                 _UserLedger()))
            batch.append((seq, event))
        problems += _project(scratch, batch)
        if last_seq == started_at:
            break  # the page did not move forward (a damaged index): reported above
    return seen, problems


def _events(count: int) -> str:
    return f"{count} event" if count == 1 else f"{count} events"


def _check_event(seq: int, event: Event, seen: _UserLedger) -> list[str]:
    """Problems of one event on its own; notes its place in its user's time order."""
    where = f"{event.user_id}: event {event.id} (seq {seq})"
    found = []
    if not event.user_id or not event.kind:
        found.append(f"{where} has no user or no kind")
    if event.visibility not in ("private", "global"):
        found.append(f"{where}: visibility {event.visibility!r} is not private or global")
    try:
        moment: datetime | None = datetime.fromisoformat(event.ts)
    except (TypeError, ValueError):
        moment = None
    if moment is None or moment.tzinfo is None:
        found.append(f"{where}: ts {event.ts!r} is not an ISO 8601 time with a UTC offset")
    elif seen.latest is not None and seen.latest - moment > CLOCK_TOLERANCE:
        seen.backwards += 1
        if seen.latest - moment > seen.furthest:
            seen.furthest, seen.furthest_seq = seen.latest - moment, seq
    else:
        seen.latest = moment if seen.latest is None else max(seen.latest, moment)
    seen.events += 1
    seen.last_id = event.id
    return found


def _project(scratch: Store, events: Sequence[tuple[int, Event]]) -> list[str]:
    """Append ``events`` to ``scratch`` (projecting them); one problem per event that
    cannot be applied, found by applying them one by one after the batch failed."""
    if not events:
        return []
    try:
        scratch.append([event for _, event in events])
    except Exception:
        return _project_one_by_one(scratch, events)
    return []


def _project_one_by_one(scratch: Store, events: Sequence[tuple[int, Event]]) -> list[str]:
    problems = []
    for seq, event in events:
        try:
            scratch.append([event])
        # Whatever the projection raises on a payload it cannot read (KeyError,
        # TypeError, ValueError, StorageError…) is a problem of the ledger: reported.
        except Exception as exc:
            problems.append(f"{event.user_id}: event {event.id} (seq {seq}, {event.kind}) "
                            f"cannot be projected: {type(exc).__name__}: {exc}")
    return problems


# the views -------------------------------------------------------------------------------
def _compare_user(store: Store, scratch: Store, user_id: str, head: tuple[int, str],
                  folder: Path) -> tuple[dict[str, int], list[str], list[str]]:
    """Rows compared per view, the differences, and a warning if the user's ledger kept
    moving: while rows differ and writers have moved the user's ledger on since it was
    read, the user is derived again from its ledger alone, and only the differences
    seen every time are kept (a real one is the same each time; one made by reading a
    moving store is not)."""
    stored, derived = _rows(store, user_id), _rows(scratch, user_id)
    found = _differences(user_id, stored, derived)
    for _ in range(RECHECKS):
        if not found or _head(store, user_id) == head:
            return _counted(stored, derived), found, []
        events = store.events(user_id)
        head = (len(events), events[-1].id if events else "")
        with tempfile.TemporaryDirectory(dir=folder) as again:
            fresh = SQLiteStore(Path(again) / "user.db")
            try:
                # An event that arrived since the first pass and cannot be projected is
                # left to the next verify: the ledger is checked as the first pass read it.
                _project(fresh, list(enumerate(events, start=1)))
                stored, derived = _rows(store, user_id), _rows(fresh, user_id)
            finally:
                fresh.close()
        again_found = set(_differences(user_id, stored, derived))
        found = [line for line in found if line in again_found]
    if not found or _head(store, user_id) == head:
        return _counted(stored, derived), found, []
    return _counted(stored, derived), found, [
        f"{user_id}: written to while verified ({RECHECKS + 1} reads); only differences "
        "seen in every read are reported: verify again when writes pause"]


def _counted(stored: dict[str, Rows], derived: dict[str, Rows]) -> dict[str, int]:
    return {view: len(stored[view].keys() | derived[view].keys()) for view in VIEWS}


def _head(store: Store, user_id: str) -> tuple[int, str]:
    """How many events the user has now, and the id of the last."""
    last = store.events(user_id, limit=1)
    return int(store.counts(user_id)["events"]), last[-1].id if last else ""


def _rows(store: Store, user_id: str) -> dict[str, Rows]:
    """Every compared row of one user, per view, as the read API returns them."""
    items, _ = store.query_items(user_id, ItemQuery(include_superseded=True))
    turns = {turn.id: {**_fields(turn), "extraction": None}
             for turn in store.query_turns(user_id, TurnQuery())}
    for state in EXTRACTION_STATES:
        for turn_id in store.extraction_ids(user_id, state):
            turns.setdefault(turn_id, {})["extraction"] = state
    return {
        "knowledge": {item.id: _fields(item) for item in items},
        "conversations": turns,
        "tool_history": {call.id: _fields(call) for call in store.query_tool_calls(user_id)},
        "llm_calls": {f"{usage['purpose']}/{usage['model']}": {
            k: v for k, v in usage.items() if k not in ("purpose", "model")}
            for usage in store.llm_usage(user_id)},
        "comparisons": {f"{a}~{b}": {} for a, b in store.compared_pairs(user_id)},
    }


def _fields(row: Any) -> dict[str, Any]:
    """A dataclass row's compared fields (``Item.written`` is not stored: left out)."""
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.compare}


def _differences(user_id: str, stored: dict[str, Rows], derived: dict[str, Rows]
                 ) -> list[str]:
    """One line per row only on one side and per field that differs, view by view."""
    found = []
    for view in VIEWS:
        mine, ledger = stored[view], derived[view]
        found += [f"{user_id}: {view} {row_id} is in the view, not in the ledger"
                  for row_id in sorted(mine.keys() - ledger.keys())]
        found += [f"{user_id}: {view} {row_id} is in the ledger, not in the view"
                  for row_id in sorted(ledger.keys() - mine.keys())]
        for row_id in sorted(mine.keys() & ledger.keys()):
            got, want = mine[row_id], ledger[row_id]
            found += [f"{user_id}: {view} {row_id}: {name} is {got.get(name)!r} in the view, "
                      f"{want.get(name)!r} in the ledger"
                      for name in [*got, *(k for k in want if k not in got)]
                      if not _same(got.get(name), want.get(name))]
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)
