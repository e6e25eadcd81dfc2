"""Mixed reads and writes from many threads in several processes on one store
(``bench.load``, which ``make bench`` runs larger): no call fails ("database is
locked" never reaches a caller), no acknowledged write is lost or stored twice,
nothing unacknowledged appears, and ``verify`` finds the views equal to the ledger."""

from __future__ import annotations

import threading
from pathlib import Path

from bench.load import check_load, figures, run_load
from bench.stores import Stores
from ledgermem import Memory
from ledgermem.domain.events import ItemsTouched, Kind, new_event
from ledgermem.types import Scope
from tests.support import raw, rows

PROCESSES, THREADS, OPS = 2, 4, 25


def test_threads_in_several_processes_lose_nothing_and_see_no_error(
        stores: Stores, tmp_path: Path) -> None:
    url = stores.new("load")
    run = run_load(url, tmp_path, processes=PROCESSES, threads=THREADS, ops=OPS, seed=7)
    found = check_load(url, run)
    assert found == {"errors": [], "writes": [], "verify": []}
    counted = figures(run)
    assert counted["calls"] + counted["errors"] == PROCESSES * THREADS * OPS
    assert counted["writes"]["count"] > PROCESSES * THREADS * OPS // 4
    assert counted["by_call"]["remember"]["count"] > 0


def test_a_search_after_another_process_wrote_still_answers(pg_url: str) -> None:
    with Memory.open(pg_url, embedder=None) as first, \
            Memory.open(pg_url, embedder=None) as second:
        first.for_user("ann").add_turn("user", "kites over the beach")
        assert len(first.for_user("ann").search_conversations("kites")) == 1  # counts cached
        for n in range(5):
            second.for_user("ann").add_turn("user", f"kites again, day {n}")
        assert len(first.for_user("ann").search_conversations("kites")) == 6


def test_two_processes_touching_one_item_leave_the_view_as_the_ledger_says(
        pg_url: str) -> None:
    """A writer whose view change waits after its event is in holds the user's lock,
    so a second writer draws its ``seq`` only after the first committed: the views
    change in ledger order (``PostgresStore._in_ledger_order``)."""
    with Memory.open(pg_url, embedder=None) as first, \
            Memory.open(pg_url, embedder=None) as second:
        item = first.for_user("ann").remember("kites over the beach")
        with raw(pg_url) as conn:  # an event dated 1 January waits between insert and view
            conn.execute("CREATE FUNCTION pause() RETURNS trigger LANGUAGE plpgsql AS "
                         "$$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$")
            conn.execute("CREATE TRIGGER pause AFTER INSERT ON events FOR EACH ROW WHEN "
                         "(NEW.ts LIKE '2026-01-01%') EXECUTE FUNCTION pause()")

        def touch(memory: Memory, ts: str) -> None:
            memory.store.append([new_event(Scope("ann"), ts, Kind.MEMORY_RECALLED,
                                           ItemsTouched((item.id,), 0.02))])

        slow = threading.Thread(target=touch, args=(first, "2026-01-01T00:00:00.000000+00:00"))
        slow.start()
        while not rows(pg_url, "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep'"):
            slow.join(timeout=0.01)  # until its event is in and its view change waits
        touch(second, "2026-02-01T00:00:00.000000+00:00")  # later in the ledger, applied first
        slow.join()
        assert first.verify()["problems"] == []
