"""``remember_many`` over REST (``POST /v1/memories/batch``) and the CLI
(``ledgermem remember-many``): items in input order with ``written``, deduplicated
against the store and within the batch, a size limit, a bad entry named by its index
(or its line) with nothing stored, and the keys' rules of ``POST /v1/memories``.
REST in process on both stores and through a real ``ledgermem serve``; the CLI through
its runner and as a subprocess, on real SQLite files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledgermem import Memory
from ledgermem.cli import main
from ledgermem.server.models import MAX_BATCH
from tests.server_support import ROOT, Api, app_over, free_port, serve_env, start_server
from tests.support import snapshot

BATCH = "/v1/memories/batch"
TEA = "Likes green tea in the morning"


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def batch(api: Api, key: str, entries: list[dict[str, Any]], status: int = 201, *,
          user: str | None = None, **body: Any) -> Any:
    """The JSON answer of a batch (``body`` beside ``items``) that must answer ``status``."""
    return api.ok("POST", BATCH, key, status, user=user, json={"items": entries, **body})


def contents(mem: Memory, user: str) -> list[str]:
    """The user's stored items' texts, superseded ones included, sorted."""
    listed = mem.for_user(user).all_knowledge(limit=None, include_superseded=True)
    return sorted(item.content for item in listed["items"])


# REST ---------------------------------------------------------------------------------
def test_a_batch_comes_back_in_order_and_merges_into_the_store_and_itself(
        api: Api, mem: Memory) -> None:
    stored = api.ok("POST", "/v1/memories", api.alice, 201, json={"content": TEA})
    items = batch(api, api.alice, [
        {"content": "Owns a red bicycle"},
        {"content": TEA + "."},                          # restates the stored item
        {"content": "Owns a red bicycle."},              # restates entry 0
        {"content": "Flies to Lisbon on Monday", "category": "reminder",
         "entity": "place:lisbon", "context": "travel", "sensitive": True,
         "due_at": "2030-01-05T09:00:00+00:00", "metadata": {"from": "import"},
         "source": "tool", "confidence": 0.7, "domain": "trips", "reason": "bulk"},
        {"content": "Does not own a red bicycle"},       # a negation is another fact
    ])["items"]
    assert [i["written"] for i in items] == ["added", "merged", "merged", "added", "added"]
    assert items[1]["id"] == stored["id"] and items[1]["content"] == TEA + "."
    assert items[2]["id"] == items[0]["id"]
    # Entries merged into one item return it as stored at the end of the batch.
    assert items[0]["content"] == items[2]["content"] == "Owns a red bicycle."
    lisbon = items[3]
    assert (lisbon["category"], lisbon["entity"], lisbon["context"], lisbon["sensitive"],
            lisbon["metadata"], lisbon["source"], lisbon["confidence"], lisbon["domain"]) == (
        "reminder", "place:lisbon", "travel", True, {"from": "import"}, "tool", 0.7, "trips")
    assert lisbon["due_at"].startswith("2030-01-05T09:00:00")
    assert {i["user_id"] for i in items} == {"alice"}
    assert contents(mem, "alice") == sorted([
        TEA + ".", "Owns a red bicycle.", "Flies to Lisbon on Monday",
        "Does not own a red bicycle"])
    assert api.ok("GET", f"/v1/memories/{lisbon['id']}/history", api.alice)[0][
        "payload"]["reason"] == "bulk"
    assert mem.verify()["problems"] == []


def test_dedup_false_adds_every_entry_and_an_empty_batch_stores_nothing(
        api: Api, mem: Memory) -> None:
    items = batch(api, api.alice, [{"content": TEA}] * 3, dedup=False)["items"]
    assert len({i["id"] for i in items}) == 3 and {i["written"] for i in items} == {"added"}
    before = snapshot(mem)
    assert batch(api, api.alice, []) == {"items": []}
    assert snapshot(mem) == before


@pytest.mark.parametrize(("entry", "code", "message"), [
    ({"content": ""}, "validation_error", "body.items.2.content"),
    ({"content": "ok", "dedup": False}, "validation_error", "body.items.2.dedup"),
    ({"content": "ok", "colour": "red"}, "validation_error", "body.items.2.colour"),
    ({"content": "ok", "category": "gossip"}, "validation_error", "body.items.2.category"),
    ({"content": "ok", "confidence": 2}, "validation_error", "body.items.2.confidence"),
    ({"content": "Dentist", "due_at": "when pigs fly"}, "invalid_input", "item 2: "),
    ({"content": "a\x00b"}, "invalid_input", "item 2: "),
    ({"content": "ok", "entity": "no-colon"}, "invalid_input", "item 2: "),
])
def test_a_bad_entry_names_its_index_and_stores_nothing(
        api: Api, mem: Memory, entry: dict[str, Any], code: str, message: str) -> None:
    api.ok("POST", "/v1/memories", api.alice, 201, json={"content": TEA})
    before = snapshot(mem)
    response = api.call("POST", BATCH, api.alice, json={"items": [
        {"content": "Owns a red bicycle"}, {"content": TEA + "."}, entry,
        {"content": "Flies to Lisbon on Monday"}]})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"].startswith(message), error
    if code == "validation_error":
        assert error["details"][0]["loc"][:3] == ["body", "items", "2"]
    assert snapshot(mem) == before                  # neither entry 0 nor the merge of 1
    assert contents(mem, "alice") == [TEA]


def test_the_batch_size_is_limited_in_the_schema(api: Api, mem: Memory) -> None:
    schema = api.app.openapi()["components"]["schemas"]["RememberManyRequest"]
    assert schema["properties"]["items"]["maxItems"] == MAX_BATCH == 1_000
    before = snapshot(mem)
    entries = [{"content": f"Fact number {n} about the shed"} for n in range(MAX_BATCH + 1)]
    error = api.ok("POST", BATCH, api.alice, 422, json={"items": entries})["error"]
    assert (error["code"], error["details"][0]["loc"]) == ("validation_error",
                                                           ["body", "items"])
    assert snapshot(mem) == before
    assert len(batch(api, api.alice, entries[:MAX_BATCH], dedup=False)["items"]) == MAX_BATCH
    assert mem.for_user("alice").stats()["items"] == MAX_BATCH


def test_another_users_key_sees_nothing_of_the_batch(api: Api, mem: Memory) -> None:
    items = batch(api, api.alice, [{"content": "Sarah is her manager",
                                    "entity": "person:sarah"}, {"content": TEA}])["items"]
    for item in items:
        assert api.call("GET", f"/v1/memories/{item['id']}", api.bob).status_code == 404
    assert api.ok("POST", "/v1/memories/search", api.bob, json={"query": "Sarah tea"}) == []
    # The same texts in bob's batch are bob's own new items, not merges into alice's.
    his = batch(api, api.bob, [{"content": "Sarah is her manager",
                                "entity": "person:sarah"}])["items"]
    assert [(i["user_id"], i["written"]) for i in his] == [("bob", "added")]
    assert his[0]["id"] not in {i["id"] for i in items}
    # bob's key naming alice is refused, and writes nothing.
    before = snapshot(mem)
    refused = api.call("POST", BATCH, api.bob, user="alice",
                       json={"items": [{"content": "Mallory was here"}]})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    assert snapshot(mem) == before
    assert contents(mem, "alice") == sorted(["Sarah is her manager", TEA])


def test_the_admin_key_writes_for_the_user_it_names_and_agent_keys_as_their_agent(
        api: Api, mem: Memory) -> None:
    items = batch(api, api.admin, [{"content": "Carol keeps bees"}], user="carol")["items"]
    assert (items[0]["user_id"], items[0]["agent_id"]) == ("carol", None)
    assert contents(mem, "carol") == ["Carol keeps bees"]
    error = api.ok("POST", BATCH, api.admin, 422, json={"items": [{"content": "x"}]})
    assert error["error"]["code"] == "invalid_input"     # no user named
    miller, _ = api.keys.create("alice", agent="miller")
    items = batch(api, miller, [{"content": "The mill opens at six"}])["items"]
    assert (items[0]["user_id"], items[0]["agent_id"]) == ("alice", "miller")
    assert contents(mem, "carol") == ["Carol keeps bees"]
    assert contents(mem, "alice") == ["The mill opens at six"]


@pytest.mark.sqlite_only  # reason: the route is the same over both stores (tested above);
# this runs it through a real uvicorn, as `ledgermem serve` does
def test_a_batch_through_a_real_server(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    served = start_server(["--db", str(db), "--embedder", "none", "serve", "--port",
                           str(free_port())], serve_env(tmp_path / "data"))
    try:
        with served.client(served.user_key) as client:
            answer = client.post(BATCH, json={"items": [
                {"content": TEA}, {"content": "Owns a red bicycle"}, {"content": TEA}]})
            assert answer.status_code == 201, answer.text
            items = answer.json()["items"]
            assert [i["written"] for i in items] == ["added", "added", "merged"]
            bad = client.post(BATCH, json={"items": [{"content": "Flies on Monday"},
                                                     {"content": "x", "due_at": "never-ish"}]})
            assert (bad.status_code, bad.headers["content-type"]) == (422, "application/json")
            assert bad.json()["error"]["message"].startswith("item 1: ")
    finally:
        code, out = served.stop()
        assert code == 0 and "Traceback" not in out, out
    with Memory.open(db, embedder=None) as memory:
        assert contents(memory, "local") == sorted([TEA, "Owns a red bicycle"])


# CLI ----------------------------------------------------------------------------------
def run(db: str, *args: str, code: int = 0, input: str | bytes | None = None) -> Result:
    result = CliRunner().invoke(main, ["--db", db, "--user", "ann", "--embedder", "hash",
                                       *args], input=input)
    assert result.exit_code == code, (result.output, result.exception)
    return result


def stored(db: str) -> list[str]:
    with Memory.open(db, embedder=None) as memory:
        return contents(memory, "ann")


JSONL = "\n".join([
    json.dumps(TEA),
    "",                                                           # blank lines are skipped
    json.dumps({"content": "Owns a red bicycle", "category": "preference"}),
    json.dumps({"content": TEA + "."}),                           # restates line 1
    json.dumps({"content": "Renew the passport", "category": "reminder",
                "due_at": "2030-01-05", "entity": "doc:passport"}),
]) + "\n"


def test_remember_many_reads_json_lines_and_prints_a_summary(db: str, tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    path.write_text(JSONL, encoding="utf-8")
    result = run(db, "remember-many", str(path))
    assert "remembered 4 entries: added 3, merged 1" in result.stdout
    assert stored(db) == sorted([TEA + ".", "Owns a red bicycle", "Renew the passport"])


def test_remember_many_reads_a_json_list_from_stdin_and_prints_json(db: str) -> None:
    document = json.dumps([
        "Owns a red bicycle",
        {"content": "Owns a red bicycle.", "metadata": {"n": 1}},
        {"content": "Flies to Lisbon on Monday", "sensitive": True, "context": "travel"},
    ], indent=2)
    items = json.loads(run(db, "--json", "remember-many", "-", input=document).stdout)
    assert [(i["written"], i["user_id"]) for i in items] == [
        ("added", "ann"), ("merged", "ann"), ("added", "ann")]
    assert items[0]["id"] == items[1]["id"] and items[1]["content"] == "Owns a red bicycle."
    assert (items[2]["sensitive"], items[2]["context"]) == (True, "travel")
    again = json.loads(run(db, "--json", "remember-many", "-", "--no-dedup",
                           input=document).stdout)
    assert {i["written"] for i in again} == {"added"}
    assert len(stored(db)) == 2 + 3


@pytest.mark.parametrize(("content", "message"), [
    ('"Owns a kite"\n{"content": "ok"}\n{"content": "x", "category": "gossip"}\n',
     ", line 3: "),
    ('"Owns a kite"\n\n{"content": "x", "colour": "red"}\n', ", line 3: unknown field"),
    ('"Owns a kite"\n42\n', ", line 2: expected a text or a dict"),
    ('{"content": "ok"}\n{broken\n', ", line 2: not JSON"),
    ('["Owns a kite", {"content": ""}]', ", item 1: "),
    ('[\n  "Owns a kite",\n  {"content": "x"\n]', ": not JSON"),
    ('{"content": "x", "due_at": "when pigs fly"}', ", line 1: cannot read a date"),
    ("", " holds no entries"),
    ("\n\n", " holds no entries"),
    ("[]", " holds no entries"),
    ("[" * 100_000, ": JSON nested too deeply"),
])
def test_a_bad_file_exits_2_says_where_and_stores_nothing(
        db: str, tmp_path: Path, content: str, message: str) -> None:
    run(db, "remember", TEA)
    before = snapshot(db)
    path = tmp_path / "in.jsonl"
    path.write_text(content, encoding="utf-8")
    result = run(db, "remember-many", str(path), code=2)
    said = result.stderr.splitlines()[-1]             # after the "database: …" line
    assert said.startswith(f"error: {path}{message}"), result.stderr
    assert said.endswith("; nothing was stored") and "Traceback" not in result.stderr
    assert snapshot(db) == before


def test_a_file_that_cannot_be_read_does_not_create_the_database(
        db: str, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'"caf\xe9"\n')                          # not UTF-8
    assert "not valid UTF-8" in run(db, "remember-many", str(path), code=2).stderr
    path.write_text('{"content": "ok"\n', encoding="utf-8")
    run(db, "remember-many", str(path), code=2)
    assert not Path(db).exists()                                # read before it is opened


def test_remember_many_as_a_subprocess_from_stdin(db: str, tmp_path: Path) -> None:
    args = [sys.executable, "-m", "ledgermem", "--db", db, "--user", "ann",
            "--embedder", "none"]
    env = serve_env(tmp_path / "data")
    done = subprocess.run([*args, "--json", "remember-many", "-"], input=JSONL, env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [i["written"] for i in json.loads(done.stdout)] == [
        "added", "added", "merged", "added"]
    bad = subprocess.run([*args, "remember-many", "-"], input='{"content": 5}\n', env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    said = bad.stderr.splitlines()[-1]
    assert bad.returncode == 2 and said.startswith("error: -, line 1: "), bad.stderr
    assert said.endswith("; nothing was stored") and "Traceback" not in bad.stderr
    assert len(stored(db)) == 3
