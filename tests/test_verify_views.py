"""``verify`` over every view, ``rebuild`` from nothing, and a process killed mid-write.

Every test runs on SQLite and PostgreSQL (the ``mem`` / ``db_url`` fixtures); the rows
are tampered with through a raw connection under the store (``tests.support.raw``: the
SQLite file, or the test's schema with every user's rows visible).
"""

from __future__ import annotations

import json
import multiprocessing
import random
import re
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from ledgermem import Memory
from ledgermem.cli import main
from ledgermem.domain.events import Kind, new_event
from ledgermem.domain.verify import VIEWS, verify
from ledgermem.store.base import Store, TurnQuery
from ledgermem.types import ItemQuery, Scope
from tests.support import FakeClock, is_postgres, raw
from tests.workers import crash_words, write_until_killed

DERIVED_TABLES = ("knowledge", "conversations", "tool_history", "llm_calls", "comparisons")
"""Every table the projection writes: what rebuild must bring back from the ledger."""

_DIFFERENCE = re.compile(r"^(?P<user>[^:]+): (?P<view>\S+) (?P<id>\S+)"
                         r"(?:: (?P<field>\S+) is | is in the (?P<side>view|ledger), )")


def differences(report: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(user, view, row id, field or "only in the view/ledger") of each problem."""
    found = set()
    for line in report["problems"]:
        match = _DIFFERENCE.match(line)
        assert match, line
        found.add((match["user"], match["view"], match["id"],
                   match["field"] or f"only in the {match['side']}"))
    return found


def write_everything(mem: Memory, clock: FakeClock) -> dict[str, str]:
    """Every kind of write, for alice (and a little for bob); returns ids to tamper with."""
    alice, bob = mem.for_user("alice"), mem.for_user("bob")
    alice.add_turn("user", "An old message", session_id="alice:old")
    alice.log_tool_call("weather", {"city": "Oslo"}, duration_ms=3.0)
    alice.update_confidence(alice.remember("A weak guess").id, 0.05)
    clock.advance(days=100)
    assert alice.prune(days=90) == {"turns": 1, "tool_calls": 1, "items": 1}

    tea = alice.remember("Prefers green tea", category="preference", metadata={"a": 1})
    old = alice.remember("Lives in Lisbon", entity="person:alice", context="home")
    alice.revise(old.id, "Lives in Porto")
    alice.restore(old.id)  # invalidates the newer version
    alice.update(tea.id, content="Prefers jasmine tea", sensitive=True, due_at="2027-01-02")
    alice.mark_reminded(tea.id)
    alice.forget(alice.remember("A locker code to forget").id)
    alice.search("jasmine tea")
    mem.flush()  # the recall bookkeeping
    turns = alice.add_turns([{"role": "user", "content": "Flying to Lisbon on Friday"},
                             {"role": "assistant", "content": "Enjoy Lisbon", "name": "bot",
                              "metadata": {"mood": "warm"}}],
                            session_id="alice:chat", infer=True)  # queued; no LLM here
    ok = alice.log_tool_call("calendar", {"day": "mon"}, duration_ms=12.0)
    failed = alice.log_tool_call("calendar", error="quota exceeded")  # + error knowledge
    clock.advance(days=40)
    assert alice.apply_confidence_decay() > 0
    # What the pipeline's workers append (an LLM call, a comparison, an extraction's
    # outcome), appended here as they do, with no LLM.
    scope = Scope("alice")
    mem.store.append([
        new_event(scope, clock.iso(), Kind.LLM_CALLED, {
            "purpose": "extraction", "model": "test-model", "tokens_in": 120,
            "tokens_out": 30, "latency_ms": 250.5, "outcome": "ok"}),
        new_event(scope, clock.iso(), Kind.MEMORY_COMPARED, {
            "a": tea.id, "b": old.id, "outcome": "distinct", "similarity": 0.31}),
        new_event(scope, clock.iso(), Kind.TURNS_EXTRACTED,
                  {"ids": [turns[0].id], "outcome": "done"})])
    bob.remember("Bob drinks coffee")
    bob.add_turn("user", "hello from bob")
    first, second = sorted((tea.id, old.id))
    return {"item": tea.id, "turn": turns[0].id, "tool": ok.id, "failed_tool": failed.id,
            "pair": f"{first}~{second}"}


def test_a_store_written_through_the_whole_api_verifies_clean(mem: Memory,
                                                              clock: FakeClock) -> None:
    write_everything(mem, clock)
    report = mem.verify()
    assert report["problems"] == [] and report["warnings"] == []
    assert report["users"] == 2 and report["events"] > 20
    assert all(report["rows"][view] > 0 for view in VIEWS), report["rows"]
    assert report["items"] == report["rows"]["knowledge"]


def test_a_tampered_row_of_any_view_is_reported_and_rebuild_mends_it(
        mem: Memory, clock: FakeClock) -> None:
    ids = write_everything(mem, clock)
    with raw(mem) as conn:
        conn.execute("UPDATE knowledge SET confidence = 0.01 WHERE id = ?", [ids["item"]])
        conn.execute("UPDATE conversations SET content = 'tampered', extraction = 'failed' "
                     "WHERE id = ?", [ids["turn"]])
        conn.execute("UPDATE tool_history SET error = 'tampered' WHERE id = ?", [ids["tool"]])
        conn.execute("UPDATE llm_calls SET tokens_in = 99")
        conn.execute("DELETE FROM comparisons")
        # a view row whose event is gone, and one of a user with no events at all
        conn.execute("DELETE FROM events WHERE kind = 'tool.called' AND "
                     "(subject_id = ? OR id = ?)", [ids["failed_tool"], ids["failed_tool"]])
        conn.execute("INSERT INTO tool_history (id, user_id, name, arguments, success, ts) "
                     "VALUES ('ghost', 'mallory', 'x', '{}', ?, ?)", [True, clock.iso()])

    report = mem.verify()

    assert differences(report) == {
        ("alice", "knowledge", ids["item"], "confidence"),
        ("alice", "conversations", ids["turn"], "content"),
        ("alice", "conversations", ids["turn"], "extraction"),
        ("alice", "tool_history", ids["tool"], "error"),
        ("alice", "tool_history", ids["failed_tool"], "only in the view"),
        ("alice", "llm_calls", "extraction/test-model", "tokens_in"),
        ("alice", "comparisons", ids["pair"], "only in the ledger"),
        ("mallory", "tool_history", "ghost", "only in the view"),
    }
    assert (f"alice: conversations {ids['turn']}: content is 'tampered' in the view, "
            "'Flying to Lisbon on Friday' in the ledger") in report["problems"]
    assert ("alice: llm_calls extraction/test-model: tokens_in is 99 in the view, "
            "120 in the ledger") in report["problems"]
    assert report["users"] == 3
    assert verify(mem.store, users=["bob"])["problems"] == []
    assert differences(verify(mem.store, users=["mallory"])) == {
        ("mallory", "tool_history", "ghost", "only in the view")}

    mem.rebuild()
    assert mem.verify()["problems"] == []


def test_a_damaged_ledger_is_reported(mem: Memory, clock: FakeClock) -> None:
    alice = mem.for_user("alice")
    item = alice.remember("Prefers green tea")
    call = alice.log_tool_call("calendar", {"day": "mon"})
    turn = alice.add_turn("user", "hello")
    with raw(mem) as conn:
        conn.execute("UPDATE events SET ts = 'last tuesday' WHERE subject_id = ?", [item.id])
        conn.execute("UPDATE events SET payload = '{}' WHERE kind = 'tool.called'")
        conn.execute("UPDATE events SET visibility = 'public' WHERE kind = 'turn.user'")
        event = {kind: f"alice: event {event_id} (seq {seq}" for kind, event_id, seq in
                 conn.execute("SELECT kind, id, seq FROM events").fetchall()}

    problems = mem.verify()["problems"]

    assert len(problems) == 4, problems
    assert (f"{event['memory.added']}): ts 'last tuesday' is not an ISO 8601 time with a "
            "UTC offset") in problems
    assert any(p.startswith(f"{event['tool.called']}, tool.called) cannot be projected: "
                            "KeyError") for p in problems), problems
    assert f"alice: tool_history {call.id} is in the view, not in the ledger" in problems
    assert f"{event['turn.user']}): visibility 'public' is not private or global" in problems
    # the turn itself still projects: no difference in its view
    assert mem.store.query_turns("alice", TurnQuery(ids=(turn.id,)))


def test_events_dated_back_are_a_warning_and_do_not_fail_the_cli(
        mem: Memory, clock: FakeClock, db_url: str) -> None:
    alice = mem.for_user("alice")
    alice.remember("Prefers green tea")
    clock.advance(minutes=-1)  # within the tolerance: two processes' clocks
    alice.remember("Lives in Lisbon")
    clock.advance(days=-2)
    alice.add_turn("user", "hello")
    report = mem.verify()
    assert report["problems"] == []
    assert len(report["warnings"]) == 1
    assert report["warnings"][0].startswith(
        "alice: 1 event dated more than 0:05:00 before an earlier event of this user "
        "(the furthest by 2 days, 0:01:00, at seq ")

    result = CliRunner().invoke(main, ["--db", db_url, "verify"])
    assert result.exit_code == 0, result.output
    assert "warning: alice: 1 event dated" in result.output
    assert "the views match the ledger, 1 warning" in result.output


class WritingMeanwhile:
    """The store, and a writer that appends for alice whenever ``verify`` calls
    ``method`` (all else goes straight to the store): a write landing between verify's
    pass over the ledger and its reads of the views, at a moment the test chooses."""

    def __init__(self, mem: Memory, method: str, times: int) -> None:
        self._store, self._alice = mem.store, mem.for_user("alice")
        self._method, self._left = method, times

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name != self._method:
            return found

        def writing_first(*args: Any, **kwargs: Any) -> Any:
            if self._left:
                self._left -= 1
                self._alice.remember(crash_words(f"meanwhile{self._left}"))
                self._alice.add_turn("user", f"meanwhile {self._left}")
            return found(*args, **kwargs)

        return writing_first


def test_a_write_during_verify_is_not_a_difference(mem: Memory) -> None:
    mem.for_user("alice").remember("Prefers green tea")
    # user_counts is read after the pass over the ledger, before the views are read
    report = verify(cast(Store, WritingMeanwhile(mem, "user_counts", times=1)))
    assert report["problems"] == [] and report["warnings"] == []
    assert report["rows"]["knowledge"] == 2  # the user was derived again, write included


def test_a_ledger_that_keeps_moving_is_a_warning_and_a_real_difference_stays(
        mem: Memory) -> None:
    alice = mem.for_user("alice")
    tea = alice.remember("Prefers green tea")
    with raw(mem) as conn:
        conn.execute("UPDATE knowledge SET content = 'tampered' WHERE id = ?", [tea.id])
    # counts is read each time verify asks whether the user's ledger moved on
    report = verify(cast(Store, WritingMeanwhile(mem, "counts", times=100)))
    assert report["problems"] == [f"alice: knowledge {tea.id}: content is 'tampered' in "
                                  "the view, 'Prefers green tea' in the ledger"]
    assert report["warnings"] == [
        "alice: written to while verified (4 reads); only differences seen in every "
        "read are reported: verify again when writes pause"]


def table_rows(mem: Memory) -> dict[str, list[dict[str, Any]]]:
    """Every row of every derived table, all columns but the surrogate ``pk``."""
    order = {"comparisons": "user_id, item_a, item_b"}
    found: dict[str, list[dict[str, Any]]] = {}
    with raw(mem) as conn:
        for table in DERIVED_TABLES:
            cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {order.get(table, 'id')}")
            names = [d[0] for d in cursor.description]
            found[table] = [{k: v for k, v in zip(names, row, strict=True) if k != "pk"}
                            for row in cursor.fetchall()]
    return found


def test_rebuild_after_deleting_every_derived_table_yields_identical_rows(
        vector_mem: Memory, clock: FakeClock) -> None:
    """Vectors are not derived from events: rebuild keeps those of the rows it
    re-derives from a cache it reads from the rows themselves, so with every row
    deleted there is nothing to keep. The embedder makes them again from the same text
    (the deterministic ``HashEmbedder``: the same vectors); only ``emb_seq``, the order
    in which vectors were made, is new."""
    write_everything(vector_mem, clock)
    vector_mem.flush()  # every row embedded
    before = table_rows(vector_mem)
    assert all(before[table] for table in DERIVED_TABLES)
    assert all(row["embedding"] is not None for row in before["knowledge"])
    assert all(row["embedding"] is not None for row in before["conversations"])

    with raw(vector_mem) as conn:
        for table in DERIVED_TABLES:
            conn.execute(f"DELETE FROM {table}")
    assert not any(table_rows(vector_mem).values())
    vector_mem.rebuild()
    vector_mem.flush()  # the embedder makes the vectors again
    after = table_rows(vector_mem)

    def without_emb_seq(rows: dict[str, list[dict[str, Any]]]) -> Any:
        return {table: [{k: v for k, v in row.items() if k != "emb_seq"} for row in found]
                for table, found in rows.items()}

    assert without_emb_seq(after) == without_emb_seq(before)
    assert vector_mem.verify()["problems"] == []


# a process killed while writing ------------------------------------------------------
TRIALS = 3
CRASH_USER = "crash"


def test_a_process_killed_while_writing_keeps_what_it_acknowledged_and_verifies_clean(
        db_url: str, tmp_path: Path) -> None:
    """A child writes (remember, revise, forget, add_turns) until it is sent SIGKILL at a
    random moment, ``TRIALS`` times on one store. After each kill: on SQLite the file
    passes ``PRAGMA integrity_check`` and both FTS5 indexes their ``integrity-check``
    (they agree with their tables); the store opens; every write the child saw
    acknowledged is there as it was acknowledged; the call the kill cut short is all
    there or not at all; and ``verify`` finds no problem."""
    rng = random.Random()
    first_seed = rng.randrange(1_000_000)
    spawn = multiprocessing.get_context("spawn")
    for trial in range(TRIALS):
        seed = first_seed + trial
        log = tmp_path / f"trial-{trial}.jsonl"
        child = spawn.Process(target=write_until_killed, args=(db_url, str(log), seed))
        child.start()
        try:
            wait_for_acknowledged(log, child, count=5)
            time.sleep(rng.uniform(0, 0.25))
        finally:
            child.kill()
            child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL, (seed, child.exitcode)
        if not is_postgres(db_url):
            with closing(sqlite3.connect(db_url)) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                for fts in ("knowledge_fts", "conversations_fts"):  # raises if not
                    conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
        with Memory.open(db_url, embedder=None) as memory:
            lines = [json.loads(line) for line in log.read_text().splitlines()]
            check_acknowledged(memory, lines, seed)
            report = memory.verify()
            assert report["problems"] == [], (seed, report["problems"])


def wait_for_acknowledged(log: Path, child: Any, count: int) -> None:
    """Until the child has logged ``count`` acknowledged writes (it is in its loop)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count('"done"') >= count:
            return
        assert child.is_alive(), f"the child ended on its own (exit code {child.exitcode})"
        time.sleep(0.01)
    pytest.fail("the child acknowledged no write within 60 s")


def check_acknowledged(memory: Memory, lines: list[dict[str, Any]], seed: int) -> None:
    """Every ``done`` write of the log holds; the last ``begin``, if it has no ``done``,
    was cut short by the kill and is all or nothing."""
    store = memory.store
    active: dict[str, str] = {}      # item id → its text
    superseded: dict[str, str] = {}  # old version → the new one
    gone: set[str] = set()
    turns: dict[str, list[str]] = {}
    cut: dict[str, Any] | None = None
    for line in lines:
        if "begin" in line:
            cut = line
            continue
        cut, op = None, line["done"]
        if op == "remember":
            active[line["id"]] = crash_words(line["tag"])
        elif op == "revise":
            superseded[line["id"]] = line["new"]
            del active[line["id"]]
            active[line["new"]] = crash_words(line["tag"])
        elif op == "forget":
            del active[line["id"]]
            gone.add(line["id"])
        else:
            turns[line["tag"]] = line["ids"]
    assert len(lines) >= 5
    why = f"seed {seed}, cut short: {cut}"
    unsure = {cut["id"]} if cut is not None and "id" in cut else set()

    for item_id, text in active.items():
        if item_id in unsure:
            continue  # revised or forgotten, or not: check_all_or_nothing
        item = store.get_item(CRASH_USER, item_id)
        assert item is not None and item.content == text and item.active, why
    for old, new in superseded.items():
        item = store.get_item(CRASH_USER, old)
        assert item is not None and item.superseded_by == new and not item.active, why
    assert all(store.get_item(CRASH_USER, item_id) is None for item_id in gone), why
    for tag, ids in turns.items():
        found = store.query_turns(CRASH_USER, TurnQuery(ids=tuple(ids)))
        assert [t.content for t in found] == [f"{tag} turn {i} of 3" for i in range(3)], why
    if cut is not None:
        check_all_or_nothing(memory, cut, seed, why)


def check_all_or_nothing(memory: Memory, cut: dict[str, Any], seed: int, why: str) -> None:
    store, op = memory.store, cut["begin"]
    if op == "turns":
        texts = [t.content for t in store.query_turns(
            CRASH_USER, TurnQuery(session_id=f"crash-{seed}"))
            if t.content.startswith(f"{cut['tag']} turn ")]
        assert len(texts) in (0, 3), why
        return
    if op == "forget":
        item = store.get_item(CRASH_USER, cut["id"])
        assert item is None or (item.active and item.content.endswith("w3")), why
        return
    made, _ = store.query_items(CRASH_USER, ItemQuery(content=crash_words(cut["tag"]),
                                                      include_superseded=True))
    assert len(made) <= 1, why
    if op == "revise":
        old = store.get_item(CRASH_USER, cut["id"])
        assert old is not None, why
        assert old.superseded_by == (made[0].id if made else None), why
        assert not made or made[0].active, why
