"""Load: mixed reads and writes from many threads in several processes on one store.

    python -m bench.load                          # SQLite and PostgreSQL, 4 processes x 8 threads
    python -m bench.load --processes 2 --threads 4 --ops 100 --backend sqlite
    python -m bench.load --postgres URL

Every thread of every process runs ``ops`` calls on a handle of one of a few shared
users, half reads (hybrid ``search``, ``get``, ``all_knowledge``,
``search_conversations``, ``session_history``) and half writes (``remember``,
``add_turn``, ``revise``, ``forget``, ``log_tool_call``), with the background
embedding worker of each process writing vectors meanwhile (a hashing embedder: no
model time in the figures). Each write's text is unique, and each thread notes what
it saw acknowledged.

Afterwards: no call raised (so "database is locked" never reached a caller); every
acknowledged item, turn and tool call is in the store exactly once, and nothing else
is (nothing lost, nothing duplicated); forgotten items are gone and revised ones
superseded; ``verify`` finds no problem. The figures: calls per second over the run
(all processes together), and p50 / p95 latency of reads and of writes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import random
import sqlite3
import sys
import tempfile
import threading
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ledgermem import Memory
from ledgermem.memory import open_store
from ledgermem.store.base import TurnQuery
from ledgermem.testing import HashEmbedder
from ledgermem.types import ItemQuery

from .stores import Backend, stores_for

__all__ = ["USERS", "check_load", "load_process", "run_load"]

USERS = ("load-a", "load-b", "load-c")
READS = ("search", "get", "list", "conversations", "history")
WRITES = ("remember", "turn", "revise", "forget", "tool")
SPAWN = multiprocessing.get_context("spawn")


def _text(tag: str) -> str:
    """Words no other tag shares, so dedup never merges two writes."""
    return " ".join(f"{tag}w{i}" for i in range(5))


class _Thread:
    """One thread's calls, timings and acknowledged writes."""

    def __init__(self, memory: Memory, name: str, seed: int) -> None:
        self.memory, self.name, self.rng = memory, name, random.Random(seed)
        self.user = USERS[seed % len(USERS)]
        """The user this thread writes as (reads go to any user)."""
        self.timings: dict[str, list[float]] = {op: [] for op in (*READS, *WRITES)}
        self.errors: list[str] = []
        self.live: dict[str, str] = {}          # item id -> text
        self.superseded: dict[str, str] = {}    # old id -> new id
        self.forgotten: list[str] = []
        self.turns: dict[str, str] = {}         # turn id -> text
        self.tools: list[str] = []

    def run(self, ops: int) -> None:
        for n in range(ops):
            user = self.memory.for_user(USERS[self.rng.randrange(len(USERS))])
            own = self.memory.for_user(self.user)
            op = self.rng.choice(READS if self.rng.random() < 0.5 else WRITES)
            if op in ("get", "revise", "forget") and not self.live:
                op = "search" if op == "get" else "remember"  # nothing of its own yet
            tag = f"{self.name}n{n}"
            started = time.perf_counter()
            try:
                self._call(op, user, own, tag)
            except Exception as exc:  # every failure is a finding: counted, not raised
                self.errors.append(f"{op}: {type(exc).__name__}: {exc}")
                continue
            self.timings[op].append((time.perf_counter() - started) * 1000)

    def _call(self, op: str, user: Any, own: Any, tag: str) -> None:
        if op == "search":
            user.search(f"{tag} w1 {self.name}")
        elif op == "get":
            own.get(self.rng.choice(list(self.live)))
        elif op == "list":
            user.all_knowledge(limit=20)
        elif op == "conversations":
            user.search_conversations(f"{self.name} turn", limit=5)
        elif op == "history":
            own.session_history(f"s-{self.name}", limit=10)
        elif op == "remember":
            self.live[own.remember(_text(tag)).id] = _text(tag)
        elif op == "turn":
            self.turns[own.add_turn("user", f"turn {_text(tag)}",
                                    session_id=f"s-{self.name}").id] = f"turn {_text(tag)}"
        elif op == "revise":
            old = self.rng.choice(list(self.live))
            new = own.revise(old, _text(tag))
            del self.live[old]
            self.superseded[old] = new.id
            self.live[new.id] = _text(tag)
        elif op == "forget":
            gone = self.rng.choice(list(self.live))
            own.forget(gone)
            del self.live[gone]
            self.forgotten.append(gone)
        elif op == "tool":
            self.tools.append(own.log_tool_call("loadtool", {"tag": tag},
                                                duration_ms=1.0).id)

    def result(self) -> dict[str, Any]:
        return {"name": self.name, "user": self.user,
                "timings": self.timings, "errors": self.errors, "live": self.live,
                "superseded": self.superseded, "forgotten": self.forgotten,
                "turns": self.turns, "tools": self.tools}


def load_process(url: str, number: int, threads: int, ops: int, seed: int, out: str,
                 start: Any) -> None:
    """One process: ``threads`` threads of ``ops`` calls each, started together with
    the other processes (``start``, a barrier); writes its results to ``out``."""
    memory = Memory(open_store(url), embedder=HashEmbedder(dimensions=16))
    workers = [_Thread(memory, f"p{number}t{t}", seed * 1000 + number * 100 + t)
               for t in range(threads)]
    pool = [threading.Thread(target=w.run, args=(ops,)) for w in workers]
    start.wait(timeout=120)
    began = time.time()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    ended = time.time()
    memory.flush()
    memory.close()
    Path(out).write_text(json.dumps({"began": began, "ended": ended,
                                     "threads": [w.result() for w in workers]}))


def run_load(url: str, folder: Path, *, processes: int, threads: int, ops: int,
             seed: int = 0) -> dict[str, Any]:
    """Run the load on the store at ``url``; returns what every thread saw and the
    wall time of the run (from the common start to the last thread's end)."""
    Memory(open_store(url), embedder=HashEmbedder(dimensions=16)).close()  # migrated once
    start = SPAWN.Barrier(processes)
    outs = [folder / f"load-{seed}-{p}.json" for p in range(processes)]
    children = [SPAWN.Process(target=load_process,
                              args=(url, p, threads, ops, seed, str(outs[p]), start))
                for p in range(processes)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=1800)
    failed = [c.exitcode for c in children if c.exitcode != 0]
    if failed:
        raise RuntimeError(f"load processes exited with {failed}")
    results = [json.loads(out.read_text()) for out in outs]
    began = min(r["began"] for r in results)
    ended = max(r["ended"] for r in results)
    return {"threads": [t for r in results for t in r["threads"]],
            "seconds": ended - began}


def check_load(url: str, run: dict[str, Any]) -> dict[str, list[str]]:
    """What went wrong: ``errors`` (calls that raised), ``writes`` (acknowledged writes
    lost, duplicated or changed; writes never acknowledged but stored) and ``verify``
    (views that differ from the ledger)."""
    threads = run["threads"]
    errors = [f"{t['name']}: {e}" for t in threads for e in t["errors"]]
    problems: list[str] = []
    wanted_items = {i: text for t in threads for i, text in t["live"].items()}
    superseded = {old: new for t in threads for old, new in t["superseded"].items()}
    forgotten = {i for t in threads for i in t["forgotten"]}
    wanted_turns = {i: text for t in threads for i, text in t["turns"].items()}
    wanted_tools = {i for t in threads for i in t["tools"]}
    with closing(open_store(url, create=False)) as store:
        items = {i.id: i for user in USERS for i in store.query_items(
            user, ItemQuery(include_superseded=True))[0]}
        turns = {t.id: t for user in USERS for t in store.query_turns(user, TurnQuery())}
        tools = {c.id for user in USERS for c in store.query_tool_calls(user)}
        texts = [i.content for i in items.values()] + [t.content for t in turns.values()]
    active = {i for i, item in items.items() if item.active}
    if active != set(wanted_items):
        problems.append(f"active items: {len(set(wanted_items) - active)} acknowledged "
                        f"missing, {len(active - set(wanted_items))} never acknowledged")
    problems += [f"item {i} reads {items[i].content!r}" for i in wanted_items
                 if i in items and items[i].content != wanted_items[i]][:3]
    problems += [f"revised item {old} is {items.get(old)}" for old, new in superseded.items()
                 if items.get(old) is None or items[old].superseded_by != new][:3]
    problems += [f"forgotten item {i} is there" for i in forgotten if i in items][:3]
    if set(items) != set(wanted_items) | set(superseded):
        problems.append(f"{len(items)} items stored, {len(wanted_items) + len(superseded)} "
                        "acknowledged")
    if set(turns) != set(wanted_turns) or any(turns[i].content != wanted_turns[i]
                                              for i in wanted_turns if i in turns):
        problems.append(f"{len(turns)} turns stored, {len(wanted_turns)} acknowledged")
    if tools != wanted_tools:
        problems.append(f"{len(tools)} tool calls stored, {len(wanted_tools)} acknowledged")
    duplicated = len(texts) - len(set(texts))
    if duplicated:
        problems.append(f"{duplicated} texts stored twice")
    with Memory(open_store(url, create=False), embedder=None) as memory:
        found = memory.verify()["problems"]
    return {"errors": errors, "writes": problems, "verify": found}


def figures(run: dict[str, Any]) -> dict[str, Any]:
    """Calls per second, and p50 / p95 latency (ms) of reads, writes and each call."""
    threads = run["threads"]

    def merged(ops: tuple[str, ...]) -> list[float]:
        return [ms for t in threads for op in ops for ms in t["timings"][op]]

    def pct(samples: list[float]) -> dict[str, float]:
        if not samples:
            return {"p50": 0.0, "p95": 0.0, "count": 0}
        data = np.asarray(samples)
        return {"p50": round(float(np.percentile(data, 50)), 2),
                "p95": round(float(np.percentile(data, 95)), 2), "count": len(samples)}

    calls = len(merged((*READS, *WRITES)))
    return {"calls": calls, "seconds": round(run["seconds"], 2),
            "calls_per_s": round(calls / run["seconds"], 1) if run["seconds"] else 0.0,
            "errors": sum(len(t["errors"]) for t in threads),
            "reads": pct(merged(READS)), "writes": pct(merged(WRITES)),
            "by_call": {op: pct(merged((op,))) for op in (*READS, *WRITES)}}


def main() -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--ops", type=int, default=150, help="calls per thread")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL database URL")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    backends: list[Backend] = (["sqlite", "postgres"] if args.backend == "both"
                               else [args.backend])
    console = Console(stderr=True)
    report: dict[str, Any] = {
        "benchmark": "load", "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "sqlite": sqlite3.sqlite_version},
        "processes": args.processes, "threads": args.threads, "ops": args.ops, "runs": []}
    for backend in backends:
        with stores_for(backend, args.postgres, "ledgermem-load-") as stores, \
                tempfile.TemporaryDirectory() as folder:
            if stores is None:
                console.print("skipping PostgreSQL: none could be started")
                continue
            console.print(f"load on {backend}: {args.processes} processes x {args.threads} "
                          f"threads x {args.ops} calls")
            url = stores.new("load")
            run = run_load(url, Path(folder), processes=args.processes,
                           threads=args.threads, ops=args.ops)
            report["runs"].append({"backend": backend, **figures(run),
                                   "problems": check_load(url, run)})
            stores.close()
    if args.json:
        print(json.dumps(report))
    else:
        show(report)
    return 1 if any(any(run["problems"].values()) for run in report["runs"]) else 0


def show(report: dict[str, Any]) -> None:
    """Print a load report's table, and the problems found, if any."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"load: {report['processes']} processes x {report['threads']} "
                        f"threads x {report['ops']} calls ({report['date']})")
    for column in ("store", "calls", "calls/s", "read p50 / p95 ms", "write p50 / p95 ms",
                   "errors", "writes lost or duplicated", "verify"):
        table.add_column(column, justify="right")
    for run in report["runs"]:
        found = run["problems"]
        table.add_row(run["backend"], str(run["calls"]), f"{run['calls_per_s']:.0f}",
                      f"{run['reads']['p50']:.1f} / {run['reads']['p95']:.1f}",
                      f"{run['writes']['p50']:.1f} / {run['writes']['p95']:.1f}",
                      str(len(found["errors"])), str(len(found["writes"])),
                      "clean" if not found["verify"] else f"{len(found['verify'])} problems")
    Console().print(table)
    for run in report["runs"]:
        for kind, lines in run["problems"].items():
            for line in lines[:10]:
                Console().print(f"{run['backend']} {kind}: {line}", markup=False)


if __name__ == "__main__":
    sys.exit(main())
