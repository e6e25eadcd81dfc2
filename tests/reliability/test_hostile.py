"""Hostile and broken input through the three doors a caller has: the Python API, the
CLI and the agent's memory tools.

Empty and 10 MB strings, text from every Unicode plane, NUL and control bytes, lone
surrogates, FTS5 operators, SQL fragments, invalid JSON, absurd ``top_k`` / limits /
offsets / days, NaN and infinities, wrong types. Whatever comes in:

- the API either does the call or raises a ``LedgermemError`` (never another
  exception), and a refused call changes nothing: the digest of every view of the
  store (``bench.stores.views_digest``) is the same before and after;
- the CLI exits 0, 2 (bad input) or 3 (not found), with one ``error:`` line and never
  a traceback, and a refused command changes nothing;
- a memory tool answers JSON, a refusal is a readable ``{"error", "code"}`` (never
  ``internal_error``), and a refused call changes nothing.

Example counts are kept small; ``tests/properties/test_api_fuzz.py`` fuzzes every
public method by introspection beside this.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.stores import views_digest
from ledgermem import LedgermemError, Memory, UserMemory
from ledgermem.agent.tools import TOOL_NAMES, MemoryTools
from ledgermem.cli import main
from tests.support import FakeClock, is_postgres

TEN_MB = "x" * 10_000_000
SURROGATES = st.characters(categories=["Cs"])
PLANES = st.integers(0, 16).flatmap(lambda plane: st.characters(
    min_codepoint=plane * 0x10000, max_codepoint=plane * 0x10000 + 0xFFFF))
CRAFTED = [
    "", " ", "\t\n\r", "\x00", "a\x00b", "\ud800", "x\udfff", "\x01\x02\x1b[31m\x7f\x9f",
    '"', '" AND NEAR(a b, 2) OR *', "-kites NOT ^tea* content:x {a b}:c", "tea)(", "a OR",
    "'; DROP TABLE events; --", "' OR '1'='1", "1); DELETE FROM knowledge WHERE (1=1",
    "%", "_", "\\", "$1", "?", "%s", "{\"a\":", "[1, 2", "null", "{}", "NaN", "-Infinity",
    "person:", ":x", "a:b:c", "type:" + "n" * 3_000, "é" * 20_000, "x" * 100_001, TEN_MB,
]
NUMBERS = [0, -1, 1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308, -1e308, 0.5,
           math.nan, math.inf, -math.inf, True, False]
WRONG_TYPES: list[Any] = [None, [], {}, [1, "a"], {"a": "\x00"}, {"\ud800": 1}, {1: 2},
                          {"n": math.nan}, {"deep": [[[[{"x": "\x00"}]]]]}, b"bytes",
                          object(), ("a",), {"a"}, [{"role": "user"}],
                          [{"role": "robot", "content": "hi"}],
                          [{"role": "user", "content": 5}]]
HOSTILE = st.one_of(
    st.sampled_from(CRAFTED), st.sampled_from(NUMBERS), st.sampled_from(WRONG_TYPES),
    st.text(PLANES, max_size=20), st.text(SURROGATES, min_size=1, max_size=3),
    st.integers(), st.floats(),
)
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "40"))
"""Examples per property (``HOSTILE_EXAMPLES=400`` for a longer hunt); a quarter of them
on PostgreSQL, where each call costs more and the same Python code runs."""
FEW = settings(max_examples=EXAMPLES, deadline=None, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow, HealthCheck.data_too_large])

# Valid arguments per call; the test replaces one or two of them with hostile values.
ITEM, TURN = "<item>", "<turn>"
CALLS: dict[str, dict[str, Any]] = {
    "remember": {"content": "Kites need wind", "category": "fact", "context": "hobby",
                 "entity": "topic:kites", "confidence": 0.5, "due_at": "2026-07-01",
                 "metadata": {"k": "v"}, "source": "user", "valid_from": "2026-05-01"},
    "search": {"query": "kites wind", "top_k": 5, "category": "fact", "context": "hobby",
               "entity": "topic:kites", "time_from": "2026-01-01", "min_score": 0.1,
               "time_mode": "boost", "as_of": None, "touch": False},
    "search_all": {"query": "kites", "top_k": 5, "session_id": "alice:chat", "touch": False},
    "search_conversations": {"query": "kites", "limit": 5, "session_id": "alice:chat",
                             "time_from": "2026-01-01", "time_to": "2026-12-31"},
    "update": {"item_id": ITEM, "content": "Kites need steady wind", "confidence": 0.3,
               "metadata": {"k": "w"}, "due_at": "2026-08-01", "entity": "topic:kite"},
    "revise": {"item_id": ITEM, "content": "Kites need a steady wind", "reason": "why"},
    "invalidate": {"item_id": ITEM, "reason": "no longer", "at": "2026-06-01"},
    "get": {"item_id": ITEM, "as_of": "2026-06-02"},
    "history": {"item_id": ITEM},
    "forget": {"item_id": "no-such-id"},
    "add_turn": {"role": "user", "content": "We flew kites", "session_id": "alice:chat",
                 "name": "ann", "at": "2026-06-01T11:00:00Z", "metadata": {"n": 1}},
    "add_turns": {"turns": [{"role": "user", "content": "Kites again"}],
                  "session_id": "alice:chat", "infer": False},
    "log_tool_call": {"name": "web_search", "arguments": {"q": "kites"}, "success": True,
                      "duration_ms": 12.5, "session_id": "alice:chat"},
    "all_knowledge": {"limit": 5, "offset": 0, "sort": "updated_at", "order": "desc",
                      "category": "fact", "source": "user", "sensitive": False},
    "recent_conversations": {"limit": 5},
    "session_history": {"session_id": "alice:chat", "limit": 5},
    "by_entity": {"entity": "topic:kites", "limit": 5},
    "by_category": {"category": "fact", "limit": 5},
    "upcoming": {"days": 7},
    "activity_timeline": {"days": 7},
    "tool_errors": {"name": "web_search", "limit": 5},
    "record": {"kind": "world.observed", "payload": {"text": "wind rises"},
               "agent_id": "pilot", "visibility": "global"},
    "ledger_events": {"kinds": ["world.observed"], "limit": 5, "since": "2026-01-01"},
    "episodic": {"agent_id": "pilot", "n": 5},
    "salient": {"agent_id": "pilot", "query": "wind", "k": 5},
    "beliefs": {"agent_id": "pilot"},
    "prune": {"days": 90, "min_confidence": 0.1},
    "apply_confidence_decay": {"unused_days": 30, "factor": 0.9},
}


@pytest.fixture
def hostile_mem(db_url: str) -> Iterator[Memory]:
    """Keyword search only and recall bookkeeping held back (no background write
    between two digests)."""
    memory = Memory.open(db_url, embedder=None, clock=FakeClock(), recall_interval_s=3600)
    yield memory
    memory.close()


@pytest.fixture
def alice(hostile_mem: Memory) -> tuple[UserMemory, dict[str, str]]:
    user = hostile_mem.for_user("alice")
    item = user.remember("Kites need wind", entity="topic:kites", context="hobby")
    turn = user.add_turn("user", "We flew kites on the beach", session_id="alice:chat")
    user.record("world.observed", {"text": "the wind rises"}, agent_id="pilot")
    hostile_mem.for_user("bob").remember("Bob keeps bees")
    return user, {ITEM: item.id, TURN: turn.id}


def refused_changes_nothing(memory: Memory, action: Any) -> bool:
    """Run ``action``: True if it was refused (and then nothing changed)."""
    before = views_digest(memory.store)
    try:
        action()
    except LedgermemError:
        assert views_digest(memory.store) == before, "a refused call changed the store"
        return True
    except Exception as exc:  # the finding this test exists for
        pytest.fail(f"an untyped {type(exc).__name__} escaped: {exc!r:.300}")
    return False


# the Python API ---------------------------------------------------------------------
def examples(memory: Memory) -> settings:
    return settings(FEW, max_examples=max(5, EXAMPLES // 4) if is_postgres(memory)
                    else EXAMPLES)


def test_the_api_raises_only_ledgermem_errors_and_refusals_change_nothing(
        hostile_mem: Memory, alice: tuple[UserMemory, dict[str, str]]) -> None:
    user, ids = alice

    @examples(hostile_mem)
    @given(data=st.data())
    def call(data: st.DataObject) -> None:
        method = data.draw(st.sampled_from(sorted(CALLS)), label="method")
        arguments = {name: ids.get(value, value) if isinstance(value, str) else value
                     for name, value in CALLS[method].items()}
        for name in data.draw(st.sets(st.sampled_from(sorted(arguments)), min_size=1,
                                      max_size=2), label="hostile"):
            arguments[name] = data.draw(HOSTILE, label=name)
        refused_changes_nothing(hostile_mem, lambda: getattr(user, method)(**arguments))

    call()


@pytest.mark.parametrize("text", [TEN_MB, "é" * 20_000, "\U0010fffd" * 50, "\x00", "\ud800"])
def test_huge_and_broken_text_everywhere_a_query_goes(
        hostile_mem: Memory, alice: tuple[UserMemory, dict[str, str]], text: str) -> None:
    user, _ = alice
    for call in (user.search, user.search_all, user.search_conversations,
                 lambda q: user.salient("pilot", q)):
        refused_changes_nothing(hostile_mem, lambda call=call: call(text))


def test_for_user_refuses_what_it_cannot_scope(hostile_mem: Memory) -> None:
    @examples(hostile_mem)
    @given(user_id=HOSTILE, agent_id=HOSTILE, context=HOSTILE)
    def scope(user_id: Any, agent_id: Any, context: Any) -> None:
        def write() -> None:
            user = hostile_mem.for_user(user_id, agent_id=agent_id, context=context)
            user.remember("Carol flies kites")

        refused_changes_nothing(hostile_mem, write)

    scope()


# the CLI ------------------------------------------------------------------------------
CLI_TEXT = st.one_of(st.sampled_from([t for t in CRAFTED if len(t) < 200_000]),
                     st.text(PLANES, max_size=15), st.text(SURROGATES, min_size=1, max_size=2),
                     st.integers().map(str), st.floats().map(str))


def _commands(item: str, data: st.DataObject) -> list[str]:
    value = data.draw(CLI_TEXT, label="value")
    return data.draw(st.sampled_from([
        ["remember", value], ["remember", "ok", "--confidence", value],
        ["remember", "ok", "--due", value], ["remember", "ok", "--entity", value],
        ["recall", value], ["recall", "kites", "--top-k", value],
        ["recall", value, "--conversations"], ["recall", value, "--all"],
        ["list", "--limit", value], ["list", "--offset", value], ["list", "--sort", value],
        ["get", value], ["get", item, "--as-of", value], ["history", value],
        ["update", value, "--content", "new"], ["update", item, "--content", value],
        ["update", item, "--confidence", value], ["update", item, "--due", value],
        ["forget", value], ["restore", value], ["upcoming", "--days", value],
        ["add-turn", value], ["add-turn", "hi", "--at", value],
        ["add-turn", "hi", "--session", value], ["prune", "--days", value],
        ["export", "--user", value], ["--user", value, "list"],
    ]), label="command")


def _cli_db(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "cli.db")
    with Memory.open(db, embedder=None) as memory:
        item = memory.for_user("local").remember("Kites need wind")
        memory.for_user("local").add_turn("user", "We flew kites")
    return db, item.id


def _run_cli(db: str, args: list[str], input: str | None = None) -> tuple[int, str]:
    """Run one command; check it exited as a user should see; returns (code, stderr)."""
    result = CliRunner().invoke(main, ["--db", db, "--embedder", "none", *args],
                                input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, result.exception)
    assert "Traceback" not in result.output, (args, result.output)
    assert result.exit_code in (0, 2, 3), (args, result.exit_code, result.output[-500:])
    if result.exit_code:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, (args, result.stderr[-500:])
    return result.exit_code, result.stderr


def _digest_of(db: str) -> Any:
    with Memory.open(db, embedder=None) as memory:
        return views_digest(memory.store)


@pytest.mark.sqlite_only  # reason: the CLI is the same over both stores; the stores'
# refusals are tested on both by the API test above
@FEW
@given(data=st.data())
def test_the_cli_exits_2_or_3_with_one_line_and_changes_nothing(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    db, item = _cli_db(tmp_path_factory.mktemp("cli"))
    args = _commands(item, data)
    before = _digest_of(db)
    code, _ = _run_cli(db, args)
    if code:
        assert _digest_of(db) == before, args


@pytest.mark.sqlite_only  # reason: as above
@pytest.mark.parametrize("content", [
    "{not json", "[1, 2]", '"a string"', "null", '{"role": "user"}',
    '{"role": "user", "content": "a\\u0000b"}', '{"role": "user", "content": "\\ud800"}',
    '{"role": "robot", "content": "hi"}', '{"role": "user", "content": 5}',
    '{"role": "user", "content": "ok"}\n{broken', "", "\n\n",
    '{"role": "user", "content": "' + "x" * 200_000 + '"}', "[" * 100_000,
])
def test_add_turns_and_import_refuse_broken_files(tmp_path: Path, content: str) -> None:
    db, _ = _cli_db(tmp_path)
    path = tmp_path / "input.jsonl"
    path.write_text(content, encoding="utf-8")
    before = _digest_of(db)
    for command in (["add-turns", str(path)], ["import", str(path)],
                    ["add-turns", "-"], ["import", "-"]):
        code, _ = _run_cli(db, command, input=content if command[-1] == "-" else None)
        assert code == 2, command
    assert _digest_of(db) == before


# the agent's memory tools -----------------------------------------------------------
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
              st.sampled_from(CRAFTED[:-3]), st.text(PLANES, max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
TOOL_ARGUMENTS = st.one_of(
    st.sampled_from(["", "{", "{\"query\": ", "null", "[]", "42", '"text"', "[" * 50_000,
                     '{"query": "kites", "query": 5}', "{\"content\": \"\\ud800\"}",
                     '{"id": "\'; DROP TABLE knowledge; --"}', TEN_MB]),
    st.dictionaries(st.sampled_from(["content", "query", "id", "limit", "category",
                                     "context", "entity", "due_at", "time_from",
                                     "session_id", "sensitive", "confidence", "extra"]),
                    JSON_VALUES, max_size=4),
    st.dictionaries(st.sampled_from(["content", "query", "id", "limit"]),
                    JSON_VALUES, max_size=3).map(json.dumps),
)
CODES = {"unknown_tool", "invalid_arguments", "not_found", "invalid_input", "failed"}


def test_memory_tools_answer_a_readable_error_and_change_nothing(
        hostile_mem: Memory, alice: tuple[UserMemory, dict[str, str]]) -> None:
    tools = MemoryTools(alice[0])

    @examples(hostile_mem)
    @given(name=st.one_of(st.sampled_from(TOOL_NAMES), HOSTILE), arguments=TOOL_ARGUMENTS)
    def call(name: Any, arguments: Any) -> None:
        before = views_digest(hostile_mem.store)
        answer = tools.call(name, arguments)
        result = json.loads(answer)
        assert isinstance(result, dict)
        if "error" in result:
            assert result["code"] in CODES, result
            assert "Traceback" not in result["error"] and len(answer) < 4_000
            assert views_digest(hostile_mem.store) == before, (name, result)

    call()


def test_a_tool_error_never_echoes_a_huge_argument(
        hostile_mem: Memory, alice: tuple[UserMemory, dict[str, str]]) -> None:
    user, _ = alice
    for name, arguments in (("recall", {"query": TEN_MB}),
                            ("remember", {"content": TEN_MB}),
                            ("forget", {"id": TEN_MB})):
        answer = MemoryTools(user).call(name, arguments)
        assert json.loads(answer)["code"] in CODES and len(answer) < 4_000
    assert not is_postgres(hostile_mem) or hostile_mem.store.user_ids()
