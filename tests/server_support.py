"""Support for the server tests: the REST app in process over a test's ``Memory``,
with keys for two users and the admin, and a real ``ledgermem serve`` subprocess."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ledgermem import Memory
from ledgermem.aio import AsyncMemory
from ledgermem.server.app import ServerSettings, create_app
from ledgermem.server.keys import KeyRing
from ledgermem.server.metrics import ServerMetrics

ROOT = Path(__file__).resolve().parent.parent
Response = Any
"""What ``TestClient`` answers: an httpx-style response (Starlette's test client may
use a fork of httpx, so no one class names it)."""


@dataclass
class Api:
    """The app in process, with one key each for alice, bob and the admin."""

    client: TestClient
    app: FastAPI
    memory: AsyncMemory
    keys: KeyRing
    metrics: ServerMetrics
    alice: str
    bob: str
    admin: str

    def call(self, method: str, path: str, key: str | None, *, user: str | None = None,
             **kwargs: Any) -> Response:
        """``method path`` with ``key`` as a bearer token (and ``X-Ledgermem-User``)."""
        headers = dict(kwargs.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if user is not None:
            headers["X-Ledgermem-User"] = user
        return self.client.request(method, path, headers=headers, **kwargs)

    def ok(self, method: str, path: str, key: str, status: int = 200, **kwargs: Any) -> Any:
        """The JSON of a call that must answer ``status``."""
        response = self.call(method, path, key, **kwargs)
        assert response.status_code == status, (method, path, response.status_code,
                                                response.text)
        return response.json() if response.content else None


@contextmanager
def app_over(memory: Memory, settings: ServerSettings | None = None,
             metrics: ServerMetrics | None = None) -> Iterator[Api]:
    """The REST app over ``memory`` (no rate limit unless ``settings`` say so)."""
    amem = AsyncMemory.from_sync(memory, threads=4)
    keys = KeyRing(memory.store)
    admin = keys.ensure_admin()
    assert admin is not None
    alice, _ = keys.create("alice", label="alice's")
    bob, _ = keys.create("bob", label="bob's")
    metrics = metrics or ServerMetrics()
    app = create_app(amem, keys, settings=settings or ServerSettings(rate_limit=None),
                     metrics=metrics)
    with TestClient(app) as client:
        yield Api(client, app, amem, keys, metrics, alice, bob, admin)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    """A ``ledgermem serve`` subprocess and what it printed at start."""

    process: subprocess.Popen[str]
    url: str
    user_key: str
    admin_key: str | None
    banner: list[str]

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"},
                            timeout=30)

    def stop(self) -> tuple[int, str]:
        """SIGINT, as Ctrl-C sends; returns the exit code and what it wrote after."""
        self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=60)
        return self.process.returncode, out


def serve_env(data_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a server subprocess: its own user data dir, no config file
    from the machine, and nothing of the test's own ledgermem settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERMEM_")}
    env.update({"XDG_DATA_HOME": str(data_home), "XDG_CONFIG_HOME": str(data_home / "cfg"),
                "PYTHONUNBUFFERED": "1", **(extra or {})})
    return env


def start_server(args: list[str], env: Mapping[str, str], *, timeout: float = 90) -> Served:
    """Start ``ledgermem <args>`` (a ``serve`` command with ``--port``), wait until it
    answers ``/healthz``, and read the keys it printed."""
    port = int(args[args.index("--port") + 1])
    process = subprocess.Popen([sys.executable, "-m", "ledgermem", *args], cwd=ROOT,
                               env=dict(env), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    banner: list[str] = []
    deadline = time.monotonic() + timeout
    while not any(line.startswith("Press Ctrl-C") for line in banner):
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"the server ended before it started: {''.join(banner)}")
        banner.append(line.rstrip("\n"))
        assert time.monotonic() < deadline, banner
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None, "the server exited"
        assert time.monotonic() < deadline, "the server did not answer"
        time.sleep(0.1)
    text = "\n".join(banner)
    user_key = re.search(r"API key for user '[^']*': (\S+)", text)
    admin_key = re.search(r"admin key, shown only now .*: (\S+)", text)
    assert user_key is not None, text
    return Served(process, url, user_key.group(1),
                  admin_key.group(1) if admin_key else None, banner)


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium (``make browser`` installs it) under Playwright; the test fails
    where ``CI`` is set and it is missing, and is skipped elsewhere."""
    import pytest

    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "playwright is not installed: pip install -e '.[test]'"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
