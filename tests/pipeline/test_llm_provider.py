"""OpenAICompatibleLLM against the scripted server: structured output and its fallback,
validation, retries, timeouts, the concurrency limit and call accounting."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import BaseModel

from ledgermem import LLM, LLMCall, OpenAICompatibleLLM, ProviderError
from ledgermem.providers.llm import recording
from ledgermem.testing import Reply, ScriptedLLMServer
from tests.pipeline.conftest import make_llm

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


class Greeting(BaseModel):
    text: str
    mood: str = "neutral"


def test_the_client_is_an_llm(llm: OpenAICompatibleLLM) -> None:
    assert isinstance(llm, LLM)


def test_json_schema_is_asked_for_and_the_answer_validated(server: ScriptedLLMServer,
                                                           llm: OpenAICompatibleLLM) -> None:
    server.reply({"text": "hi", "mood": "glad"})
    assert llm.complete(HELLO, Greeting, purpose="test") == Greeting(text="hi", mood="glad")
    [request] = server.chat_requests
    assert request.body["model"] == "scripted-model"
    assert request.body["messages"] == HELLO
    fmt = request.body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Greeting"
    assert fmt["json_schema"]["schema"] == Greeting.model_json_schema()
    assert fmt["json_schema"]["strict"] is False
    assert llm.structured_output == "json_schema"


def test_falls_back_to_json_mode_when_the_server_has_no_json_schema() -> None:
    with ScriptedLLMServer({"text": "one"}, {"text": "two"}, json_schema=False) as server:
        llm = make_llm(server)
        assert llm.complete(HELLO, Greeting, purpose="test").text == "one"
        assert llm.structured_output == "json_object"
        assert llm.complete(HELLO, Greeting, purpose="test").text == "two"
        statuses = [(r.status, r.body["response_format"]["type"]) for r in server.chat_requests]
        # refused once, then JSON mode for this call and every later one
        assert statuses == [(400, "json_schema"), (200, "json_object"), (200, "json_object")]
        system = server.chat_requests[1].body["messages"][0]
        assert system["role"] == "system"
        assert "Be brief." in system["content"] and "JSON" in system["content"]
        assert '"text"' in system["content"]  # the schema is spelled out for the model


def test_forced_json_mode_never_sends_a_schema_format(server: ScriptedLLMServer) -> None:
    server.reply({"text": "hi"})
    llm = make_llm(server, json_mode="json_object")
    llm.complete(HELLO, Greeting, purpose="test")
    assert server.chat_requests[0].body["response_format"] == {"type": "json_object"}


def test_invalid_json_is_a_provider_error_not_an_endless_retry(server: ScriptedLLMServer,
                                                                llm: OpenAICompatibleLLM) -> None:
    server.reply("{not json", {"text": "never asked"})
    with pytest.raises(ProviderError, match="no valid Greeting"):
        llm.complete(HELLO, Greeting, purpose="test")
    assert len(server.chat_requests) == 1
    assert server.remaining == 1


def test_one_more_answer_is_asked_for_after_invalid_json(server: ScriptedLLMServer) -> None:
    server.reply({"wrong": "shape"}, "```json\n{\"text\": \"fenced\"}\n```")
    llm = make_llm(server, validation_retries=1)
    assert llm.complete(HELLO, Greeting, purpose="test").text == "fenced"
    assert len(server.chat_requests) == 2


def test_http_errors_and_rate_limits_are_retried_with_backoff(server: ScriptedLLMServer
                                                              ) -> None:
    server.reply(500, 429, {"text": "third time"})
    llm = make_llm(server, retries=2)
    assert llm.complete(HELLO, Greeting, purpose="test").text == "third time"
    assert [r.status for r in server.chat_requests] == [500, 429, 200]


def test_http_500_after_the_retries_is_a_provider_error(server: ScriptedLLMServer,
                                                        llm: OpenAICompatibleLLM) -> None:
    server.reply(500, 500)
    with pytest.raises(ProviderError, match="HTTP 500"):
        llm.complete(HELLO, Greeting, purpose="test")


def test_a_timeout_is_retried_then_reported(server: ScriptedLLMServer,
                                            llm: OpenAICompatibleLLM) -> None:
    server.reply(2.0, {"text": "on time"}, 2.0, 2.0)
    assert llm.complete(HELLO, Greeting, purpose="test").text == "on time"
    started = time.monotonic()
    with pytest.raises(ProviderError, match="Timeout"):
        llm.complete(HELLO, Greeting, purpose="test")
    assert time.monotonic() - started < 1.8  # two 0.5 s timeouts, not the 2 s delays


def test_a_client_error_is_not_retried(server: ScriptedLLMServer,
                                       llm: OpenAICompatibleLLM) -> None:
    server.reply(401, {"text": "never"})
    with pytest.raises(ProviderError, match="HTTP 401"):
        llm.complete(HELLO, Greeting, purpose="test")
    assert len(server.chat_requests) == 1


def test_the_api_key_is_sent_as_a_bearer_token(server: ScriptedLLMServer) -> None:
    server.reply({"text": "hi"})
    make_llm(server, api_key="sk-test").complete(HELLO, Greeting, purpose="test")
    assert server.chat_requests[0].headers["Authorization"] == "Bearer sk-test"


def test_no_more_requests_in_flight_than_the_concurrency_limit(server: ScriptedLLMServer
                                                               ) -> None:
    server.reply(*[Reply({"text": f"n{n}"}, delay=0.15) for n in range(6)])
    llm = make_llm(server, max_concurrency=2, timeout=5)
    answers: list[str] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            answers.append(llm.complete(HELLO, Greeting, purpose="test").text)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors
    assert sorted(answers) == [f"n{n}" for n in range(6)]
    assert server.max_in_flight == 2
    assert time.monotonic() - started >= 3 * 0.15  # three waves of two


def test_every_call_is_reported_with_tokens_latency_and_outcome(server: ScriptedLLMServer,
                                                                llm: OpenAICompatibleLLM
                                                                ) -> None:
    server.reply(Reply({"text": "hi"}, usage={"prompt_tokens": 11, "completion_tokens": 7}),
                 500, 500)
    calls: list[LLMCall] = []
    with recording(calls.append):
        llm.complete(HELLO, Greeting, purpose="greeting")
        with pytest.raises(ProviderError):
            llm.complete(HELLO, Greeting, purpose="greeting")
    assert [(c.purpose, c.model, c.tokens_in, c.tokens_out, c.outcome) for c in calls] == [
        ("greeting", "scripted-model", 11, 7, "ok"),
        ("greeting", "scripted-model", 0, 0, "error")]
    assert all(c.latency_ms > 0 for c in calls)
    assert calls[1].error is not None and "HTTP 500" in calls[1].error


def test_embeddings_endpoint_serves_vectors(server: ScriptedLLMServer) -> None:
    from ledgermem.providers.openai import OpenAIEmbedder

    embedder = OpenAIEmbedder("scripted-embed", base_url=server.url, retries=0)
    assert embedder.dimensions == 64
    vectors = embedder.embed_batch(["green tea", "green tea", "black coffee"])
    assert vectors.shape == (3, 64)
    assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0)
    server.reply_embeddings([[1.0, 0.0] + [0.0] * 62])
    assert embedder.embed_batch(["x"])[0][0] == pytest.approx(1.0)
    assert {r.path for r in server.requests} == {"/embeddings"}
