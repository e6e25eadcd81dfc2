"""``verify``: the knowledge view checked against the ledger's replay (the projection)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ledgermem import Memory, UserMemory
from tests.support import FakeClock


def _busy_history(alice: UserMemory, clock: FakeClock) -> None:
    tea = alice.remember("Prefers green tea", category="preference", metadata={"a": 1})
    old = alice.remember("Lives in Lisbon")
    new = alice.revise(old.id, "Lives in Porto")
    alice.restore(old.id)  # invalidates the newer version
    assert not alice.get(new.id).active
    alice.update(tea.id, content="Prefers jasmine tea", sensitive=True, due_at="2027-01-02")
    gone = alice.remember("A locker code to forget")
    alice.forget(gone.id)
    alice.search("jasmine tea")
    alice.flush()
    clock.advance(days=40)
    alice.apply_confidence_decay()
    weak = alice.update_confidence(alice.remember("Weak guess").id, 0.05)
    clock.advance(days=100)
    alice.prune(days=90)
    assert weak.id not in {i.id for i in alice.all_knowledge()["items"]}


def test_a_store_written_through_the_api_verifies_clean(
        mem: Memory, alice: UserMemory, bob: UserMemory, clock: FakeClock) -> None:
    _busy_history(alice, clock)
    bob.remember("Bob drinks coffee")
    report = mem.verify()
    assert report["problems"] == []
    assert report["users"] == 2 and report["items"] >= 4


@pytest.mark.sqlite_only  # reason: edits the SQLite file behind the store's back
def test_verify_finds_a_view_that_drifted_and_rebuild_mends_it(
        mem: Memory, alice: UserMemory, db_url: str) -> None:
    import sqlite3

    item = alice.remember("Prefers green tea")
    with sqlite3.connect(db_url) as raw:
        raw.execute("UPDATE knowledge SET confidence = 0.01, content = 'tampered' "
                    "WHERE id = ?", [item.id])
    problems = mem.verify()["problems"]
    assert {p.split(": ")[2].split(" ")[0] for p in problems} == {"confidence", "content"}
    mem.rebuild()
    assert mem.verify()["problems"] == []


@pytest.mark.sqlite_only  # reason: the CLI runs on a file here; the API test covers both
def test_the_cli_exits_0_when_clean_and_1_when_not(mem: Memory, alice: UserMemory,
                                                   db_url: str) -> None:
    import sqlite3

    item = alice.remember("Prefers green tea")
    command = [sys.executable, "-m", "ledgermem", "--db", db_url, "verify"]
    clean = subprocess.run(command, capture_output=True, text=True, check=False)
    assert clean.returncode == 0 and "match the ledger" in clean.stdout
    with sqlite3.connect(db_url) as raw:
        raw.execute("UPDATE knowledge SET use_count = 7 WHERE id = ?", [item.id])
    drifted = subprocess.run(command, capture_output=True, text=True, check=False)
    assert drifted.returncode == 1 and "use_count" in drifted.stdout
    assert "Traceback" not in drifted.stderr
