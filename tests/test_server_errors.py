"""What a client that sends something wrong gets: a 4xx in one JSON shape, never a
traceback or a 500, and nothing stored. Keys (401), rights (403), validation (422),
routes and methods (404, 405), bodies (400, 413), rate limits (429 with Retry-After),
the library's errors (404, 422, 502, 503), and the last-resort 500 that is logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledgermem import Memory, OpenAICompatibleLLM
from ledgermem.aio import AsyncMemory
from ledgermem.server.app import ServerSettings, create_app
from ledgermem.server.errors import STATUS
from ledgermem.server.keys import KeyRing
from ledgermem.server.ratelimit import FAILED_KEYS, RateLimit, RateLimiter
from ledgermem.testing import ScriptedLLMServer
from tests.server_support import Api, Response, app_over
from tests.support import FakeClock, snapshot


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def error_of(response: Response, status: int) -> dict[str, Any]:
    """The error body of a response that must have ``status``, checked for its shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in response.text
    error: dict[str, Any] = body["error"]
    return error


# keys -------------------------------------------------------------------------------
def test_no_key_an_unknown_key_and_a_revoked_key_answer_401(api: Api) -> None:
    for key in (None, "lm_0123456789abcdef_" + "x" * 43, "garbage"):
        response = api.call("GET", "/v1/stats", key)
        assert error_of(response, 401)["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    found = api.keys.verify(api.bob)
    assert found is not None
    api.keys.revoke(found.key_id)
    assert error_of(api.call("GET", "/v1/stats", api.bob), 401)["code"] == "unauthorized"


def test_the_key_may_come_in_x_api_key(api: Api) -> None:
    response = api.client.get("/v1/me", headers={"X-API-Key": api.alice})
    assert response.status_code == 200 and response.json()["user"] == "alice"
    wrong = api.client.get("/v1/me", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert error_of(wrong, 401)["code"] == "unauthorized"


def test_the_admin_key_needs_a_user_and_user_keys_no_admin_route(api: Api) -> None:
    assert error_of(api.call("GET", "/v1/stats", api.admin), 422)["code"] == "invalid_input"
    assert error_of(api.call("GET", "/v1/admin/users", api.alice), 403)["code"] == "forbidden"
    assert error_of(api.call("GET", "/v1/stats", api.alice, user="bob"), 403)


# validation -----------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "where"), [
    ({}, ["body", "content"]),
    ({"content": 42}, ["body", "content"]),
    ({"content": "x", "category": "gossip"}, ["body", "category"]),
    ({"content": "x", "confidence": 2}, ["body", "confidence"]),
    ({"content": "x", "unknown": True}, ["body", "unknown"]),
])
def test_a_malformed_body_answers_422_with_the_field(api: Api, body: dict[str, Any],
                                                     where: list[str]) -> None:
    error = error_of(api.call("POST", "/v1/memories", api.alice, json=body), 422)
    assert error["code"] == "validation_error"
    assert error["details"][0]["loc"] == where
    assert error["message"].startswith(".".join(where))


@pytest.mark.parametrize(("raw", "code"), [
    (b'{"content": "a\\u0000b"}', "invalid_input"),  # NUL: no store keeps it
    (b'{"content": "a\\ud800b"}', "validation_error"),  # a lone surrogate
    (b'{"content": "ok", "metadata": {"x": Infinity}}', "invalid_input"),
    (b'{"content": "ok", "due_at": "the day after never"}', "invalid_input"),
    (b'{"content": "ok", "entity": "no colon"}', "invalid_input"),
    (b"not json", "validation_error"),
])
def test_bad_values_answer_422_and_store_nothing(api: Api, mem: Memory, raw: bytes,
                                                 code: str) -> None:
    before = snapshot(mem)
    response = api.call("POST", "/v1/memories", api.alice, content=raw,
                        headers={"content-type": "application/json"})
    assert error_of(response, 422)["code"] == code
    assert snapshot(mem) == before


def test_bodies_too_deep_or_too_large(mem: Memory) -> None:
    settings = ServerSettings(rate_limit=None, max_body_bytes=10_000)
    with app_over(mem, settings) as api:
        deep = b'{"content": "x", "metadata": ' + b'{"a":' * 1500 + b"1" + b"}" * 1501
        assert len(deep) < 10_000  # too deep for the JSON parser, not too large
        response = api.call("POST", "/v1/memories", api.alice, content=deep,
                            headers={"content-type": "application/json"})
        assert error_of(response, 400)["code"] == "bad_request"
        big = {"content": "x" * 20_000}
        assert error_of(api.call("POST", "/v1/memories", api.alice, json=big),
                        413)["code"] == "too_large"

        def chunks() -> Iterator[bytes]:
            yield from (b" " * 4000 for _ in range(4))

        chunked = api.call("POST", "/v1/memories", api.alice, content=chunks(),
                           headers={"content-type": "application/json"})
        assert error_of(chunked, 413)["code"] == "too_large"


def test_out_of_range_parameters_answer_422(api: Api) -> None:
    for params in ({"limit": 10**30}, {"limit": 0}, {"offset": -1}, {"sort": "content"},
                   {"order": "sideways"}, {"sensitive": "maybe"}):
        assert error_of(api.call("GET", "/v1/memories", api.alice, params=params),
                        422)["code"] == "validation_error"
    assert error_of(api.call("GET", "/v1/memories/abc", api.alice,
                             params={"as_of": "gibberish zz"}), 422)["code"] == "invalid_input"


def test_unknown_routes_and_methods_answer_in_the_same_shape(api: Api) -> None:
    assert error_of(api.call("GET", "/v1/nothing-here", api.alice), 404)["code"] == "not_found"
    assert error_of(api.call("PUT", "/v1/memories", api.alice),
                    405)["code"] == "method_not_allowed"
    assert error_of(api.call("GET", "/v1/memories/no-such-id", api.alice),
                    404)["code"] == "not_found"


@pytest.mark.parametrize(("method", "path", "takes"), [
    ("GET", "/v1/turns/search", {"POST"}),
    ("GET", "/v1/maintenance/run", {"POST"}),
    ("GET", "/v1/admin/maintenance", {"POST"}),
    ("HEAD", "/v1/me", {"GET"}),
    ("HEAD", "/v1/memories", {"GET", "POST", "DELETE"}),
    ("POST", "/healthz", {"GET"}),
    ("HEAD", "/healthz", {"GET"}),
])
def test_a_route_without_the_method_answers_405_beside_the_dashboard(
        api: Api, method: str, path: str, takes: set[str]) -> None:
    """The dashboard is served at ``/`` (``app_over`` keeps the installed one), yet it
    never takes a request a route's path names: GET and HEAD included, the router
    answers 405 with ``Allow``."""
    response = api.call(method, path, api.alice)
    assert response.status_code == 405, response.text
    assert response.headers["content-type"] == "application/json"
    allowed = set(response.headers["allow"].split(", "))
    assert allowed and allowed <= takes  # of several routes, Starlette names the first's
    if method != "HEAD":  # a HEAD answer has no body
        assert error_of(response, 405)["code"] == "method_not_allowed"


def test_the_dashboard_keeps_its_files_and_the_api_its_404s(api: Api) -> None:
    for path in ("/", "/index.html", "/app.js", "/style.css"):
        assert api.call("GET", path, None).status_code == 200, path
    assert "text/html" in api.call("GET", "/", None).headers["content-type"]
    assert api.call("HEAD", "/", None).status_code == 200
    for method, path in (("GET", "/v1/nothing-here"), ("HEAD", "/v1/nothing-here"),
                         ("POST", "/v1/nothing-here"), ("GET", "/v1"),
                         ("GET", "/no-such-file.js")):
        response = api.call(method, path, api.alice)
        assert response.status_code == 404, (method, path)
        assert response.headers["content-type"] == "application/json"
        if method != "HEAD":
            assert error_of(response, 404)["code"] == "not_found"


# rate limits --------------------------------------------------------------------------
def test_a_key_over_its_rate_gets_429_with_retry_after(mem: Memory) -> None:
    settings = ServerSettings(rate_limit=RateLimit(rate=0.01, burst=3))
    with app_over(mem, settings) as api:
        codes = [api.call("GET", "/v1/me", api.alice).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        limited = api.call("GET", "/v1/me", api.alice)
        assert error_of(limited, 429)["code"] == "rate_limited"
        assert 1 <= int(limited.headers["retry-after"]) <= 100
        assert api.call("GET", "/v1/me", api.bob).status_code == 200  # a bucket per key
        assert api.call("GET", "/healthz", None).status_code == 200


def test_unknown_keys_from_one_address_are_limited_and_a_valid_key_is_not(
        mem: Memory) -> None:
    """Guessing keys, an operator's chosen admin key among them, stays slow: past
    ``FAILED_KEYS``' burst an address's unknown keys get 429s; its valid keys, and
    requests with no key at all, are answered as ever."""
    with app_over(mem, ServerSettings(rate_limit=RateLimit())) as api:
        guesses = [api.call("GET", "/v1/me", f"lm_{n:016x}_{'A' * 43}").status_code
                   for n in range(FAILED_KEYS.burst + 2)]
        assert guesses == [401] * FAILED_KEYS.burst + [429, 429]
        limited = api.call("GET", "/v1/me", "lm_0123456789abcdef_" + "B" * 43)
        assert error_of(limited, 429)["message"].startswith(
            "too many requests with unknown keys from this address")
        assert 1 <= int(limited.headers["retry-after"]) <= 2
        assert api.call("GET", "/v1/me", api.alice).status_code == 200
        assert api.call("GET", "/v1/me", None).status_code == 401


def test_without_rate_limits_unknown_keys_are_not_limited_either(mem: Memory) -> None:
    with app_over(mem, ServerSettings(rate_limit=None)) as api:   # --no-rate-limit
        assert {api.call("GET", "/v1/me", f"lm_{n:016x}_{'A' * 43}").status_code
                for n in range(FAILED_KEYS.burst + 2)} == {401}


def test_the_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(RateLimit(rate=2.0, burst=2), clock=lambda: now[0], max_keys=2)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.5]
    now[0] = 0.5  # one token back
    assert limiter.take("a") == 0.0 and limiter.take("a") == pytest.approx(0.5)
    limiter.take("b")
    limiter.take("c")  # past max_keys: the least recently used bucket ("a") goes
    assert limiter.take("a") == 0.0  # and comes back full
    with pytest.raises(ValueError):
        RateLimit(rate=0)
    with pytest.raises(ValueError):
        RateLimit(burst=0)


# the library's errors and the last resort ----------------------------------------------------
def test_every_library_error_has_a_status() -> None:
    import ledgermem.errors as errors

    kinds = {getattr(errors, name) for name in errors.__all__}
    mapped = {kind for kind, _, _ in STATUS}
    assert kinds - mapped <= {errors.SchemaMismatch, errors.StoreClosed}  # StorageErrors: 503
    assert all(issubclass(kind, errors.StorageError) for kind in kinds - mapped)
    assert all(status < 500 for kind, status, _ in STATUS
               if kind in (errors.NotFound, errors.InvalidInput, errors.AccessDenied))


def test_a_failing_llm_answers_502(db_url: str, clock: FakeClock,
                                   server: ScriptedLLMServer) -> None:
    llm = OpenAICompatibleLLM("scripted", server.url, timeout=2, retries=0,
                              validation_retries=0)
    with Memory.open(db_url, clock=clock, embedder=None, llm=llm) as memory, \
            app_over(memory) as api:
        for n in range(10):  # the miller is due a reflection
            api.ok("POST", "/v1/events", api.alice, 201, json={
                "kind": "agent.spoke", "agent_id": "miller", "payload": {"text": str(n)}})
        server.reply(500)
        error = error_of(api.call("POST", "/v1/agents/miller/reflect", api.alice), 502)
        assert error["code"] == "provider_error" and "reflection failed" in error["message"]
        assert api.ok("GET", "/v1/agents/miller/beliefs", api.alice) == []
    llm.close()


def test_a_closed_database_answers_503(api: Api, mem: Memory) -> None:
    mem.store.close()
    error = error_of(api.call("GET", "/v1/stats", api.alice), 503)
    assert error["code"] == "storage_unavailable"
    assert "closed" not in error["message"]  # the driver's words stay in the log
    assert error_of(api.call("GET", "/healthz", None), 503)


def test_an_unexpected_failure_is_logged_and_answers_500(
        mem: Memory, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    app = create_app(AsyncMemory.from_sync(mem), KeyRing(mem.store),
                     settings=ServerSettings(dashboard_dir=tmp_path))  # no catch-all mount

    @app.get("/broken")
    async def broken() -> None:
        raise RuntimeError("a bug, not the client's fault")

    with caplog.at_level(logging.ERROR, logger="ledgermem.server"), TestClient(app) as client:
        response = client.get("/broken")
    error = error_of(response, 500)
    assert error["code"] == "internal_error" and "bug" not in error["message"]
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)
