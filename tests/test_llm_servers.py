"""The LLM client against the ways real servers refuse structured output and misshape
answers: each ``ScriptedLLMServer`` profile, what ``json_mode="auto"`` settles on and
how many requests it costs, and how answers are read (``read_json``)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from ledgermem import ProviderError
from ledgermem.pipeline.prompts import ExtractionResult
from ledgermem.providers.llm import UnclearAnswer, read_json, refuses_format
from ledgermem.providers.openai import invalid_request
from ledgermem.testing import SERVER_PROFILES, Reply, ScriptedLLMServer
from tests.pipeline.conftest import make_llm

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


class Greeting(BaseModel):
    text: str


def formats(server: ScriptedLLMServer) -> list[tuple[int, str | None]]:
    """(status, response_format type) of every chat request, in order."""
    return [(r.status, (r.body.get("response_format") or {}).get("type"))
            for r in server.chat_requests]


@pytest.mark.parametrize(("profile", "refused_with", "settles_on"), [
    ("llama-cpp-python", 500, "json_object"),
    ("llama-server-old", 500, "json_object"),
    ("vllm", 400, "json_object"),
    ("gemini", 400, "json_object"),
    ("strict-422", 422, "json_object"),
])
def test_auto_settles_once_on_the_mode_the_server_takes_without_retrying_a_refusal(
        profile: str, refused_with: int, settles_on: str) -> None:
    with ScriptedLLMServer({"text": "one"}, {"text": "two"}, profile=profile) as server:
        llm = make_llm(server, retries=3)  # three retries that a refusal must not spend
        assert llm.complete(HELLO, Greeting, purpose="test").text == "one"
        assert llm.complete(HELLO, Greeting, purpose="test").text == "two"
        assert formats(server) == [(refused_with, "json_schema"), (200, settles_on),
                                   (200, settles_on)]
        assert llm.structured_output == settles_on
        [refusal] = llm.refusals
        assert refusal.startswith(f"json_schema: HTTP {refused_with}")
        llm.close()


def test_a_server_without_any_json_mode_ends_on_the_schema_in_the_prompt() -> None:
    with ScriptedLLMServer({"text": "plain"}, profile="no-json-mode") as server:
        llm = make_llm(server, retries=3)
        assert llm.complete(HELLO, Greeting, purpose="test").text == "plain"
        assert formats(server) == [(400, "json_schema"), (400, "json_object"), (200, None)]
        assert llm.structured_output == "none"
        assert "JSON schema" in server.chat_requests[-1].body["messages"][0]["content"]
        llm.close()


def test_lm_studio_takes_json_schema_but_refuses_json_mode() -> None:
    with ScriptedLLMServer({"text": "hi"}, {"text": "never"}, profile="lm-studio") as server:
        auto = make_llm(server, retries=3)
        assert auto.complete(HELLO, Greeting, purpose="test").text == "hi"
        forced = make_llm(server, retries=3, json_mode="json_object")
        with pytest.raises(ProviderError, match="refuses response_format json_object"):
            forced.complete(HELLO, Greeting, purpose="test")
        assert formats(server) == [(200, "json_schema"), (400, "json_object")]
        assert server.remaining == 1  # the refusal was not retried
        auto.close()
        forced.close()


def test_a_forced_mode_the_server_refuses_fails_at_once_and_says_what_to_do() -> None:
    with ScriptedLLMServer({"text": "never"}, profile="llama-cpp-python") as server:
        llm = make_llm(server, retries=3, json_mode="json_schema")
        with pytest.raises(ProviderError, match="json_mode='auto'"):
            llm.complete(HELLO, Greeting, purpose="test")
        assert formats(server) == [(500, "json_schema")]
        assert llm.structured_output == "json_schema"
        llm.close()


def test_a_server_that_ignores_the_format_and_fences_its_json_is_read() -> None:
    with ScriptedLLMServer({"text": "fenced"}, profile="ignores-format") as server:
        llm = make_llm(server)
        assert llm.complete(HELLO, Greeting, purpose="test").text == "fenced"
        content = server.chat_requests[0]
        assert content.status == 200 and llm.structured_output == "json_schema"
        llm.close()


def test_an_ordinary_500_is_still_retried_and_a_validation_500_is_not(
        server: ScriptedLLMServer) -> None:
    server.reply(500, {"text": "after a retry"})
    llm = make_llm(server, retries=2)
    assert llm.complete(HELLO, Greeting, purpose="test").text == "after a retry"
    assert [r.status for r in server.chat_requests] == [500, 200]
    server.reply(Reply(status=500, error={"error": {"message": "1 validation error: "
                                                     "temperature: Input should be ≤ 2"}}),
                 {"text": "never asked"})
    with pytest.raises(ProviderError, match="refused the request with HTTP 500"):
        llm.complete(HELLO, Greeting, purpose="test")
    assert len(server.chat_requests) == 3 and server.remaining == 1
    llm.close()


def test_concurrent_callers_settle_the_mode_once() -> None:
    import threading

    with ScriptedLLMServer(default={"text": "ok"}, profile="llama-cpp-python") as refusing:
        llm = make_llm(refusing, max_concurrency=4, timeout=5)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                llm.complete(HELLO, Greeting, purpose="test")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=call) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert errors == [] and llm.structured_output == "json_object"
        statuses = formats(refusing)
        assert statuses.count((200, "json_object")) == 4
        assert all(s == (500, "json_schema") for s in statuses if s[0] != 200)
        llm.close()


@pytest.mark.parametrize(("status", "body", "refused"), [
    (500, json.dumps(SERVER_PROFILES["llama-cpp-python"].refuses["json_schema"][1]), True),
    (400, "{\"error\":\"'response_format.type' must be 'json_schema' or 'text'\"}", True),
    (400, '[{"error": {"message": "Unknown name \\"x\\" at \'response_schema\'"}}]', True),
    (500, '{"error": {"message": "CUDA out of memory"}}', False),
    (400, '{"error": {"message": "unsupported model foo"}}', False),
    (200, '{"response_format": "json_schema"}', False),
])
def test_a_refusal_is_recognised_by_what_the_body_says(status: int, body: str,
                                                       refused: bool) -> None:
    assert refuses_format(status, body) is refused


def test_invalid_requests_are_told_apart_from_transient_errors() -> None:
    assert invalid_request(500, "1 validation error: Input should be 'text'")
    assert not invalid_request(500, "internal server error")
    assert not invalid_request(503, "model loading")


def test_the_served_model_is_reported(server: ScriptedLLMServer) -> None:
    server.reply(Reply({"text": "hi"}, model="qwen2.5-0.5b-instruct-q4_k_m.gguf"))
    llm = make_llm(server)
    llm.complete(HELLO, Greeting, purpose="test")
    assert llm.served_model == "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    llm.close()


def test_asking_again_says_what_was_wrong(server: ScriptedLLMServer) -> None:
    server.reply('{"text": 1, "text": 2}', {"text": "better"})
    llm = make_llm(server, validation_retries=1)
    assert llm.complete(HELLO, Greeting, purpose="test").text == "better"
    first, second = server.chat_requests
    assert first.body["messages"] == HELLO
    assert second.body["messages"][:2] == HELLO
    assert second.body["messages"][2] == {"role": "assistant",
                                          "content": '{"text": 1, "text": 2}'}
    assert "given two different values" in second.body["messages"][3]["content"]
    llm.close()


# reading answers ----------------------------------------------------------------------
ADD = {"op": "ADD", "content": "Is allergic to penicillin"}


@pytest.mark.parametrize("answer", [
    json.dumps({"operations": [ADD]}),
    "```json\n" + json.dumps({"operations": [ADD]}) + "\n```",
    "Here is what I found:\n```\n" + json.dumps({"operations": [ADD]}) + "\n```\nDone!",
    "Sure {as asked}: " + json.dumps({"operations": [ADD]}) + " I hope that helps.",
    json.dumps({"operations": [ADD]}) + "\n\n" + json.dumps({"operations": [ADD]}),
    "\ufeff" + json.dumps([ADD]),
    '{"operations": [' + json.dumps(ADD) + '], "operations": []}',
    '{"operations": [], "operations": [' + json.dumps(ADD) + ']}',
    # a reasoning model's thinking, left in the content, quoting JSON it decided against
    '<think>I could output {"op": "NOOP"} here, but she said it.</think>\n'
    + json.dumps({"operations": [ADD]}),
    "<think>\n{\"operations\": []}\n</think>\n\n```json\n" + json.dumps({"operations": [ADD]})
    + "\n```",
])
def test_answers_are_read_where_nothing_can_be_misread(answer: str) -> None:
    result = ExtractionResult.model_validate(read_json(answer))
    assert [op.content for op in result.operations] == ["Is allergic to penicillin"]


def test_a_repeated_key_keeps_both_lists_in_order() -> None:
    text = ('{"operations": [{"op": "ADD", "content": "a"}], '
            '"operations": [{"op": "ADD", "content": "b"}]}')
    assert [op["content"] for op in read_json(text)["operations"]] == ["a", "b"]
    assert read_json('{"op": "ADD", "op": "ADD"}') == {"op": "ADD"}


@pytest.mark.parametrize(("answer", "error"), [
    ('{"op": "UPDATE", "content": "Lives in Porto", "content": "Lives in Lisbon"}',
     UnclearAnswer),
    ('{"operations": [' + json.dumps(ADD) + ']} or maybe {"operations": []}', UnclearAnswer),
    ("```json\n{\"relation\": \"reinforce\"}\n```\n```json\n{\"relation\": \"contradict\"}\n```",
     UnclearAnswer),
    ('{"operations": [{"op": "ADD", "content": "cut sho', ValueError),
    ("I could not find anything worth remembering.", ValueError),
    ('<think>I will answer {"operations": []', ValueError),   # cut off while thinking
    ("", ValueError),
])
def test_answers_that_could_be_misread_are_refused_loudly(answer: str,
                                                          error: type[Exception]) -> None:
    with pytest.raises(error):
        read_json(answer)


def test_a_repeated_key_never_silently_loses_operations_through_the_client(
        server: ScriptedLLMServer) -> None:
    server.reply('{"operations": [' + json.dumps(ADD) + '], "operations": []}')
    llm = make_llm(server)
    result = llm.complete(HELLO, ExtractionResult, purpose="test")
    assert [op.content for op in result.operations] == ["Is allergic to penicillin"]
    llm.close()


def test_every_profile_is_named_and_its_refusals_are_recognised() -> None:
    for name, profile in SERVER_PROFILES.items():
        assert profile.name == name
        for status, body in profile.refuses.values():
            assert refuses_format(status, json.dumps(body)), name
