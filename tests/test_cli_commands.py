"""The commands users reach for beyond remember / recall / list: get (show), update,
restore, forget-user, upcoming, add-turn(s), a per-user export; which database is
open; ids printed whole in tables. A real SQLite file, the ``hash`` embedder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from ledgermem import Memory
from ledgermem.cli import main
from ledgermem.testing import HashEmbedder
from tests.support import rows


def run(db: str, *args: str, user: str = "ann", code: int = 0, input: str | None = None
        ) -> Result:
    result = CliRunner().invoke(main, ["--db", db, "--user", user, "--embedder", "hash",
                                       *args], input=input)
    assert result.exit_code == code, result.output
    return result


def as_json(db: str, *args: str, user: str = "ann", input: str | None = None) -> Any:
    return json.loads(run(db, "--json", *args, user=user, input=input).stdout)


def test_get_and_show(db: str) -> None:
    tea = as_json(db, "remember", "Ann prefers green tea", "--entity", "person:ann")
    assert as_json(db, "get", tea["id"]) == as_json(db, "show", tea["id"])
    assert as_json(db, "get", tea["id"])["entity"] == "person:ann"
    shown = run(db, "show", tea["id"]).stdout
    assert "person:ann" in shown and tea["id"] in shown
    run(db, "get", tea["id"], user="bob", code=3)               # another user's id


def test_update_changes_only_what_is_given(db: str) -> None:
    item = as_json(db, "remember", "Renew the passport", "--category", "reminder",
                   "--entity", "doc:passport", "--due", "2030-01-05")
    changed = as_json(db, "update", item["id"], "--content", "Renew the passport soon",
                      "--confidence", "0.9", "--sensitive", "--entity", "")
    assert (changed["content"], changed["confidence"], changed["sensitive"],
            changed["entity"], changed["category"], changed["due_at"]) == (
        "Renew the passport soon", 0.9, True, None, "reminder", item["due_at"])
    assert as_json(db, "update", item["id"], "--not-sensitive", "--due", "")["due_at"] is None
    assert rows(db, "SELECT embedding IS NOT NULL FROM knowledge WHERE id = ?",
                [item["id"]]) == [(1,)]                     # the new text was embedded
    assert [e["kind"] for e in as_json(db, "history", item["id"])][-1] == "memory.updated"
    run(db, "update", item["id"], code=2)                        # nothing to change
    run(db, "update", item["id"], "--confidence", "7", code=2)
    run(db, "update", "nope", "--content", "x", code=3)


def test_restore_brings_back_an_invalidated_item(db: str) -> None:
    with Memory.open(db, embedder=HashEmbedder()) as memory:
        ann = memory.for_user("ann")
        item = ann.remember("Ann lives in Lisbon")
        ann.invalidate(item.id, reason="moved")
    assert as_json(db, "list")["total"] == 0
    restored = as_json(db, "restore", item.id)
    assert (restored["id"], restored["valid_to"]) == (item.id, None)
    assert as_json(db, "list")["total"] == 1
    run(db, "restore", "nope", code=3)


def test_forget_user_needs_yes(db: str) -> None:
    as_json(db, "remember", "Ann prefers green tea")
    as_json(db, "remember", "Bob likes darts", user="bob")
    refused = run(db, "forget-user", code=2)
    assert "--yes" in refused.stderr
    assert as_json(db, "stats")["items"] == 1
    assert as_json(db, "forget-user", "--yes") == {"forgotten_user": "ann", "events": 1}
    assert as_json(db, "stats")["items"] == 0
    assert as_json(db, "stats", user="bob")["items"] == 1
    assert rows(db, "SELECT count(*) FROM events WHERE user_id = 'ann'") == [(0,)]


def test_upcoming(db: str) -> None:
    soon = as_json(db, "remember", "Renew the passport", "--category", "reminder",
                   "--due", "in 3 days")
    as_json(db, "remember", "Book the dentist", "--category", "reminder",
            "--due", "in 30 days")
    assert [i["id"] for i in as_json(db, "upcoming")] == [soon["id"]]
    assert len(as_json(db, "upcoming", "--days", "60")) == 2
    assert soon["id"] in run(db, "upcoming").stdout


def test_add_turn_and_add_turns(db: str, tmp_path: Path) -> None:
    turn = as_json(db, "add-turn", "I booked the pottery class", "--session", "s1",
                   "--name", "Ann")
    assert (turn["role"], turn["session_id"]) == ("user", "s1")
    lines = [{"role": "user", "content": "Where do I park?"},
             {"role": "assistant", "content": "Behind the pottery studio."}]
    kept = as_json(db, "add-turns", "-", "--session", "s2",
                   input="\n".join(json.dumps(line) for line in lines) + "\n\n")
    assert [(t["role"], t["session_id"]) for t in kept] == [("user", "s2"), ("assistant", "s2")]
    hits = as_json(db, "recall", "pottery", "--conversations", "--top-k", "5")
    assert {h["turn"]["session_id"] for h in hits} == {"s1", "s2"}
    path = tmp_path / "turns.jsonl"
    path.write_text('{"role": "user", "content": "ok"}\nnot json\n')
    assert "line 2: not JSON" in run(db, "add-turns", str(path), code=2).stderr
    path.write_text('{"role": "robot", "content": "beep"}\n')
    run(db, "add-turns", str(path), code=2)
    run(db, "add-turn", "hi", "--role", "robot", code=2)
    assert as_json(db, "stats")["turns"] == 3                   # bad batches kept nothing


def test_add_turns_with_infer_and_no_llm_wait_for_extraction(db: str) -> None:
    as_json(db, "add-turn", "I moved from Lisbon to Porto last month", "--infer")
    assert as_json(db, "status")["extraction"]["pending"] == 1


def test_export_of_one_user(db: str, tmp_path: Path) -> None:
    tea = as_json(db, "remember", "Ann prefers green tea")
    as_json(db, "add-turn", "Tea at five", "--session", "s1")
    as_json(db, "remember", "Bob likes darts", user="bob")
    dump = tmp_path / "ann.jsonl"
    done = as_json(db, "export", "--user", "ann", "--output", str(dump))
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert done["exported_events"] == 2
    assert {r["user_id"] for r in records if r.get("type") == "event"} == {"ann"}
    assert sum(r.get("type") == "vector" for r in records) == 2
    assert records[0]["counts"] == {"events": 2, "vectors": 2}
    copy = str(tmp_path / "copy.db")
    run(copy, "import", str(dump))
    assert as_json(copy, "recall", "green tea")[0]["item"]["id"] == tea["id"]
    assert as_json(copy, "stats", user="bob")["items"] == 0
    assert "no ledger for user 'carol'" in run(db, "export", "--user", "carol", "--user",
                                               "ann", code=3).stderr


def test_the_open_database_is_named_on_stderr_never_in_json(db: str) -> None:
    as_json(db, "remember", "Ann prefers green tea")
    human = run(db, "list")
    assert human.stderr.splitlines() == [f"database: sqlite:///{Path(db).resolve()}"]
    machine = run(db, "--json", "list")
    assert machine.stderr == "" and json.loads(machine.stdout)["total"] == 1
    assert as_json(db, "status")["database"] == f"sqlite:///{Path(db).resolve()}"


def test_a_password_in_a_database_url_is_never_printed() -> None:
    from ledgermem.cli import shown_url

    assert shown_url("postgresql://ann:s3cret@db.example:5432/mem") == (
        "postgresql://ann:***@db.example:5432/mem")
    assert shown_url("sqlite:////tmp/m.db") == "sqlite:////tmp/m.db"


def test_ids_are_printed_whole_in_tables(db: str) -> None:
    items = [as_json(db, "remember", f"Ann's note number {n} about a rather long subject "
                     "that fills the content column") for n in range(2)]
    for command in (["list"], ["recall", "rather long subject"]):
        lines = run(db, *command).stdout.splitlines()
        for item in items:
            assert any(item["id"] in line for line in lines), (command, lines)


def test_export_of_one_user_on_either_backend(db_url: str, make_db_url: Callable[[], str],
                                              tmp_path: Path) -> None:
    with Memory.open(db_url, embedder=HashEmbedder()) as memory:
        ann, bob = memory.for_user("ann"), memory.for_user("bob")
        old = ann.remember("Ann lives in Lisbon")
        ann.revise(old.id, "Ann lives in Porto")
        ann.add_turn("user", "We moved last month", session_id="s1")
        bob.remember("Bob likes darts")
        memory.flush()
        expected = memory.store.user_counts()["ann"]
    dump = tmp_path / "ann.jsonl"
    CliRunner().invoke(main, ["--db", db_url, "export", "--user", "ann", "-o", str(dump)])
    copy = make_db_url()
    done = CliRunner().invoke(main, ["--db", copy, "import", str(dump)])
    assert done.exit_code == 0, done.output
    with Memory.open(copy, embedder=HashEmbedder()) as memory:
        assert memory.store.user_counts() == {"ann": expected}
        assert expected["vectors"] == 3 and expected["items"] == 2


def test_vacuum_rewrites_the_file_after_forgets_and_forget_user_runs_it_itself(
        db: str) -> None:
    with Memory.open(db, embedder=HashEmbedder()) as memory:
        ann = memory.for_user("ann")
        items = [ann.remember(f"note {n} " + "filler " * 200, dedup=False) for n in range(60)]
        for item in items:
            ann.forget(item.id)
    assert rows(db, "PRAGMA freelist_count") != [(0,)]  # freed pages, zeroed but kept
    assert as_json(db, "vacuum") == {"vacuumed": True}
    assert rows(db, "PRAGMA freelist_count") == [(0,)]
    with Memory.open(db, embedder=HashEmbedder()) as memory:
        bob = memory.for_user("bob")
        for n in range(60):
            bob.remember(f"bob {n} " + "filler " * 200, dedup=False)
        memory.for_user("ann").remember("kept")
        bob.forget_user()
        assert rows(db, "PRAGMA freelist_count") == [(0,)]
        assert [h.item.content for h in memory.for_user("ann").search("kept")
                if h.item] == ["kept"]  # the full-text index still finds rows after it
