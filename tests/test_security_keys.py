"""API keys under attack: a revoked key opens no route at all (REST, the admin's, the
metrics); a malformed or huge ``Authorization`` header is refused without a 5xx and
the server keeps serving; and a key's secret never shows up in what the server writes
after its start-up banner (logs at debug level with the access log on, error bodies,
``/metrics``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ledgermem import Memory
from ledgermem.server.keys import KeyRing
from tests.server_support import Api, app_over, free_port, serve_env, start_server


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def every_route(api: Api) -> list[tuple[str, str]]:
    """Each (method, path) of the OpenAPI document, ids filled with made-up ones."""
    paths = api.app.openapi()["paths"]
    filled = {"{item_id}": "0190a0b0-0000-7000-8000-000000000000",
              "{proposal_id}": "0190a0b0-0000-7000-8000-000000000001",
              "{key_id}": "0123456789abcdef", "{user_id}": "alice", "{agent_id}": "miller"}
    routes = []
    for path, operations in paths.items():
        for name, value in filled.items():
            path = path.replace(name, value)
        routes += [(method.upper(), path) for method in operations]
    return routes


def test_a_revoked_key_opens_no_route(api: Api) -> None:
    admin = api.keys.verify(api.admin)
    alice = api.keys.verify(api.alice)
    assert admin is not None and alice is not None
    api.keys.revoke(alice.key_id)
    api.keys.revoke(admin.key_id)
    opened = []
    for method, path in every_route(api):
        if path == "/healthz":
            continue
        for key, user in ((api.alice, None), (api.admin, "alice"), (api.admin, None)):
            response = api.call(method, path, key, user=user,
                                params={"query": "x"} if "salient" in path else None)
            if response.status_code != 401 or response.json()["error"]["code"] != \
                    "unauthorized":
                opened.append(f"{method} {path}: {response.status_code}")
    assert opened == []


@pytest.mark.parametrize("authorization", [
    "Bearer", "Bearer  ", "bearer", "Basic YWxpY2U6c2VjcmV0", "Bearer lm_", "Bearer lm__",
    "Bearer lm_0123456789abcdef_", "Bearer lm_0123456789ABCDEF_" + "A" * 43,
    "Bearer lm_0123456789abcdef_" + "A" * 43 + "\t", "Bearer " + "lm_" * 200,
    "Bearer " + "x" * 100_000, "Bearer é€", "Negotiate abc", "Bearer a b c",
])
def test_a_malformed_authorization_header_answers_401(api: Api, authorization: str) -> None:
    response = api.client.get("/v1/me", headers={b"Authorization": authorization.encode()})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.json()["error"]["message"] in (   # nothing of the header echoed
        "this API key is unknown or revoked",
        "send an API key: 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")


def test_key_secrets_never_reach_the_logs_the_metrics_or_an_error(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with Memory.open(db, embedder=None) as memory:
        ring = KeyRing(memory.store)
        alice, _ = ring.create("alice")
        old, old_info = ring.create("alice", label="old")
        ring.revoke(old_info.key_id)
    served = start_server(["serve", "--db", str(db), "--port", str(free_port()),
                           "--access-log", "--log-level", "debug"],
                          serve_env(tmp_path / "data"))
    admin = served.admin_key
    assert admin is not None
    secrets = {key.rsplit("_", 1)[1] for key in (alice, old, admin, served.user_key)}
    bodies = []
    try:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            for key in (alice, old, admin, alice + "x", alice[:-1]):
                for headers in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": key}):
                    for method, path in (("GET", "/v1/me"), ("GET", "/v1/stats"),
                                         ("POST", "/v1/memories"), ("GET", "/v1/nope"),
                                         ("GET", "/v1/admin/users")):
                        bodies.append(client.request(method, path, headers=headers,
                                                     json={"content": ""}).text)
            bodies.append(client.get("/v1/me", headers={
                "Authorization": f"Bearer {alice}", "X-Ledgermem-User": "bob"}).text)
            bodies.append(client.get("/metrics", headers={
                "Authorization": f"Bearer {admin}"}).text)
            bodies.append(client.get("/v1/keys", headers={
                "Authorization": f"Bearer {alice}"}).text)
            listed = client.get("/v1/memories", params={"entity": "person:oncologist"},
                                headers={"Authorization": f"Bearer {alice}"})
            assert listed.status_code == 200, listed.text
    finally:
        code, log = served.stop()
    assert code == 0
    assert "GET /v1/me" in log   # the access log was on
    # Query strings can hold what memory holds: the log keeps the path alone.
    assert "GET /v1/memories?... HTTP/1.1" in log and "oncologist" not in log
    for secret in secrets:
        assert secret not in log
        assert not any(secret in body for body in bodies)


def test_a_huge_authorization_header_leaves_the_server_serving(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    Memory.open(db, embedder=None).close()
    served = start_server(["serve", "--db", str(db), "--port", str(free_port())],
                          serve_env(tmp_path / "data"))
    try:
        for size in (10_000, 1_000_000, 8_000_000):
            try:
                answer = httpx.get(f"{served.url}/v1/me", timeout=30,
                                   headers={"Authorization": "Bearer " + "a" * size})
                assert 400 <= answer.status_code < 500
            except httpx.TransportError:
                pass   # the server may close a connection whose headers are too large
        assert httpx.get(f"{served.url}/healthz", timeout=30).status_code == 200
    finally:
        code, _ = served.stop()
    assert code == 0
