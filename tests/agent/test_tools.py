"""The five memory tools, their dispatcher and the slash commands (``ledgermem.agent.tools``).

Every call goes through ``MemoryTools.call`` as a model would make it (a JSON string or
a dict) and is read back as the JSON the model would see. A refused call answers with
an error and leaves every stored row as it was (``snapshot``).
"""

from __future__ import annotations

import json
import logging
from typing import Any, get_args

import pytest

from ledgermem import Item, Memory, NotFound, UserMemory
from ledgermem.agent.tools import (
    TOOL_NAMES,
    TOOLS,
    Category,
    MemoryTools,
    SlashCommands,
    SlashResult,
    anthropic_tools,
    is_memory_tool,
    openai_tools,
)
from ledgermem.types import CATEGORIES, MAX_CONTENT
from tests.support import FakeClock, snapshot

NAMES = ("remember", "recall", "update_memory", "forget", "search_past_conversations")


def call(tools: MemoryTools, name: str, arguments: Any = None) -> dict[str, Any]:
    """What the model reads back, decoded; the JSON text never holds a traceback."""
    text = tools.call(name, arguments)
    assert isinstance(text, str)
    assert "Traceback" not in text and 'File "' not in text
    result = json.loads(text)
    assert isinstance(result, dict)
    return result


def ok(tools: MemoryTools, name: str, arguments: Any = None) -> dict[str, Any]:
    result = call(tools, name, arguments)
    assert "error" not in result, result
    return result


@pytest.fixture
def tools(alice: UserMemory) -> MemoryTools:
    return MemoryTools(alice)


@pytest.fixture
def bob_tools(bob: UserMemory) -> MemoryTools:
    return MemoryTools(bob)


@pytest.fixture
def item(alice: UserMemory) -> Item:
    return alice.remember("Alice prefers green tea over coffee", "preference")


# schemas ------------------------------------------------------------------------------
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict,
    "array": list}


def check_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema subset function-calling APIs read: a flat object whose
    properties each have one JSON type, a description, and consistent constraints."""
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema) <= {"type", "properties", "required", "additionalProperties"}
    props = schema["properties"]
    assert set(schema["required"]) <= set(props)
    for name, prop in props.items():
        assert set(prop) <= {"type", "description", "enum", "default", "minLength",
                             "maxLength", "minimum", "maximum"}, name
        assert prop["type"] in JSON_TYPES, name
        assert isinstance(prop["description"], str) and len(prop["description"]) > 10, name
        kind = JSON_TYPES[prop["type"]]
        for value in prop.get("enum", []):
            assert isinstance(value, kind)
        if "default" in prop:
            assert isinstance(prop["default"], kind), name
            assert name not in schema["required"]
        if "minLength" in prop or "maxLength" in prop:
            assert prop["type"] == "string"
            assert 0 <= prop.get("minLength", 0) <= prop.get("maxLength", 10**9)
        if "minimum" in prop or "maximum" in prop:
            assert prop["type"] in ("integer", "number")
            assert prop.get("minimum", -1e18) <= prop.get("maximum", 1e18)
    json.dumps(schema)


def test_both_formats_list_the_five_tools_with_the_same_schemas() -> None:
    assert TOOL_NAMES == NAMES
    openai, anthropic = openai_tools(), anthropic_tools()
    assert [t["function"]["name"] for t in openai] == list(NAMES)
    assert [t["name"] for t in anthropic] == list(NAMES)
    for o, a in zip(openai, anthropic, strict=True):
        assert set(o) == {"type", "function"} and o["type"] == "function"
        assert set(o["function"]) == {"name", "description", "parameters"}
        assert set(a) == {"name", "description", "input_schema"}
        assert o["function"]["description"] == a["description"]
        assert o["function"]["parameters"] == a["input_schema"]
        check_schema(a["input_schema"])
    assert MemoryTools.openai_tools() == openai
    assert MemoryTools.anthropic_tools() == anthropic


def test_schemas_say_what_each_tool_takes() -> None:
    params = {t["name"]: t["input_schema"] for t in anthropic_tools()}
    assert set(params["remember"]["properties"]) == {
        "content", "category", "domain", "due_at", "context", "sensitive", "entity"}
    assert params["remember"]["required"] == ["content"]
    assert params["remember"]["properties"]["content"]["maxLength"] == MAX_CONTENT
    assert params["remember"]["properties"]["category"]["enum"] == list(CATEGORIES)
    assert set(params["recall"]["properties"]) == {
        "query", "category", "context", "entity", "time_from", "time_to", "limit"}
    assert params["recall"]["required"] == ["query"]
    assert set(params["update_memory"]["properties"]) == {
        "id", "content", "category", "confidence", "context", "entity", "sensitive",
        "due_at", "reminded_at"}
    assert params["update_memory"]["required"] == ["id"]
    assert params["update_memory"]["properties"]["reminded_at"]["enum"] == ["now"]
    assert params["forget"] == {"type": "object", "additionalProperties": False,
                                "properties": {"id": params["forget"]["properties"]["id"]},
                                "required": ["id"]}
    assert set(params["search_past_conversations"]["properties"]) == {
        "query", "time_from", "time_to", "session_id", "limit"}
    assert params["search_past_conversations"]["required"] == []
    assert get_args(Category) == CATEGORIES


def test_exports_are_fresh_copies() -> None:
    first = openai_tools()
    first[0]["function"]["parameters"]["properties"].clear()
    anthropic_tools()[0]["input_schema"]["required"].append("x")
    assert openai_tools()[0]["function"]["parameters"]["properties"]
    assert anthropic_tools()[0]["input_schema"]["required"] == ["content"]


def test_defaults_in_the_schema_are_what_validation_uses() -> None:
    for spec in TOOLS.values():
        for name, prop in spec.parameters()["properties"].items():
            if "default" in prop:
                assert spec.arguments.model_fields[name].default == prop["default"]


def test_is_memory_tool() -> None:
    assert all(is_memory_tool(name) for name in NAMES)
    assert not is_memory_tool("web_search") and not is_memory_tool("Recall")
    assert MemoryTools.names == NAMES and MemoryTools.is_memory_tool("forget")


# remember -----------------------------------------------------------------------------
def test_remember_stores_verbatim_and_returns_the_id(tools: MemoryTools, alice: UserMemory,
                                                     clock: FakeClock) -> None:
    result = ok(tools, "remember", json.dumps({
        "content": "  Dentist appointment with Dr Lee  ", "category": "reminder",
        "due_at": "2026-06-03T09:00:00+00:00", "context": "personal", "domain": "health",
        "sensitive": True, "entity": "Person: Dr Lee"}))
    assert result["written"] == "added"
    stored = alice.get(result["id"])
    assert (stored.content, stored.category, stored.source, stored.context, stored.domain,
            stored.sensitive, stored.entity, stored.due_at) == (
        "Dentist appointment with Dr Lee", "reminder", "tool", "personal", "health", True,
        "person:dr_lee", "2026-06-03T09:00:00.000000+00:00")
    assert result == {
        "id": stored.id, "content": stored.content, "category": "reminder",
        "context": "personal", "confidence": 0.7, "created_at": clock.iso(),
        "updated_at": clock.iso(), "entity": "person:dr_lee", "domain": "health",
        "due_at": stored.due_at, "sensitive": True, "written": "added"}


def test_remember_with_defaults_and_dict_arguments(tools: MemoryTools,
                                                   alice: UserMemory) -> None:
    result = ok(tools, "remember", {"content": "Alice lives in Porto"})
    stored = alice.get(result["id"])
    assert (stored.category, stored.context, stored.sensitive, stored.entity) == (
        "fact", "global", False, None)
    assert set(result) == {"id", "content", "category", "context", "confidence",
                           "created_at", "updated_at", "written"}


def test_remember_reads_english_dates_and_ignores_null_optionals(
        tools: MemoryTools, alice: UserMemory) -> None:
    result = ok(tools, "remember", {"content": "Call mum", "category": "reminder",
                                    "due_at": "tomorrow 9am", "entity": None, "domain": "",
                                    "context": None, "sensitive": None})
    stored = alice.get(result["id"])
    assert stored.due_at == "2026-06-02T09:00:00.000000+00:00"
    assert (stored.entity, stored.domain, stored.context, stored.sensitive) == (
        None, None, "global", False)


def test_restating_a_fact_merges_into_it(tools: MemoryTools, alice: UserMemory) -> None:
    first = ok(tools, "remember", {"content": "Alice's manager is Sarah Chen"})
    again = ok(tools, "remember", {"content": "Alice's manager is Sarah Chen."})
    assert again["written"] == "merged" and again["id"] == first["id"]
    assert alice.all_knowledge()["total"] == 1


# recall -------------------------------------------------------------------------------
def test_recall_returns_hits_with_ids_and_scores(tools: MemoryTools, alice: UserMemory,
                                                 item: Item, clock: FakeClock) -> None:
    alice.remember("Alice's manager is Sarah Chen", entity="person:sarah_chen")
    result = ok(tools, "recall", '{"query": "green tea"}')
    [hit] = result["results"]
    assert {k: hit[k] for k in ("id", "content", "category", "created_at")} == {
        "id": item.id, "content": item.content, "category": "preference",
        "created_at": clock.iso()}
    assert 0 < hit["score"] <= 1
    found = ok(tools, "recall", {"query": "manager", "entity": "person:Sarah Chen"})
    assert [h["content"] for h in found["results"]] == ["Alice's manager is Sarah Chen"]
    assert found["results"][0]["entity"] == "person:sarah_chen"


def test_recall_filters_and_limit(tools: MemoryTools, alice: UserMemory,
                                  clock: FakeClock) -> None:
    for n in range(4):
        alice.remember(f"Kite number {n} is red", "note", context="hobby", dedup=False)
        clock.advance(days=1)
    alice.remember("Kites fly in the wind", "fact")
    assert len(ok(tools, "recall", {"query": "kite", "limit": 2})["results"]) == 2
    notes = ok(tools, "recall", {"query": "kite", "category": "note", "limit": 10})
    assert len(notes["results"]) == 4
    assert {h["category"] for h in notes["results"]} == {"note"}
    assert all(h["context"] == "hobby" for h in ok(tools, "recall", {
        "query": "kite", "context": "hobby", "limit": 50})["results"])
    early = ok(tools, "recall", {"query": "kite", "time_to": "2026-06-02T13:00:00+00:00",
                                 "limit": 10})
    assert sorted(h["content"] for h in early["results"]) == [
        "Kite number 0 is red", "Kite number 1 is red"]
    assert ok(tools, "recall", {"query": "zebra crossing"}) == {"results": []}


# update_memory ------------------------------------------------------------------------
def test_update_changes_only_the_given_fields(tools: MemoryTools, alice: UserMemory,
                                              item: Item, clock: FakeClock) -> None:
    clock.advance(hours=1)
    result = ok(tools, "update_memory", {
        "id": item.id, "content": "Alice prefers jasmine tea", "confidence": 1,
        "entity": "drink:tea", "category": None, "due_at": ""})
    stored = alice.get(item.id)
    assert (stored.content, stored.confidence, stored.entity, stored.category) == (
        "Alice prefers jasmine tea", 1.0, "drink:tea", "preference")
    assert result["id"] == item.id and result["content"] == stored.content
    assert result["updated_at"] == clock.iso() != result["created_at"]
    ok(tools, "update_memory", {"id": item.id, "sensitive": True, "context": "home",
                                "category": "fact"})
    stored = alice.get(item.id)
    assert (stored.sensitive, stored.context, stored.category) == (True, "home", "fact")


def test_reminded_at_now_marks_the_reminder(tools: MemoryTools, alice: UserMemory,
                                            clock: FakeClock) -> None:
    due = alice.remember("Pay rent", "reminder", due_at="2026-06-02T09:00:00+00:00")
    assert [i.id for i in alice.upcoming(days=2)] == [due.id]
    clock.advance(minutes=5)
    result = ok(tools, "update_memory", {"id": due.id, "reminded_at": "now"})
    assert result["reminded_at"] == clock.iso() == alice.get(due.id).reminded_at
    assert alice.upcoming(days=2) == []


def test_reminded_at_with_a_new_due_date(tools: MemoryTools, alice: UserMemory,
                                         clock: FakeClock) -> None:
    due = alice.remember("Pay rent", "reminder", due_at="2026-06-02T09:00:00+00:00")
    ok(tools, "update_memory", {"id": due.id, "due_at": "2026-07-02T09:00:00+00:00",
                                "reminded_at": "now"})
    stored = alice.get(due.id)
    assert (stored.due_at, stored.reminded_at) == ("2026-07-02T09:00:00.000000+00:00",
                                                   clock.iso())


# forget -------------------------------------------------------------------------------
def test_forget_deletes_by_id(tools: MemoryTools, alice: UserMemory, item: Item) -> None:
    assert ok(tools, "forget", {"id": item.id}) == {"forgotten": item.id}
    with pytest.raises(NotFound):
        alice.get(item.id)
    assert ok(tools, "recall", {"query": "green tea"}) == {"results": []}
    again = call(tools, "forget", {"id": item.id})
    assert again["code"] == "not_found"


# search_past_conversations ------------------------------------------------------------
def test_search_past_conversations(tools: MemoryTools, alice: UserMemory,
                                   clock: FakeClock) -> None:
    first = alice.add_turn("user", "I am flying to Lisbon on Friday", session_id="alice:tg")
    clock.advance(days=2)
    alice.add_turn("assistant", "Have a good flight to Lisbon!", session_id="alice:tg")
    clock.advance(days=2)
    alice.add_turn("user", "What should I cook tonight?", session_id="alice:web")
    found = ok(tools, "search_past_conversations", {"query": "Lisbon flight"})
    assert {t["content"] for t in found["turns"]} == {
        "I am flying to Lisbon on Friday", "Have a good flight to Lisbon!"}
    turn = next(t for t in found["turns"] if t["id"] == first.id)
    assert {k: turn[k] for k in ("role", "ts", "session_id")} == {
        "role": "user", "ts": first.ts, "session_id": "alice:tg"}
    window = ok(tools, "search_past_conversations", {
        "time_from": "2026-06-03T00:00:00+00:00", "time_to": "2026-06-06T00:00:00+00:00"})
    assert [t["content"] for t in window["turns"]] == [
        "What should I cook tonight?", "Have a good flight to Lisbon!"]
    web = ok(tools, "search_past_conversations", {
        "time_from": "2026-05-01", "session_id": "alice:web", "limit": 5})
    assert [t["session_id"] for t in web["turns"]] == ["alice:web"]


def test_long_turns_are_cut_in_results(tools: MemoryTools, alice: UserMemory) -> None:
    alice.add_turn("user", "lisbon " * 1_000)
    [turn] = ok(tools, "search_past_conversations", {"query": "lisbon"})["turns"]
    assert len(turn["content"]) == 2_000 and turn["truncated"] is True


# bad calls ----------------------------------------------------------------------------
ID = "<alice's item>"
BAD_CALLS: dict[str, tuple[str, Any, str]] = {
    "unknown tool": ("delete_everything", {"id": ID}, "unknown_tool"),
    "tool name case": ("Remember", {"content": "x"}, "unknown_tool"),
    "invalid JSON": ("remember", '{"content": "x",', "invalid_arguments"),
    "JSON array": ("remember", '["x"]', "invalid_arguments"),
    "JSON string": ("remember", '"remember this"', "invalid_arguments"),
    "deeply nested JSON": ("remember", "[" * 100_000 + "]" * 100_000, "invalid_arguments"),
    "content not text": ("remember", {"content": 42}, "invalid_arguments"),
    "sensitive as text": ("remember", {"content": "x", "sensitive": "yes"}, "invalid_arguments"),
    "sensitive as number": ("remember", {"content": "x", "sensitive": 1}, "invalid_arguments"),
    "unknown category": ("remember", {"content": "x", "category": "opinion"},
                         "invalid_arguments"),
    "unknown field": ("remember", {"content": "x", "colour": "red"}, "invalid_arguments"),
    "source is not the model's to set": ("remember", {"content": "x", "source": "user"},
                                         "invalid_arguments"),
    "missing content": ("remember", {"category": "fact"}, "invalid_arguments"),
    "no arguments": ("remember", None, "invalid_arguments"),
    "blank content": ("remember", {"content": "   "}, "invalid_arguments"),
    "oversize content": ("remember", {"content": "x" * (MAX_CONTENT + 1)}, "invalid_arguments"),
    "NUL in content": ("remember", {"content": "tea\x00coffee"}, "invalid_input"),
    "NUL in JSON text": ("remember", '{"content": "tea\\u0000coffee"}', "invalid_input"),
    "malformed entity": ("remember", {"content": "x", "entity": "sarah"}, "invalid_input"),
    "unreadable due_at": ("remember", {"content": "x", "due_at": "when pigs fly"},
                          "invalid_input"),
    "ISO due_at month 13": ("remember", {"content": "x", "category": "reminder",
                                         "due_at": "2026-13-01T00:00:00"}, "invalid_input"),
    "due_at at 13pm": ("remember", {"content": "x", "due_at": "tomorrow at 13pm"},
                       "invalid_input"),
    "due_at in year 1": ("remember", {"content": "x", "category": "reminder",
                                      "due_at": "0001-01-01"}, "invalid_input"),
    "due_at at 9999's end": ("remember", {"content": "x", "due_at": "9999-12-31"},
                             "invalid_input"),
    "update due_at month 14": ("update_memory", {"id": ID, "due_at": "2026-14-02T10:00:00Z"},
                               "invalid_input"),
    "recall without query": ("recall", {"category": "fact"}, "invalid_arguments"),
    "recall blank query": ("recall", {"query": " "}, "invalid_arguments"),
    "recall limit as text": ("recall", {"query": "tea", "limit": "5"}, "invalid_arguments"),
    "recall limit 0": ("recall", {"query": "tea", "limit": 0}, "invalid_arguments"),
    "recall limit too big": ("recall", {"query": "tea", "limit": 51}, "invalid_arguments"),
    "recall limit bool": ("recall", {"query": "tea", "limit": True}, "invalid_arguments"),
    "recall limit float": ("recall", {"query": "tea", "limit": 2.5}, "invalid_arguments"),
    "recall unreadable time": ("recall", {"query": "tea", "time_from": "blue"},
                               "invalid_input"),
    "update without id": ("update_memory", {"content": "x"}, "invalid_arguments"),
    "update nothing to change": ("update_memory", {"id": ID}, "invalid_arguments"),
    "update only nulls": ("update_memory", {"id": ID, "content": None}, "invalid_arguments"),
    "update confidence > 1": ("update_memory", {"id": ID, "confidence": 1.5},
                              "invalid_arguments"),
    "update confidence bool": ("update_memory", {"id": ID, "confidence": True},
                               "invalid_arguments"),
    "update confidence text": ("update_memory", {"id": ID, "confidence": "0.5"},
                               "invalid_arguments"),
    "update confidence NaN": ("update_memory", f'{{"id": "{ID}", "confidence": NaN}}',
                              "invalid_arguments"),
    "update reminded_at other": ("update_memory", {"id": ID, "reminded_at": "yesterday"},
                                 "invalid_arguments"),
    "update oversize content": ("update_memory", {"id": ID, "content": "y" * 2_001},
                                "invalid_arguments"),
    "update NUL content": ("update_memory", {"id": ID, "content": "a\x00b"}, "invalid_input"),
    "update bad due_at with content": ("update_memory", {
        "id": ID, "content": "new text", "due_at": "someday"}, "invalid_input"),
    "update bad due_at with reminded": ("update_memory", {
        "id": ID, "due_at": "someday", "reminded_at": "now"}, "invalid_input"),
    "update unknown id": ("update_memory", {"id": "no-such-id", "content": "x"}, "not_found"),
    "reminded unknown id": ("update_memory", {"id": "no-such-id", "reminded_at": "now"},
                            "not_found"),
    "update id not text": ("update_memory", {"id": 7, "content": "x"}, "invalid_arguments"),
    "forget unknown id": ("forget", {"id": "no-such-id"}, "not_found"),
    "forget extra field": ("forget", {"id": ID, "reason": "x"}, "invalid_arguments"),
    "forget NUL id": ("forget", {"id": "a\x00b"}, "invalid_input"),
    "conversations nothing to search by": ("search_past_conversations", {"limit": 5},
                                           "invalid_arguments"),
    "conversations session only": ("search_past_conversations", {"session_id": "alice:tg"},
                                   "invalid_arguments"),
    "conversations unreadable time": ("search_past_conversations", {"time_to": "blue"},
                                      "invalid_input"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_calls_answer_with_an_error_and_change_nothing(
        case: str, mem: Memory, tools: MemoryTools, alice: UserMemory, item: Item) -> None:
    alice.add_turn("user", "I like tea")
    name, arguments, code = BAD_CALLS[case]
    if isinstance(arguments, str):
        arguments = arguments.replace(ID, item.id)
    elif isinstance(arguments, dict):
        arguments = {k: item.id if v == ID else v for k, v in arguments.items()}
    before, events = snapshot(mem), mem.store.events("alice")
    result = call(tools, name, arguments)
    assert set(result) == {"error", "code", "tool"}
    assert (result["code"], result["tool"]) == (code, name)
    assert isinstance(result["error"], str) and 0 < len(result["error"]) <= 1_000
    assert "x" * 100 not in result["error"]  # the input is not echoed back
    assert mem.store.events("alice") == events
    assert snapshot(mem) == before


def test_error_messages_say_what_to_fix(tools: MemoryTools, item: Item) -> None:
    extra = call(tools, "remember", {"content": "x", "colour": "red"})["error"]
    assert "unknown argument 'colour'" in extra and "content, category" in extra
    missing = call(tools, "forget", {})["error"]
    assert "missing required argument 'id'" in missing
    wrong = call(tools, "remember", {"content": "x", "sensitive": "yes"})["error"]
    assert wrong == "invalid arguments for remember: sensitive: Input should be a valid boolean"
    unknown = call(tools, "web_search", {})["error"]
    assert "remember, recall, update_memory, forget, search_past_conversations" in unknown
    assert call(tools, "forget", {"id": "nope"})["error"] == "no memory 'nope'"


def test_a_bug_comes_back_as_an_error_result(tools: MemoryTools, alice: UserMemory,
                                             monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(alice, "search", broken)
    with caplog.at_level(logging.ERROR, logger="ledgermem.agent.tools"):
        result = call(tools, "recall", {"query": "tea"})
    assert result == {"error": "the memory tool failed unexpectedly",
                      "code": "internal_error", "tool": "recall"}
    assert "secret internal detail" in caplog.text  # logged for the developer only


def test_run_answers_what_call_encodes(tools: MemoryTools, item: Item) -> None:
    for name, arguments in (("recall", {"query": "tea"}), ("forget", {"id": "nope"}),
                            ("nope", None)):
        assert json.loads(tools.call(name, arguments)) == tools.run(name, arguments)


def test_results_are_always_utf8_text(tools: MemoryTools) -> None:
    for name, arguments in (("\ud800", {}), ("remember", '{"content": "\\ud800"}')):
        text = tools.call(name, arguments)
        text.encode("utf-8")
        assert "error" in json.loads(text)


def test_arguments_as_empty_text_are_no_arguments(tools: MemoryTools) -> None:
    assert call(tools, "forget", "")["code"] == "invalid_arguments"
    assert "missing required argument 'id'" in call(tools, "forget", "  ")["error"]


# isolation ----------------------------------------------------------------------------
def test_bob_never_sees_alice_through_any_tool(mem: Memory, alice: UserMemory,
                                               bob_tools: MemoryTools, item: Item) -> None:
    alice.add_turn("user", "My green tea order is ready", session_id="alice:tg")
    before = snapshot(mem)
    assert ok(bob_tools, "recall", {"query": "green tea"}) == {"results": []}
    assert ok(bob_tools, "search_past_conversations", {"query": "green tea"}) == {"turns": []}
    assert ok(bob_tools, "search_past_conversations", {
        "time_from": "2020-01-01", "session_id": "alice:tg"}) == {"turns": []}
    unknown = call(bob_tools, "forget", {"id": "0" * len(item.id)})
    for name, arguments in (("forget", {"id": item.id}),
                            ("update_memory", {"id": item.id, "content": "hacked"}),
                            ("update_memory", {"id": item.id, "reminded_at": "now"})):
        result = call(bob_tools, name, arguments)
        assert result["code"] == "not_found" == unknown["code"]
        assert result["error"] == f"no memory {item.id!r}"  # as for an id that never was
    assert snapshot(mem) == before
    assert alice.get(item.id) == item


# slash commands -----------------------------------------------------------------------
@pytest.fixture
def slash(alice: UserMemory) -> SlashCommands:
    return SlashCommands(alice)


@pytest.mark.parametrize("text", [
    "hello", "", "   ", "what is /remember for?", "/usr/bin is slow", "/ remember x",
    "//remember x", "/123", "remember this"])
def test_ordinary_text_is_not_a_command(slash: SlashCommands, mem: Memory, text: str) -> None:
    before = snapshot(mem)
    assert slash.handle(text) is None
    assert snapshot(mem) == before


def test_slash_remember_stores_verbatim(slash: SlashCommands, alice: UserMemory) -> None:
    result = slash.handle("/remember I prefer window seats on long flights")
    assert result is not None and result.command == "remember" and not result.reset
    assert result.reply == 'Remembered: "I prefer window seats on long flights"'
    stored = alice.get(result.data["id"])
    assert (stored.content, stored.source, stored.category) == (
        "I prefer window seats on long flights", "user", "fact")
    again = slash.handle("  /Remember@gaia_bot   I prefer window seats on long flights  ")
    assert again is not None and again.data == {"id": stored.id, "written": "merged"}
    assert again.reply.startswith("I already knew that")
    multi = slash.handle("/remember line one\nline two")
    assert multi is not None and alice.get(multi.data["id"]).content == "line one\nline two"


@pytest.mark.parametrize("text", ["/remember", "/remember   ", "/remember \x00",
                                  "/remember " + "z" * (MAX_CONTENT + 1)])
def test_slash_remember_refuses_without_storing(slash: SlashCommands, mem: Memory,
                                                text: str) -> None:
    before = snapshot(mem)
    result = slash.handle(text)
    assert result is not None and result.command == "remember" and result.data == {}
    assert "Usage: /remember" in result.reply or "Could not" in result.reply \
        or "shorten" in result.reply
    assert "z" * 100 not in result.reply
    assert snapshot(mem) == before


def test_slash_memory_lists_active_memories(slash: SlashCommands, alice: UserMemory,
                                            bob: UserMemory) -> None:
    empty = slash.handle("/memory")
    assert empty == SlashResult("memory", "I don't remember anything about you yet.",
                                data={"count": 0, "total": 0})
    tea = alice.remember("Prefers green tea", "preference")
    alice.remember("Works at\nthe port authority", entity="org:port_authority",
                   context="work")
    alice.remember("Dentist", "reminder", due_at="2026-06-03T09:30:00+00:00", sensitive=True)
    alice.revise(tea.id, "Prefers jasmine tea")
    bob.remember("Bob's secret hobby is falconry")
    result = slash.handle("/memory")
    assert result is not None and result.data == {"count": 3, "total": 3}
    assert result.reply == (
        "What I remember about you (3):\n"
        "Facts:\n"
        "- Works at the port authority (org:port_authority, work)\n"
        "Preferences:\n"
        "- Prefers jasmine tea\n"
        "Reminders:\n"
        "- Dentist (due 2026-06-03 09:30 UTC, sensitive)")


def test_slash_memory_says_how_many_more(slash: SlashCommands, alice: UserMemory) -> None:
    for n in range(103):
        alice.remember(f"Note {n}", "note", dedup=False)
    result = slash.handle("/memories")
    assert result is not None and result.data == {"count": 100, "total": 103}
    assert result.reply.endswith("... and 3 more.")


def test_slash_forget_erases_all_long_term_memory_and_keeps_turns(
        slash: SlashCommands, alice: UserMemory, bob: UserMemory, mem: Memory) -> None:
    turns = [alice.add_turn("user", "I like tea"), alice.add_turn("assistant", "Noted!")]
    old = alice.remember("Likes tea", "preference")
    alice.revise(old.id, "Likes green tea")
    alice.remember("Lives in Porto", source="llm_extract")
    alice.log_tool_call("fetch", success=False, error="timeout")  # an error_auto item
    kept = bob.remember("Bob likes coffee")
    result = slash.handle("/forget")
    assert result is not None and result.command == "forget"
    assert result.data == {"forgotten": 4}
    assert result.reply.startswith("Forgot everything I remembered about you (4 memories)")
    assert alice.all_knowledge(include_superseded=True)["total"] == 0
    assert "tea" not in json.dumps([e.payload for e in mem.store.events(
        "alice", kinds=["memory.added", "memory.updated"])])
    assert alice.recent_conversations() == turns[::-1]
    assert bob.get(kept.id) == kept
    again = slash.handle("/forget")
    assert again is not None and again.reply == "There was nothing to forget."
    assert again.data == {"forgotten": 0}


def test_slash_forget_with_text_erases_nothing(slash: SlashCommands, mem: Memory,
                                               item: Item) -> None:
    before = snapshot(mem)
    result = slash.handle("/forget my address")
    assert result is not None and result.command == "forget" and result.data == {}
    assert "erases everything" in result.reply
    assert snapshot(mem) == before


def test_slash_reset_is_flagged_for_the_session_layer(slash: SlashCommands, mem: Memory,
                                                      alice: UserMemory, item: Item) -> None:
    alice.add_turn("user", "hello")
    before = snapshot(mem)
    result = slash.handle("/reset")
    assert result is not None and result.reset is True and result.command == "reset"
    assert result.reply
    assert snapshot(mem) == before  # consolidating and clearing is the session layer's


@pytest.mark.parametrize("text", ["/help", "/frobnicate now", "/HELP"])
def test_help_and_unknown_commands(slash: SlashCommands, mem: Memory, text: str) -> None:
    before = snapshot(mem)
    result = slash.handle(text)
    assert result is not None and result.command == "help" and not result.reset
    for command in ("/remember <fact>", "/memory", "/forget", "/reset"):
        assert command in result.reply
    if "frobnicate" in text:
        assert result.reply.startswith("Unknown command /frobnicate.")
    assert snapshot(mem) == before


def test_slash_commands_are_per_user(mem: Memory, alice: UserMemory, bob: UserMemory,
                                     item: Item) -> None:
    bob_slash = SlashCommands(bob)
    listing = bob_slash.handle("/memory")
    assert listing is not None and "green tea" not in listing.reply
    forgot = bob_slash.handle("/forget")
    assert forgot is not None and forgot.data == {"forgotten": 0}
    assert alice.get(item.id) == item
