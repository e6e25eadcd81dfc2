"""Crash safety: a writer killed with SIGKILL at random moments loses nothing it
acknowledged and leaves nothing half-written (``bench.crash``, which ``make bench``
runs with 20 trials per scenario and backend; a few trials here).

After every kill: on SQLite ``PRAGMA integrity_check`` and the FTS5 indexes'
``integrity-check`` pass; the store opens; every write the child saw acknowledged is
there as it was acknowledged; the call the kill cut short is all there or not at
all; ``verify`` finds no problem; a restart finishes the extraction queue.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.crash import Sizes, run_scenario
from bench.crash_workload import CRASH_USER, Acknowledged, check_workload, fact_text
from bench.stores import Stores, integrity_problems
from ledgermem import Memory
from ledgermem.memory import open_store
from tests.support import raw

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

WORKLOAD_TRIALS = 2
SMALL = Sizes(rows=200, acknowledged=6, extra_s=0.3)


def test_a_writer_killed_at_random_moments_keeps_every_acknowledged_write(
        stores: Stores, tmp_path: Path) -> None:
    results = run_scenario("workload", stores, tmp_path, WORKLOAD_TRIALS, sizes=SMALL)
    assert [r.problems for r in results] == [[]] * WORKLOAD_TRIALS, [
        (r.seed, r.problems) for r in results]
    assert all(sum(r.acknowledged.values()) >= SMALL.acknowledged for r in results)


@pytest.mark.parametrize("scenario", ["reembed", "migrate", "import"])  # copy: bench only
def test_a_kill_during_an_operation_leaves_it_whole_or_undone(
        stores: Stores, tmp_path: Path, scenario: str) -> None:
    (result,) = run_scenario(scenario, stores, tmp_path, 1, sizes=SMALL)
    assert result.problems == [], (result.seed, result.problems)


def test_the_checks_see_a_lost_write(stores: Stores, tmp_path: Path) -> None:
    """The harness can fail: an acknowledged item deleted under the store is reported,
    and so is a turn batch whose extraction state is split."""
    url = stores.new("checked")
    with Memory(open_store(url), embedder=None) as memory:
        user = memory.for_user(CRASH_USER)
        item = user.remember(fact_text("s1n1"))
        kept = user.remember(fact_text("s1n2"))
    seen = Acknowledged()
    seen.read([{"begin": "remember", "tag": "s1n1"},
               {"done": "remember", "tag": "s1n1", "id": item.id},
               {"begin": "remember", "tag": "s1n2"},
               {"done": "remember", "tag": "s1n2", "id": kept.id}])
    with Memory(open_store(url), embedder=None) as memory:
        assert check_workload(memory.store, seen, None) == []
    with raw(url) as conn:
        conn.execute("DELETE FROM knowledge WHERE id = ?", [item.id])
    with Memory(open_store(url), embedder=None) as memory:
        problems = check_workload(memory.store, seen, None)
        assert len(problems) == 1 and item.id in problems[0]
        assert any(item.id in p for p in memory.verify()["problems"])
    if stores.backend == "sqlite":
        assert integrity_problems(url) == []
