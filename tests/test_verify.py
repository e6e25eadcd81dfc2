"""``verify``: the views re-derived from the ledger and compared with the stored ones.

The knowledge view through its whole life here, and the CLI; every other view, a
damaged ledger, ``rebuild`` from nothing and a killed writer are in
``test_verify_views.py``.
"""

from __future__ import annotations

import json
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
    assert report["problems"] == [] and report["warnings"] == []
    assert report["users"] == 2 and report["items"] >= 4
    assert report["events"] == len(mem.store.events("alice")) + len(mem.store.events("bob"))


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
    as_json = subprocess.run([*command[:-1], "--json", "verify"], capture_output=True,
                             text=True, check=False)
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["warnings"] == []
    assert report["problems"] == [f"alice: knowledge {item.id}: use_count is 7 in the view, "
                                  "0 in the ledger"]


@pytest.mark.sqlite_only  # reason: damages SQLite's FTS5 index; PostgreSQL's is a column
def test_a_search_index_that_fails_is_a_problem(mem: Memory, alice: UserMemory,
                                                db_url: str) -> None:
    import sqlite3

    alice.remember("Prefers green tea")
    with sqlite3.connect(db_url) as raw:
        raw.execute("UPDATE knowledge_fts_data SET block = x'00' WHERE id = 1")
    assert mem.verify()["problems"] == [
        "alice: the keyword index of knowledge fails: StorageError: SQLite: database disk "
        "image is malformed"]
    mem.rebuild()
    assert mem.verify()["problems"] == []
