"""``ledgermem serve`` as a user runs it: a real uvicorn in a subprocess on loopback,
with its own data dir. The SQLite runs use the default embedder, as ``make run`` does;
Ctrl-C (SIGINT) stops the server with exit code 0. On PostgreSQL two server processes
share one database: a write through one is read through the other, keys made or
revoked on one hold on the other, and background extraction is claimed by one of them
only."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ledgermem.providers.embedders import default_embedder
from ledgermem.testing import ScriptedLLMServer
from tests.server_support import Served, free_port, serve_env, start_server

LONG = ("I finally moved to Lisbon last month for a new job at a design studio, and this "
        "weekend I am going to look for a flat near the river with my sister")
"""A turn long enough to be worth extracting from."""


def _stop_cleanly(served: Served) -> str:
    code, out = served.stop()
    assert code == 0, out
    assert "Traceback" not in out and "Shutting down" in out
    return out


def test_serve_on_sqlite_prints_its_keys_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    env = serve_env(tmp_path / "data")
    db = str(tmp_path / "memory.db")
    port = free_port()
    served = start_server(["--db", db, "serve", "--port", str(port)], env)
    try:
        assert f"ledgermem server: http://127.0.0.1:{port}/" in served.banner[0]
        assert served.admin_key is not None
        with served.client(served.user_key) as client:
            me = client.get("/v1/me").json()
            assert (me["user"], me["admin"]) == ("local", False)
            item = client.post("/v1/memories", json={
                "content": "Prefers green tea over coffee", "category": "preference"})
            assert item.status_code == 201
            client.post("/v1/maintenance/flush").raise_for_status()  # embedded now
            hits = client.post("/v1/memories/search", json={
                "query": "which drink does she prefer?"}).json()
            assert hits[0]["item"]["id"] == item.json()["id"]
            assert "vector_rank" in hits[0]["why"]  # the default embedder is on
            assert client.get("/v1/status").json()["embedder"] == default_embedder().model_id
            assert client.get("/", follow_redirects=True).status_code == 200
        with served.client(served.admin_key) as admin:
            assert "ledgermem_http_requests_total" in admin.get("/metrics").text
    finally:
        _stop_cleanly(served)
    # the next start: the same key for the local user, no new admin key, the data kept
    again = start_server(["--db", db, "serve", "--port", str(port)], env)
    try:
        assert again.user_key == served.user_key and again.admin_key is None
        with again.client(again.user_key) as client:
            assert client.get(f"/v1/memories/{item.json()['id']}").status_code == 200
    finally:
        _stop_cleanly(again)


def test_serve_with_two_workers_on_sqlite(tmp_path: Path) -> None:
    env = serve_env(tmp_path / "data")
    port = free_port()
    served = start_server(["--db", str(tmp_path / "m.db"), "--embedder", "none", "serve",
                           "--port", str(port), "--workers", "2"], env)
    try:
        ids = []
        for n in range(8):  # a new connection each time: uvicorn's workers share them out
            with served.client(served.user_key) as client:
                ids.append(client.post("/v1/memories", json={"content": f"fact {n}"}
                                       ).json()["id"])
        with served.client(served.user_key) as client:
            page = client.get("/v1/memories", params={"limit": 100}).json()
        assert sorted(i["id"] for i in page["items"]) == sorted(ids)
    finally:
        _stop_cleanly(served)


def _wait(check: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_two_server_processes_share_one_postgresql_database(
        pg_url: str, tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.default = {"operations": []}  # extraction finds nothing to keep
    admin = "operator-chosen-admin-key-for-both-processes"
    env = serve_env(tmp_path / "data", {
        "LEDGERMEM_ADMIN_KEY": admin, "LEDGERMEM_LLM_BASE_URL": server.url,
        "LEDGERMEM_LLM_MODEL": "scripted"})
    args = ["--db", pg_url, "--embedder", "none", "serve", "--no-rate-limit", "--port"]
    first = start_server([*args, str(free_port())], env)
    second = start_server([*args, str(free_port())], env)
    try:
        assert first.admin_key is None and second.admin_key is None  # the operator's
        assert first.user_key == second.user_key  # the key file in the data dir
        with first.client(first.user_key) as one, second.client(first.user_key) as two, \
                first.client(admin) as admin_one, second.client(admin) as admin_two:
            item = one.post("/v1/memories", json={"content": "Written through one"}).json()
            assert two.get(f"/v1/memories/{item['id']}").json()["content"] == \
                "Written through one"
            made = admin_one.post("/v1/admin/keys", json={"user": "bob"}).json()
            with second.client(made["key"]) as bob:
                assert bob.get("/v1/me").json()["user"] == "bob"
                assert bob.get(f"/v1/memories/{item['id']}").status_code == 404
                admin_two.delete(f"/v1/admin/keys/{made['info']['key_id']}")
                with first.client(made["key"]) as bob_on_one:
                    assert bob_on_one.get("/v1/me").status_code == 401  # revoked for all
            # background extraction: every batch is claimed by one process only
            batches = 6
            for n in range(batches):
                client = one if n % 2 else two
                client.post("/v1/turns", json={"infer": True, "turns": [
                    {"role": "user", "content": f"{LONG} (batch {n})"}]}).raise_for_status()

            def done() -> bool:
                return bool(one.get("/v1/status").json()["extraction"]["done"] == batches)

            _wait(done, "extraction")
        asked = [r.text for r in server.chat_requests]
        assert len(asked) == batches
        assert sorted(n for n in range(batches) for text in asked
                      if f"(batch {n})" in text) == list(range(batches))
    finally:
        _stop_cleanly(first)
        _stop_cleanly(second)


def test_a_bad_database_url_fails_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ledgermem", "--db", "mysql://nope", "serve", "--port",
         str(free_port())], env=serve_env(tmp_path), capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 1
    assert result.stderr.startswith("error: unsupported database URL")
    assert "Traceback" not in result.stderr


def test_a_port_in_use_fails_with_exit_code_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "ledgermem", "--db", str(tmp_path / "m.db"), "--embedder",
             "none", "serve", "--port", str(port)], env=serve_env(tmp_path / "data"),
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: the server could not start on http://127.0.0.1:{port}/ (uvicorn said why "
        "above)")
    assert "address already in use" in result.stderr and "Traceback" not in result.stderr
