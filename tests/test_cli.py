"""The ``ledgermem`` command end to end on a real file: every knowledge command, JSON
output, exit codes (2 bad input, 3 not found), and recall's --conversations, --all and
--time-mode.

Each command is a process of its own in real use, so a command that writes waits for
the embedding of what it wrote: what one command wrote is searchable by meaning in the
next, never only when a background thread happened to finish before the process ended.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from click.testing import CliRunner, Result

from ledgermem import Memory
from ledgermem.cli import main


def run(db: str, *args: str, user: str = "ann", code: int = 0) -> Result:
    result = CliRunner().invoke(main, ["--db", db, "--user", user, *args])
    assert result.exit_code == code, result.output
    return result


def as_json(db: str, *args: str, user: str = "ann") -> Any:
    return json.loads(run(db, "--json", *args, user=user).stdout)


def test_remember_recall_list_history_forget(db: str) -> None:
    tea = as_json(db, "remember", "Ann prefers green tea", "--category", "preference",
                  "--entity", "person:ann")
    as_json(db, "remember", "Ann's flight to Lisbon leaves on Friday")
    hits = as_json(db, "recall", "green tea")
    assert hits[0]["item"]["id"] == tea["id"]
    assert hits[0]["why"]["keyword_rank"] == 1
    page = as_json(db, "list", "--category", "preference")
    assert page["total"] == 1 and page["items"][0]["entity"] == "person:ann"
    kinds = [event["kind"] for event in as_json(db, "history", tea["id"])]
    assert kinds[0] == "memory.added"
    assert as_json(db, "forget", tea["id"]) == {"forgotten": tea["id"]}
    assert tea["id"] not in {h["item"]["id"] for h in as_json(db, "recall", "green tea")}
    assert as_json(db, "stats")["items"] == 1


def test_what_a_command_wrote_has_its_vector_when_the_command_returns(db: str) -> None:
    def embedded(table: str, row_id: str) -> bool:
        with sqlite3.connect(db) as conn:
            return bool(conn.execute(f"SELECT embedding IS NOT NULL FROM {table} WHERE id = ?",
                                     [row_id]).fetchone()[0])

    item = as_json(db, "remember", "Ann's flight to Lisbon leaves on Friday")
    assert embedded("knowledge", item["id"])
    turn = as_json(db, "add-turn", "I packed the green raincoat", "--session", "s1")
    assert embedded("conversations", turn["id"])


def test_recall_leaves_out_an_item_that_shares_nothing_with_the_query(db: str) -> None:
    tea = as_json(db, "remember", "Ann prefers green tea")
    as_json(db, "remember", "Ann's flight to Lisbon leaves on Friday")
    assert [h["item"]["id"] for h in as_json(db, "recall", "green tea")] == [tea["id"]]


def test_users_are_kept_apart(db: str) -> None:
    as_json(db, "remember", "Ann's locker code is 4417")
    assert as_json(db, "recall", "locker code", user="bob") == []
    assert len(as_json(db, "recall", "locker code")) == 1


def test_tables_are_printed_without_json(db: str) -> None:
    run(db, "remember", "Ann prefers green tea")
    out = run(db, "recall", "green tea").stdout
    assert "green tea" in out and "keyword_rank" in out
    assert "nothing found" in run(db, "recall", "green tea", user="bob").stdout


def test_bad_input_exits_2_and_stores_nothing(db: str) -> None:
    result = run(db, "remember", "   ", code=2)
    assert "error:" in result.stderr
    run(db, "remember", "ok", "--confidence", "7", code=2)
    run(db, "recall", "tea", "--top-k", "0", code=2)
    assert as_json(db, "stats")["items"] == 0


def test_unknown_ids_exit_3(db: str) -> None:
    run(db, "remember", "Ann prefers green tea")
    assert "no memory" in run(db, "forget", "nope", code=3).stderr
    run(db, "history", "nope", code=3)


def test_recall_conversations_all_and_time_mode(db: str) -> None:
    with Memory.open(db, embedder=None) as memory:
        ann = memory.for_user("ann")
        ann.add_turn("user", "I booked the pottery class for Saturday", session_id="s1")
        ann.remember("Ann goes to a pottery class", "fact")
    turns = as_json(db, "recall", "pottery class", "--conversations")
    assert [h["turn"]["session_id"] for h in turns] == ["s1"]
    both = as_json(db, "recall", "pottery class", "--all")
    assert {("item" if h["item"] else "turn") for h in both} == {"item", "turn"}
    assert as_json(db, "recall", "pottery class last year", "--time-mode", "filter") == []
    assert len(as_json(db, "recall", "pottery class last year", "--time-mode", "off")) == 1
    run(db, "recall", "pottery", "--time-mode", "sometimes", code=2)
    run(db, "recall", "pottery", "--all", "--conversations", code=2)


def test_prune_and_rebuild(db: str) -> None:
    as_json(db, "remember", "Ann prefers green tea")
    assert as_json(db, "prune", "--days", "90") == {"turns": 0, "tool_calls": 0, "items": 0}
    assert as_json(db, "rebuild") == {"rebuilt": True}
    assert len(as_json(db, "recall", "green tea")) == 1
