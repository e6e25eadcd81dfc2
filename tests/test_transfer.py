"""Moving a memory between stores: export → import, migrate, and their CLI commands.

What must survive a move: every event of every user (ids, times, payloads, order),
the views derived from them (so search ranks the same), the vectors, lineage
(superseded and invalidated versions), and forgetting: a forgotten item stays
forgotten and its text appears nowhere.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from ledgermem import InvalidInput, Memory, NotFound, SchemaMismatch, StorageError
from ledgermem.cli import main
from ledgermem.memory import open_store
from ledgermem.store.base import Store
from ledgermem.testing import HashEmbedder
from ledgermem.transfer import export_jsonl, import_jsonl, migrate
from ledgermem.validation import MAX_JSON_DEPTH
from tests.support import FakeClock, rows, snapshot, supersede

SECRET = "zanzibarquux"
QUERIES = ["green tea", "Sarah manager", "dentist", "Lisbon flight", "calendar quota",
           "what does alice drink", "darts"]


def open_memory(url: str, clock: FakeClock) -> Memory:
    return Memory.open(url, embedder=HashEmbedder(), clock=clock)


def fill(memory: Memory, clock: FakeClock) -> dict[str, str]:
    """A bit of everything: updates, dedup, recalls, forgetting, supersession, a
    revision and an invalidation, turns with speakers, tool calls, decay, two users."""
    alice, bob = memory.for_user("alice"), memory.for_user("bob")
    tea = alice.remember("Prefers green tea in the morning", "preference",
                         entity="person:alice")
    boss = alice.remember("Sarah Chen is her manager", context="work", metadata={"k": 1})
    gone = alice.remember(f"Locker code {SECRET}", "note", entity=f"secret:{SECRET}")
    clock.advance(days=1)
    alice.update(boss.id, content="Sarah Chen was her manager", sensitive=True)
    alice.remember("Prefers green tea in the morning", "preference", entity="person:alice")
    dentist = alice.remember("Dentist appointment", "reminder", due_at="in 3 days")
    alice.search("tea")
    alice.forget(gone.id)
    oolong = alice.remember("Prefers oolong tea now", "preference")
    supersede(memory, "alice", tea.id, oolong.id, clock.iso())
    clock.advance(hours=2)
    moved = alice.revise(dentist.id, "Dentist appointment moved to Friday")
    alice.invalidate(boss.id, reason="changed teams")
    alice.add_turns([{"role": "user", "content": "Flying to Lisbon on Friday", "name": "Alice"},
                     {"role": "assistant", "content": "Enjoy the Lisbon flight"}],
                    session_id="alice:telegram")
    alice.add_turn("user", "Standup moved to ten", session_id="alice:slack")
    alice.log_tool_call("calendar", {"day": "mon"}, duration_ms=12.0)
    alice.log_tool_call("calendar", success=False, error="quota exceeded")
    bob.remember("Bob likes darts and green tea")
    bob.add_turn("user", "hello from bob about tea")
    clock.advance(days=40)
    alice.apply_confidence_decay()
    memory.flush()
    return {"tea": tea.id, "boss": boss.id, "gone": gone.id, "oolong": oolong.id,
            "dentist": dentist.id, "moved": moved.id}


def everything(memory: Memory) -> dict[str, Any]:
    """What every user can read back, searches included (nothing is touched)."""
    seen: dict[str, Any] = {}
    for user_id in memory.store.user_ids():
        user = memory.for_user(user_id)
        items = user.all_knowledge(include_superseded=True, limit=None, sort="created_at")
        seen[user_id] = {
            "items": items,
            "histories": {i.id: user.history(i.id) for i in items["items"]},
            "turns": user.recent_conversations(limit=10_000),
            "sessions": user.sessions(),
            "tool_calls": memory.store.query_tool_calls(user_id),
            "stats": user.stats(),
            "search": [[(h.id, round(h.score, 6)) for h in user.search(q, touch=False)]
                       for q in QUERIES],
            "search_all": [[h.id for h in user.search(q, touch=False, include_superseded=True)]
                           for q in QUERIES],
            "conversations": [[(h.id, round(h.score, 6))
                               for h in user.search_conversations(q)] for q in QUERIES],
        }
    return seen


def ledger(store: Store) -> list[Any]:
    return [event for _, event in store.ledger(0, 100_000)]


def vectors(store: Store) -> dict[str, list[tuple[str, str, list[float], str]]]:
    return {table: [(i, text, np.round(v, 6).tolist(), model)
                    for i, text, v, model in store.stored_embeddings(table, "", 100_000)]
            for table in ("knowledge", "conversations")}


def assert_forgotten(memory: Memory, url: str, ids: dict[str, str]) -> None:
    with pytest.raises(NotFound):
        memory.for_user("alice").get(ids["gone"])
    assert not rows(url, "SELECT seq FROM events WHERE payload LIKE ?", [f"%{SECRET}%"])
    assert [e.kind for e in memory.for_user("alice").history(ids["gone"])] == [
        "memory.added", "memory.deleted"]


# export → import ----------------------------------------------------------------------
def test_export_then_import_gives_the_same_memory(db_url: str,
                                                  make_db_url: Callable[[], str]) -> None:
    clock = FakeClock()
    with open_memory(db_url, clock) as source:
        ids = fill(source, clock)
        before, events, vecs = everything(source), ledger(source.store), vectors(source.store)
        out = io.StringIO()
        assert export_jsonl(source.store, out) == len(events)
    assert sum(map(len, vecs.values())) > 0

    copy_url = make_db_url()
    target = open_store(copy_url)
    reported: list[tuple[str, int, int | None]] = []
    assert import_jsonl(target, io.StringIO(out.getvalue()),
                        progress=lambda *a: reported.append(a)) == len(events)
    target.close()
    assert reported[-1][0] == "vectors" and reported[-1][1] == reported[-1][2]

    with open_memory(copy_url, clock) as copy:   # the embedder check passes: model recorded
        assert ledger(copy.store) == events
        assert vectors(copy.store) == vecs
        assert everything(copy) == before
        assert copy.flush() == 0                 # every vector came along
        assert_forgotten(copy, copy_url, ids)
        alice = copy.for_user("alice")
        assert alice.get(ids["tea"]).superseded_by == ids["oolong"]
        assert alice.get(ids["moved"]).metadata["supersedes"] == ids["dentist"]
        assert alice.get(ids["boss"]).valid_to is not None


def test_the_export_is_json_lines_with_a_header_and_an_end(mem: Memory) -> None:
    mem.for_user("alice").remember("Tea")
    mem.store.set_embeddings("knowledge", [
        (mem.for_user("alice").all_knowledge()["items"][0].id, "Tea",
         np.array([0.5, -1.25, 3.0], dtype=np.float32))], "test-model")
    out = io.StringIO()
    export_jsonl(mem.store, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0] == {"format": "ledgermem-export", "version": 1, "embedding_model": None,
                        "embedding_dimensions": None, "vector_encoding": "base64-float32-le",
                        "counts": {"events": 1, "vectors": 1}}
    assert [line.get("type") for line in lines[1:]] == ["event", "vector", "end"]
    assert lines[1]["kind"] == "memory.added" and lines[1]["user_id"] == "alice"
    assert struct.unpack("<3f", base64.b64decode(lines[2]["vector"])) == (0.5, -1.25, 3.0)
    assert {k: lines[2][k] for k in ("table", "text", "model")} == {
        "table": "knowledge", "text": "Tea", "model": "test-model"}
    assert lines[3] == {"type": "end", "events": 1, "vectors": 1}


def exported(mem: Memory) -> str:
    mem.for_user("alice").remember("Alice's fact")
    mem.for_user("bob").add_turn("user", "Bob's turn")
    out = io.StringIO()
    export_jsonl(mem.store, out)
    return out.getvalue()


@pytest.mark.parametrize(("damage", "error", "message"), [
    (lambda text: text.rsplit("\n", 2)[0] + "\n", StorageError, "end record"),
    (lambda text: text.replace('"events":2,"vectors":0}', '"events":3,"vectors":0}'),
     StorageError, "damaged"),
    (lambda text: "\n".join(text.splitlines()[1:]), InvalidInput, "not a ledgermem export"),
    (lambda text: text.replace('"version":1', '"version":9'), InvalidInput, "version 9"),
    (lambda text: text.replace('"type":"event"', '"type":"gossip"', 1), InvalidInput,
     "gossip"),
    (lambda text: text[:-10], InvalidInput, "not JSON"),
    (lambda text: "", InvalidInput, "empty"),
])
def test_a_damaged_export_is_refused_and_nothing_is_written(
        mem: Memory, make_db_url: Callable[[], str], damage: Callable[[str], str],
        error: type[Exception], message: str) -> None:
    text = damage(exported(mem))
    url = make_db_url()
    target = open_store(url)
    before = snapshot(url)
    with pytest.raises(error, match=message):
        import_jsonl(target, io.StringIO(text))
    target.close()
    assert snapshot(url) == before


def test_import_refuses_a_user_who_already_has_a_ledger(mem: Memory,
                                                        make_db_url: Callable[[], str]
                                                        ) -> None:
    text = exported(mem)
    url = make_db_url()
    with Memory.open(url, embedder=None) as other:
        other.for_user("carol").remember("Carol's own fact")
        other.for_user("bob").remember("Another bob")
        before = snapshot(url)
        with pytest.raises(InvalidInput, match="'bob' already has a ledger"):
            import_jsonl(other.store, io.StringIO(text))
        assert snapshot(url) == before                      # all or nothing
        other.for_user("bob").forget_user()
        assert import_jsonl(other.store, io.StringIO(text)) == 2   # disjoint users merge
        assert sorted(other.store.user_ids()) == ["alice", "bob", "carol"]


def test_import_refuses_a_payload_no_write_would_store(mem: Memory,
                                                       make_db_url: Callable[[], str]) -> None:
    """An edited export whose metadata is nested past ``MAX_JSON_DEPTH`` (or holds a NUL)
    stores nothing: such a row could not be read back over REST."""
    lines = exported(mem).splitlines()
    at = next(n for n, line in enumerate(lines) if '"memory.added"' in line)
    record = json.loads(lines[at])
    for bad in ({"a": _nested(MAX_JSON_DEPTH)}, {"note": "a\x00b"}):
        record["payload"]["item"]["metadata"] = bad
        lines[at] = json.dumps(record)
        url = make_db_url()
        with Memory.open(url, embedder=None) as other:
            before = snapshot(url)
            with pytest.raises(InvalidInput, match=rf"line {at + 1}: the payload"):
                import_jsonl(other.store, io.StringIO("\n".join(lines) + "\n"))
            assert snapshot(url) == before


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_import_refuses_vectors_of_another_model(db_url: str,
                                                 make_db_url: Callable[[], str]) -> None:
    with Memory.open(db_url, embedder=HashEmbedder(dimensions=32)) as source:
        source.for_user("alice").remember("Tea")
        source.flush()
        out = io.StringIO()
        export_jsonl(source.store, out)
    url = make_db_url()
    Memory.open(url, embedder=HashEmbedder(dimensions=64)).close()
    target = open_store(url)
    with pytest.raises(SchemaMismatch, match="hash:64"):
        import_jsonl(target, io.StringIO(out.getvalue()))
    assert target.user_counts() == {}
    target.close()


# migrate ------------------------------------------------------------------------------
def test_migrate_sqlite_to_postgres_and_back_loses_nothing(tmp_path: Path, pg_url: str
                                                           ) -> None:
    clock = FakeClock()
    first = str(tmp_path / "first.db")
    with open_memory(first, clock) as source:
        ids = fill(source, clock)
        before, events, vecs = everything(source), ledger(source.store), vectors(source.store)
        counts = source.store.user_counts()

    back = str(tmp_path / "back.db")
    for src_url, dst_url in ((first, pg_url), (pg_url, back)):
        src, dst = open_store(src_url), open_store(dst_url)
        try:
            result = migrate(src, dst)
        finally:
            src.close()
            dst.close()
        assert result == {"users": 2, **{k: sum(c[k] for c in counts.values())
                                         for k in ("events", "items", "turns", "tool_calls",
                                                   "vectors")}}
        with open_memory(dst_url, clock) as copy:
            assert copy.store.user_counts() == counts
            assert ledger(copy.store) == events
            assert vectors(copy.store) == vecs
            assert_forgotten(copy, dst_url, ids)
            got = everything(copy)
            if dst_url == back:
                assert got == before
            else:   # PostgreSQL computes the same scores in another order of operations
                for user_id, seen in before.items():
                    assert {k: v for k, v in got[user_id].items() if "search" not in k and
                            k != "conversations"} == {
                        k: v for k, v in seen.items() if "search" not in k and
                        k != "conversations"}
                    for key in ("search", "conversations"):
                        for ours, theirs in zip(got[user_id][key], seen[key], strict=True):
                            assert [i for i, _ in ours] == [i for i, _ in theirs]
                            assert np.allclose([s for _, s in ours], [s for _, s in theirs],
                                               atol=1e-5)
                    assert got[user_id]["search_all"] == seen["search_all"]


def test_migrate_checks_the_counts_and_keeps_nothing_on_a_mismatch(
        mem: Memory, make_db_url: Callable[[], str]) -> None:
    exported(mem)
    # A damaged source view: its ledger holds an item its knowledge table lost.
    rows(mem, "DELETE FROM knowledge WHERE user_id = ?", ["alice"])
    url = make_db_url()
    dst = open_store(url)
    with pytest.raises(StorageError, match="differs for 1 users"):
        migrate(mem.store, dst)
    assert dst.user_counts() == {}
    with pytest.raises(InvalidInput, match="both the source and the destination"):
        migrate(mem.store, mem.store)
    mem.rebuild()                      # repaired from the ledger: now it moves
    assert migrate(mem.store, dst)["items"] == 1
    dst.close()


# the CLI ------------------------------------------------------------------------------
def test_cli_export_import_and_migrate(db_url: str, make_db_url: Callable[[], str],
                                       tmp_path: Path) -> None:
    clock = FakeClock()
    with open_memory(db_url, clock) as source:
        fill(source, clock)
        before = everything(source)
    runner = CliRunner()
    dump = tmp_path / "dump.jsonl"
    done = runner.invoke(main, ["--db", db_url, "--json", "export", "--output", str(dump)])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["exported_events"] == dump.read_text().count(
        '"type":"event"')

    imported_url = make_db_url()
    done = runner.invoke(main, ["--db", imported_url, "import", str(dump)])
    assert done.exit_code == 0, done.output
    again = runner.invoke(main, ["--db", imported_url, "import", str(dump)])
    assert again.exit_code == 2 and "already has a ledger" in again.output

    migrated_url = make_db_url()
    done = runner.invoke(main, ["--json", "migrate", db_url, migrated_url])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["users"] == 2
    for url in (imported_url, migrated_url):
        with open_memory(url, clock) as copy:
            assert everything(copy) == before


def test_a_failed_cli_import_leaves_no_new_database_and_an_old_one_as_it_was(
        tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header"\n', encoding="utf-8")   # cut short
    runner = CliRunner()
    fresh = tmp_path / "fresh.db"
    done = runner.invoke(main, ["--db", str(fresh), "import", str(bad)])
    assert done.exit_code == 2, done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    kept = tmp_path / "kept.db"
    with Memory.open(kept, embedder=None) as mem:
        mem.for_user("alice").remember("Alice's fact")
    before = snapshot(str(kept))
    done = runner.invoke(main, ["--db", str(kept), "import", str(bad)])
    assert done.exit_code == 2, done.output
    assert kept.exists() and snapshot(str(kept)) == before


def test_cli_export_piped_into_import_as_processes(db_url: str,
                                                   make_db_url: Callable[[], str]) -> None:
    clock = FakeClock()
    with open_memory(db_url, clock) as source:
        fill(source, clock)
        before = everything(source)
    target = make_db_url()
    command = [sys.executable, "-m", "ledgermem"]
    exporter = subprocess.run([*command, "--db", db_url, "export"], capture_output=True,
                              check=True, timeout=120)
    assert b"exported" in exporter.stderr and exporter.stdout.startswith(b'{"format"')
    importer = subprocess.run([*command, "--db", target, "import", "-"],
                              input=exporter.stdout, capture_output=True, timeout=120)
    assert importer.returncode == 0, importer.stderr
    with open_memory(target, clock) as copy:
        assert everything(copy) == before
