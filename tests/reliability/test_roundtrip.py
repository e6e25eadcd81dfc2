"""Export → import round-trips any store exactly: a Hypothesis property over generated
histories of several users (items with every field, revisions, updates,
invalidations, restores, forgets, turns queued for extraction, tool calls that fail
and teach an error, agent events, recall bookkeeping, forgotten users), with vectors.

Every view the store's read methods return (``bench.stores.views_digest``: the ledger,
knowledge with every version, conversations with their extraction state, tool
history, LLM accounting, sessions, tool stats, facets, counts, the vectors and the
model) is the same in the copy, and exporting the copy gives the same bytes.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.stores import Stores, views_digest
from ledgermem import LedgermemError, Memory, UserMemory
from ledgermem.memory import open_store
from ledgermem.testing import HashEmbedder
from ledgermem.transfer import export_jsonl, import_jsonl
from tests.support import FakeClock

STORABLE = st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")
TEXT = st.text(STORABLE, min_size=1, max_size=30).filter(str.strip)
USERS = ("ann", "bo", "cy")
STEPS = st.lists(st.tuples(
    st.sampled_from(["remember", "remember", "revise", "update", "invalidate", "restore",
                     "forget", "turns", "turns", "tool", "record", "search", "forget_user"]),
    st.sampled_from(USERS), st.integers(0, 50), TEXT, st.booleans()), min_size=1, max_size=25)
CATEGORIES = ("fact", "preference", "skill", "note", "reminder", "error")


def apply(memory: Memory, clock: FakeClock, steps: list[tuple[str, str, int, str, bool]]
          ) -> None:
    """Run a generated history; a step the API refuses (an item no longer active…) is
    skipped, as refusals change nothing."""
    ids: dict[str, list[str]] = {user: [] for user in USERS}
    for op, user_id, n, text, flag in steps:
        clock.advance(minutes=n + 1)
        user = memory.for_user(user_id, agent_id="planner" if flag else None,
                               context="work" if n % 3 == 0 else "global")
        with contextlib.suppress(LedgermemError):
            _step(user, ids[user_id], op, n, text, flag)
    memory.flush()


def _step(user: UserMemory, ids: list[str], op: str, n: int, text: str, flag: bool) -> None:
    target = ids[n % len(ids)] if ids else None
    if op == "remember":
        item = user.remember(f"{text} {n}", CATEGORIES[n % len(CATEGORIES)],
                             entity=f"person:p{n % 4}" if flag else None, sensitive=n % 5 == 0,
                             due_at="2026-07-01T10:00:00Z" if n % 7 == 0 else None,
                             metadata={"n": n, "text": text}, dedup=n % 2 == 0)
        ids.append(item.id)
    elif op == "revise" and target:
        ids.append(user.revise(target, f"{text} revised {n}").id)
    elif op == "update" and target:
        user.update(target, confidence=n / 50, metadata={"tag": text}, sensitive=flag)
    elif op == "invalidate" and target:
        user.invalidate(target, reason=text)
    elif op == "restore" and target:
        user.restore(target)
    elif op == "forget" and target:
        user.forget(target)
    elif op == "turns":
        user.add_turns([{"role": "user", "content": text, "metadata": {"n": n}},
                        {"role": "assistant", "content": f"re: {text}", "name": "bot"}],
                       session_id=f"{user.user_id}:{n % 3}", infer=flag)
    elif op == "tool":
        user.log_tool_call(f"tool{n % 3}", {"q": text}, success=None if flag else False,
                           error=None if flag else f"failed {text}", duration_ms=float(n))
    elif op == "record":
        user.record("world.observed" if flag else "agent.spoke", {"text": text, "n": n},
                    agent_id="planner", visibility="global" if n % 2 else "private")
    elif op == "search":
        user.search(text)
    elif op == "forget_user" and n % 10 == 0:
        user.forget_user()
        ids.clear()


def export_text(url: str) -> str:
    out = io.StringIO()
    store = open_store(url, create=False)
    try:
        export_jsonl(store, out)
    finally:
        store.close()
    return out.getvalue()


def roundtrip(stores: Stores, steps: list[tuple[str, str, int, str, bool]]) -> None:
    source, copy, clock = stores.new("source"), stores.new("copy"), FakeClock()
    with Memory(open_store(source), embedder=HashEmbedder(dimensions=16),
                clock=clock) as memory:
        apply(memory, clock, steps)
        wanted = views_digest(memory.store)
    exported = export_text(source)
    store = open_store(copy)
    try:
        import_jsonl(store, io.StringIO(exported))
        got = views_digest(store)
    finally:
        store.close()
    assert got == wanted
    assert export_text(copy) == exported


def test_export_then_import_round_trips_any_history(stores: Stores) -> None:
    # PostgreSQL migrates two schemas per example: fewer examples there.
    @settings(max_examples=20 if stores.backend == "sqlite" else 6, deadline=None,
              database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=STEPS)
    def any_history(steps: Any) -> None:
        roundtrip(stores, steps)

    any_history()


def test_a_fixed_history_round_trips(stores: Stores, tmp_path: Path) -> None:
    """Every kind of step at least once (the generated ones may miss some)."""
    steps = [(op, user, n, f"text {op} {n} ünï 𝄞", n % 2 == 0) for n, (op, user) in
             enumerate((op, user) for user in USERS for op in (
                 "remember", "remember", "revise", "update", "invalidate", "restore",
                 "forget", "turns", "tool", "record", "search", "remember"))]
    steps.append(("forget_user", "cy", 0, "gone", False))
    roundtrip(stores, steps)
