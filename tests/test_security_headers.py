"""The headers the REST server answers with, as a browser reads them: API answers hold
memory, so no cache keeps them and nothing in them runs; the dashboard runs only its
own scripts and no other site may frame it; no answer is sniffed into another type.
Checked in process on every kind of answer (errors and 413s included) and over a real
``ledgermem serve`` on loopback."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ledgermem import Memory
from ledgermem.server.app import DASHBOARD_DIR, ServerSettings
from ledgermem.server.headers import DOCS_POLICY
from ledgermem.server.keys import KeyRing
from tests.server_support import Api, Response, app_over, free_port, serve_env, start_server

FRAME_DENIED = "frame-ancestors 'none'"


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem, ServerSettings(rate_limit=None, max_body_bytes=1000)) as served:
        yield served


def meta_policy() -> str:
    """The Content-Security-Policy of the dashboard's ``index.html``."""
    html = (DASHBOARD_DIR / "index.html").read_text(encoding="utf-8")
    found = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def assert_never_framed_or_sniffed(response: Response) -> None:
    headers = response.headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"
    assert FRAME_DENIED in headers["content-security-policy"]


def assert_private_data(response: Response) -> None:
    """An answer that may hold memory: not stored, and nothing in it runs."""
    assert_never_framed_or_sniffed(response)
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["content-security-policy"].startswith("default-src 'none'")


def test_api_answers_holding_memory_are_never_cached_and_run_nothing(api: Api) -> None:
    item = api.ok("POST", "/v1/memories", api.alice, 201, json={"content": "Pin is 4711"})
    answers = [
        api.call("GET", "/v1/memories", api.alice),
        api.call("GET", f"/v1/memories/{item['id']}", api.alice),
        api.call("POST", "/v1/memories/search", api.alice, json={"query": "pin"}),
        api.call("GET", "/v1/export", api.alice),
        api.call("GET", "/metrics", api.admin),
        # errors too: every status the API answers
        api.call("GET", "/v1/memories", None),                              # 401
        api.call("GET", f"/v1/memories/{item['id']}", api.bob),              # 404
        api.call("GET", "/v1/admin/users", api.alice),                       # 403
        api.call("POST", "/v1/memories", api.alice, json={"content": ""}),   # 422
        api.call("POST", "/v1/memories", api.alice, content=b"x" * 2000,     # 413
                 headers={"content-type": "application/json"}),
        api.call("GET", "/v1/no-such-route", api.alice),                     # 404
        api.call("HEAD", "/v1/me", api.alice),                               # 405
    ]
    assert [answer.status_code for answer in answers] == [
        200, 200, 200, 200, 200, 401, 404, 403, 422, 413, 404, 405]
    for answer in answers:
        assert_private_data(answer)


def test_the_dashboard_runs_only_its_own_scripts_and_is_never_framed(api: Api) -> None:
    page = api.call("GET", "/", None)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert_never_framed_or_sniffed(page)
    # The header says what the page's own <meta> says, and what a <meta> cannot: framing.
    assert page.headers["content-security-policy"] == f"{meta_policy()}; {FRAME_DENIED}"
    for asset in ("/app.js", "/style.css", "/no-such-file.js"):
        answer = api.call("GET", asset, None)
        assert_never_framed_or_sniffed(answer)
        assert "script-src 'self'" in answer.headers["content-security-policy"]


def test_the_api_documentation_keeps_working_from_this_server_alone(api: Api) -> None:
    """Swagger UI comes from the server itself (no CDN: the page works offline and tells
    no third party it was opened); the page runs one inline script."""
    for path in ("/docs",):
        page = api.call("GET", path, None)
        assert page.status_code == 200
        assert_never_framed_or_sniffed(page)
        assert page.headers["content-security-policy"] == DOCS_POLICY
        assert "script-src 'self' 'unsafe-inline';" in DOCS_POLICY
        loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert loaded and all(url.startswith("/docs/assets/") for url in loaded), loaded
        for url in loaded:
            asset = api.call("GET", url, None)
            assert asset.status_code == 200 and len(asset.content) > 1_000, url
            assert_never_framed_or_sniffed(asset)
    schema = api.call("GET", "/openapi.json", None)
    assert_never_framed_or_sniffed(schema)
    assert schema.headers["content-security-policy"].startswith("default-src 'none'")


def test_a_real_server_sends_the_headers(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("alice").remember("Alice's bank PIN hint: first dog")
        alice, _ = KeyRing(memory.store).create("alice")
    served = start_server(["serve", "--db", str(db), "--port", str(free_port())],
                          serve_env(tmp_path / "data"))
    try:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            listed = client.get("/v1/memories", headers={"Authorization": f"Bearer {alice}"})
            assert "first dog" in listed.text
            assert_private_data(listed)
            assert_never_framed_or_sniffed(client.get("/"))
    finally:
        code, _ = served.stop()
    assert code == 0
