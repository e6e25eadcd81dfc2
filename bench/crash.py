"""Crash safety: kill a writer with SIGKILL at random moments, then check the store.

    python -m bench.crash                       # 20 trials per scenario, SQLite and PostgreSQL
    python -m bench.crash --trials 5 --backend sqlite
    python -m bench.crash --postgres URL        # a database the URL's role may create schemas in

Scenarios (each trial a spawned child process, killed with SIGKILL):

- ``workload``: the write-heavy mix of ``bench.crash_workload`` (remember, revise,
  forget, add_turns with extraction by a scripted LLM, tool calls, reembed), killed
  after a few acknowledged writes plus a random delay; trials follow each other on
  one store, each checked against every log so far.
- ``reembed``: ``reembed`` of a store of a few thousand rows to the other hashing
  model. Afterwards the store records one model, every row holds a vector of it,
  and finishing the reembed works.
- ``migrate``: a store written by an older schema (SQLite version 1, without full-text
  indexes; PostgreSQL version 6, without the BM25 postings) opened by today's code,
  which migrates it. Afterwards it opens at the latest version, every version
  recorded once, the ledger unchanged, every item and turn there and searchable.
- ``import``: ``import_jsonl`` of an export into an empty store. Afterwards the store
  holds all of it (the same as the source, every view) or nothing, and an import
  from nothing lands whole.
- ``copy``: ``migrate`` from one store to another: the same as ``import``.

After every kill: on SQLite, ``PRAGMA integrity_check`` and the FTS5 indexes'
``integrity-check``; the store opens; the scenario's checks; ``verify`` finds no
problem. The operation scenarios kill at a time drawn uniformly over the time the
operation takes (measured by a first run that is not killed); the results say how
many kills landed inside it.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import platform
import random
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledgermem import Memory
from ledgermem.clock import new_id
from ledgermem.domain.events import Kind, new_event
from ledgermem.memory import open_store
from ledgermem.retrieval.embedding import reembed
from ledgermem.store.base import Store, TurnQuery
from ledgermem.store.migrations import SQLITE_MIGRATIONS
from ledgermem.store.pg_migrations import PG_MIGRATIONS
from ledgermem.testing import HashEmbedder, ScriptedLLMServer
from ledgermem.transfer import export_jsonl, import_jsonl
from ledgermem.transfer import migrate as copy_store
from ledgermem.types import Event, Item, Scope

from .crash_workload import (
    CRASH_USER,
    MODELS,
    Acknowledged,
    LogFile,
    check_workload,
    extraction_answer,
    read_log,
    recover,
    workload_child,
)
from .stores import Backend, Stores, integrity_problems, is_postgres, views_digest

__all__ = ["SCENARIOS", "Sizes", "TrialResult", "run_scenario"]

SCENARIOS = ("workload", "reembed", "migrate", "import", "copy")
PG_ROWS = 1_000
SPAWN = multiprocessing.get_context("spawn")
TS = "2026-05-01T09:00:00.000000+00:00"


@dataclass(frozen=True)
class Sizes:
    """How much data the operation scenarios work on."""

    rows: int = 3_000
    """Turns (and a third as many items) in the reembed, migrate, import and copy stores."""
    acknowledged: int = 8
    """Writes a workload child has acknowledged before its kill clock starts."""
    extra_s: float = 0.5
    """Longest random delay after that before the kill (workload)."""


@dataclass
class TrialResult:
    """One kill and what was found afterwards."""

    scenario: str
    backend: str
    trial: int
    seed: int
    killed_after_s: float
    mid_operation: bool
    """The kill landed before the operation finished (always so for the workload)."""
    acknowledged: dict[str, int] = field(default_factory=dict)
    cut: str | None = None
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


# child processes ------------------------------------------------------------------------
def _operation_child(kind: str, args: list[str], log: str) -> None:
    """Run one operation in a spawned process, logging its start and end times."""
    out = LogFile(log)
    if kind == "migrate":
        out.note(start=time.time())
        open_store(args[0]).close()
    elif kind == "reembed":
        store = open_store(args[0])
        out.note(start=time.time())
        reembed(store, HashEmbedder(dimensions=int(args[1].split(":")[1])))
        store.close()
    elif kind == "import":
        store = open_store(args[0])
        with open(args[1], encoding="utf-8") as source:
            out.note(start=time.time())
            import_jsonl(store, source)
        store.close()
    else:
        src, dst = open_store(args[0]), open_store(args[1])
        out.note(start=time.time())
        copy_store(src, dst)
    out.note(done=time.time())


def _kill_when(child: Any, log: Path, ready: Callable[[list[dict[str, Any]]], bool],
               delay: float) -> tuple[float, list[dict[str, Any]]]:
    """Wait until ``ready(log lines)``, then ``delay`` seconds, then SIGKILL; returns
    the seconds from ready to kill, and the log."""
    deadline = time.monotonic() + 120
    while not ready(read_log(log)):
        if not child.is_alive():
            raise RuntimeError(f"the child ended on its own (exit code {child.exitcode}): "
                               f"{read_log(log)[-3:]}")
        if time.monotonic() > deadline:
            child.kill()
            raise RuntimeError("the child did not get going within 120 s")
        time.sleep(0.005)
    started = time.monotonic()
    time.sleep(delay)
    child.kill()
    child.join(timeout=60)
    return time.monotonic() - started, read_log(log)


# checks shared by every scenario ---------------------------------------------------------
def _opens_clean(url: str) -> list[str]:
    """Integrity (SQLite), then the store opens and ``verify`` finds nothing."""
    problems = [] if is_postgres(url) else integrity_problems(url)
    try:
        with Memory(open_store(url, create=False), embedder=None) as memory:
            report = memory.verify()
    except Exception as exc:
        return [*problems, f"the store does not open or verify: {exc!r}"]
    return problems + [f"verify: {line}" for line in report["problems"]]


# the workload ------------------------------------------------------------------------------
@contextmanager
def _scripted_llm() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(default=extraction_answer) as server:
        yield server
        if server.errors:
            raise RuntimeError(f"the scripted model failed: {server.errors[0]!r}")


class WorkloadRun:
    """Workload trials on one store, each checked against every log so far."""

    def __init__(self, url: str, folder: Path, llm_url: str, sizes: Sizes) -> None:
        self.url, self.folder, self.llm_url, self.sizes = url, folder, llm_url, sizes
        self.seen = Acknowledged()

    def trial(self, number: int, seed: int, rng: random.Random) -> TrialResult:
        log = self.folder / f"workload-{seed}.jsonl"
        child = SPAWN.Process(target=workload_child, args=(self.url, str(log), seed,
                                                           self.llm_url))
        child.start()
        want = self.sizes.acknowledged
        after, lines = _kill_when(
            child, log, lambda got: sum("done" in line for line in got) >= want,
            rng.uniform(0, self.sizes.extra_s))
        before = dict(self.seen.writes)
        cut = self.seen.read(lines)
        result = TrialResult("workload", _backend(self.url), number, seed, after, True,
                             cut=cut["begin"] if cut else None)
        result.acknowledged = {op: n - before.get(op, 0)
                               for op, n in self.seen.writes.items() if n > before.get(op, 0)}
        if child.exitcode != -signal.SIGKILL:
            result.problems.append(f"the child exited with {child.exitcode}")
        result.problems += _opens_clean(self.url)
        with closing(open_store(self.url, create=False)) as store:
            result.problems += check_workload(store, self.seen, cut)
        recover(self.url, self.llm_url)
        with closing(open_store(self.url, create=False)) as store:
            result.problems += [f"after restart: {p}" for p in check_workload(
                store, self.seen, cut) if "batch" in p]
            pending = store.extraction_ids(CRASH_USER, "pending")
            if pending:
                result.problems.append(f"after restart {len(pending)} turns still pending")
        return result


def _backend(url: str) -> str:
    return "postgres" if is_postgres(url) else "sqlite"


# data for the operation scenarios ----------------------------------------------------------
def _events(rows: int, user: str = "bulk") -> tuple[list[Event], list[Item]]:
    """``rows`` turns in sessions of 20 and ``rows // 3`` items, as ledger events."""
    scope = Scope(user)
    events: list[Event] = []
    items: list[Item] = []
    for n in range(rows):
        events.append(new_event(Scope(user, session_id=f"{user}:s{n // 20}"), TS,
                                Kind.turn("user"),
                                {"role": "user", "content": f"turn {n} about topic{n % 97} "
                                 f"and word{n}", "at": TS}))
    for n in range(rows // 3):
        item = Item(id=new_id(), user_id=user, category="fact",
                    content=f"item {n} notes topic{n % 89} and thing{n}", source="user",
                    confidence=0.8, created_at=TS, updated_at=TS, valid_from=TS)
        items.append(item)
        events.append(new_event(scope, TS, Kind.MEMORY_ADDED, {"item": asdict(item)},
                                subject_id=item.id))
    return events, items


def _filled(url: str, rows: int, user: str = "bulk", embedder: Any = None) -> None:
    """Append ``rows`` turns and items to the store at ``url`` (embedded, if given)."""
    events, _ = _events(rows, user)
    with Memory(open_store(url), embedder=embedder) as memory:
        for start in range(0, len(events), 1000):
            memory.store.append(events[start:start + 1000])
        memory.flush()


V1_ITEM_COLUMNS = (
    "id", "user_id", "agent_id", "category", "content", "domain", "source", "confidence",
    "context", "entity", "sensitive", "due_at", "reminded_at", "superseded_by", "valid_from",
    "valid_to", "created_at", "updated_at", "last_used_at", "use_count", "metadata")


def _old_store(stores: Stores, rows: int) -> tuple[str, list[Event], list[Item]]:
    """A store as an older ledgermem left it: SQLite schema version 1 (rows written as
    that version's projection did, frozen here), PostgreSQL version 6."""
    url = stores.new("old")
    events, items = _events(rows)
    if is_postgres(url):
        from ledgermem.store.postgres import PostgresStore

        store = PostgresStore(url, migrations=PG_MIGRATIONS[:6], min_size=0)
        try:
            for start in range(0, len(events), 1000):
                store.append(events[start:start + 1000])
        finally:
            store.close()
        return url, events, items
    from ledgermem.store.sqlite import SQLiteStore

    SQLiteStore(url, migrations=SQLITE_MIGRATIONS[:1]).close()
    by_id = {item.id: item for item in items}
    with closing(sqlite3.connect(url, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        for e in events:
            conn.execute("INSERT INTO events (id, ts, user_id, agent_id, session_id, kind, "
                         "subject_id, payload, visibility) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (e.id, e.ts, e.user_id, e.agent_id, e.session_id, e.kind,
                          e.subject_id, json.dumps(e.payload), e.visibility))
            if e.kind == Kind.MEMORY_ADDED:
                row = {**asdict(by_id[str(e.subject_id)]), "metadata": "{}"}
                conn.execute(f"INSERT INTO knowledge ({', '.join(V1_ITEM_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(V1_ITEM_COLUMNS))})",
                             [row[c] for c in V1_ITEM_COLUMNS])
            else:
                conn.execute("INSERT INTO conversations (id, user_id, agent_id, session_id, "
                             "role, name, content, ts, consolidated_at, metadata) VALUES "
                             "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (e.id, e.user_id, None, e.session_id, "user", None,
                              e.payload["content"], TS, None, "{}"))
        conn.execute("COMMIT")
    return url, events, items


def _migrated_problems(url: str, events: list[Event], items: list[Item]) -> list[str]:
    """Today's code opens the old store at the latest version with nothing lost."""
    latest = max(m.version for m in (PG_MIGRATIONS if is_postgres(url) else SQLITE_MIGRATIONS))
    problems = []
    with closing(open_store(url, create=False)) as store:
        version = store.schema_version()  # type: ignore[attr-defined]
        if version != latest:
            problems.append(f"schema version {version}, not {latest}")
        ledger = [event for _, event in store.ledger(0, len(events) + 10)]
        if ledger != events:
            problems.append(f"the ledger changed ({len(ledger)} events, {len(events)} written)")
        stored = {i.id: i for i in store.query_items("bulk", _all_items())[0]}
        problems += [f"item {i.id} is {stored.get(i.id)}" for i in items
                     if stored.get(i.id) != i][:3]
        turns = store.query_turns("bulk", TurnQuery())
        if len(turns) != len(events) - len(items):
            problems.append(f"{len(turns)} turns, {len(events) - len(items)} written")
        if not store.keyword_search_turns("bulk", ["word7"], "or", TurnQuery(), 5):
            problems.append("keyword search finds no turn")
        if not store.keyword_search_items("bulk", ["thing5"], "or", _all_items(), 5):
            problems.append("keyword search finds no item")
    return problems


def _all_items() -> Any:
    from ledgermem.types import ItemQuery

    return ItemQuery(include_superseded=True)


def _versions_problems(url: str) -> list[str]:
    """Each migration recorded once, none skipped (SQLite's table, read raw)."""
    if is_postgres(url):
        return []
    with closing(sqlite3.connect(url)) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
    latest = max(m.version for m in SQLITE_MIGRATIONS)
    return [] if versions == list(range(1, latest + 1)) else [f"versions {versions}"]


# the operation scenarios -----------------------------------------------------------------
class OperationRun:
    """Trials of one operation scenario (``reembed``, ``migrate``, ``import``, ``copy``)."""

    def __init__(self, scenario: str, stores: Stores, folder: Path, sizes: Sizes) -> None:
        self.scenario, self.stores, self.folder, self.sizes = scenario, stores, folder, sizes
        self.source = ""
        self.export = folder / f"{scenario}-{stores.backend}.jsonl"
        self.reembed_url = ""
        self.duration = 0.0

    def prepare(self) -> None:
        """The data every trial shares, then one run to completion to time it."""
        if self.scenario in ("import", "copy"):
            self.source = self.stores.new("source")
            _filled(self.source, self.sizes.rows, embedder=HashEmbedder(dimensions=16))
            with closing(open_store(self.source)) as store, \
                    open(self.export, "w", encoding="utf-8") as out:
                export_jsonl(store, out)
        if self.scenario == "reembed":
            self.reembed_url = self.stores.new("reembed")
            _filled(self.reembed_url, self.sizes.rows, embedder=HashEmbedder(dimensions=16))
        kind, args, _ = self._setup()
        log = self.folder / f"{self.scenario}-{self.stores.backend}-timing.jsonl"
        child = SPAWN.Process(target=_operation_child, args=(kind, args, str(log)))
        child.start()
        child.join(timeout=600)
        lines = read_log(log)
        if child.exitcode != 0 or len(lines) != 2:
            raise RuntimeError(f"{self.scenario} did not complete (exit {child.exitcode})")
        self.duration = lines[1]["done"] - lines[0]["start"]
        self._finish(args)

    def _setup(self) -> tuple[str, list[str], Any]:
        """The child's arguments for one trial, and what its check needs."""
        if self.scenario == "migrate":
            url, events, items = _old_store(self.stores, self.sizes.rows)
            return "migrate", [url], (events, items)
        if self.scenario == "reembed":
            with closing(open_store(self.reembed_url)) as store:
                model = store.get_meta("embedding_model")
            target = MODELS[1] if model == MODELS[0] else MODELS[0]
            return "reembed", [self.reembed_url, target], (model, target)
        if self.scenario == "import":
            return "import", [self.stores.new("imported"), str(self.export)], None
        return "copy", [self.source, self.stores.new("copied")], None

    def _finish(self, args: list[str]) -> None:
        """Complete what a trial cut short, so the next trial starts from a whole store."""
        if self.scenario == "reembed":
            with closing(open_store(args[0])) as store:
                reembed(store, HashEmbedder(dimensions=int(args[1].split(":")[1])))

    def trial(self, number: int, seed: int, rng: random.Random) -> TrialResult:
        kind, args, expected = self._setup()
        log = self.folder / f"{self.scenario}-{seed}.jsonl"
        child = SPAWN.Process(target=_operation_child, args=(kind, args, str(log)))
        child.start()
        after, lines = _kill_when(child, log, lambda got: bool(got),
                                  rng.uniform(0, self.duration))
        result = TrialResult(self.scenario, self.stores.backend, number, seed, after,
                             mid_operation=not any("done" in line for line in lines))
        result.problems += _opens_clean(args[1] if kind == "copy" else args[0])
        result.problems += self._check(kind, args, expected)
        self._finish(args)
        return result

    def _check(self, kind: str, args: list[str], expected: Any) -> list[str]:
        if kind == "migrate":
            events, items = expected
            return _versions_problems(args[0]) + _migrated_problems(args[0], events, items)
        if kind == "reembed":
            return _reembed_problems(args[0], expected)
        destination = args[0] if kind == "import" else args[1]
        return _all_or_nothing(self.source, destination, self.export)


def _reembed_problems(url: str, models: tuple[str, str]) -> list[str]:
    """One model recorded, every row embedded by it, and the reembed can finish."""
    with closing(open_store(url, create=False)) as store:
        model = store.get_meta("embedding_model")
        problems = [] if model in models else [f"the store records {model}, not {models}"]
        counts = store.user_counts().get("bulk", {})
        vectors = [row for table in ("knowledge", "conversations")
                   for row in _vectors(store, table)]
        if len(vectors) != counts.get("turns", 0) + counts.get("items", 0):
            problems.append(f"{len(vectors)} vectors for {counts} rows")
        wrong = [row[0] for row in vectors if row[3] != model]
        if wrong:
            problems.append(f"{len(wrong)} vectors of another model than {model}")
        reembed(store, HashEmbedder(dimensions=int(models[1].split(":")[1])))
        if store.get_meta("embedding_model") != models[1]:
            problems.append("the reembed does not finish after the kill")
    return problems


def _vectors(store: Store, table: Any) -> list[Any]:
    found: list[Any] = []
    last = ""
    while rows := store.stored_embeddings(table, last, 1000):
        found += rows
        last = rows[-1][0]
    return found


def _all_or_nothing(source: str, destination: str, export: Path) -> list[str]:
    """The destination holds everything the source holds, or nothing (then an import
    lands whole)."""
    with closing(open_store(source, create=False)) as src:
        wanted = views_digest(src)
    with closing(open_store(destination, create=False)) as dst:
        if not dst.user_ids():
            with open(export, encoding="utf-8") as file:
                import_jsonl(dst, file)
            landed = "the import after the kill"
        else:
            landed = "the store after the kill"
        got = views_digest(dst)
    if got == wanted:
        return []
    differs = [key for key in wanted["users"] if got["users"].get(key) != wanted["users"][key]]
    return [f"{landed} differs from the source (users {differs[:3]}, vectors "
            f"{got['vectors'] == wanted['vectors']}, model {got['model']})"]


# running -------------------------------------------------------------------------------------
def run_scenario(scenario: str, stores: Stores, folder: Path, trials: int, *,
                 seed: int | None = None, sizes: Sizes = Sizes(),
                 on_trial: Callable[[TrialResult], None] | None = None) -> list[TrialResult]:
    """Run ``trials`` kill trials of ``scenario`` on stores from ``stores``."""
    first = random.Random().randrange(1_000_000) if seed is None else seed
    rng = random.Random(first)
    results = []
    with _scripted_llm() as server:
        runner: WorkloadRun | OperationRun
        if scenario == "workload":
            runner = WorkloadRun(stores.new("workload"), folder, server.url, sizes)
        else:
            runner = OperationRun(scenario, stores, folder, sizes)
            runner.prepare()
        for number in range(trials):
            started = time.monotonic()
            result = runner.trial(number, first + number, rng)
            result.seconds = round(time.monotonic() - started, 2)
            results.append(result)
            if on_trial is not None:
                on_trial(result)
    return results


def summary(results: list[TrialResult]) -> dict[str, Any]:
    """Per scenario and backend: trials, kills inside the operation, writes
    acknowledged, cut calls, trials with problems."""
    rows: dict[str, Any] = {}
    for r in results:
        row = rows.setdefault(f"{r.scenario}/{r.backend}", {
            "scenario": r.scenario, "backend": r.backend, "trials": 0, "mid_operation": 0,
            "acknowledged": 0, "cut": 0, "failed": 0, "problems": []})
        row["trials"] += 1
        row["mid_operation"] += r.mid_operation
        row["acknowledged"] += sum(r.acknowledged.values())
        row["cut"] += r.cut is not None
        row["failed"] += bool(r.problems)
        row["problems"] += [f"trial {r.trial} (seed {r.seed}): {p}" for p in r.problems[:3]]
    return rows


def main() -> int:
    from rich.console import Console

    from ledgermem.benchmarks.common import progress

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL database URL")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--rows", type=int, default=None,
                        help=f"rows of the operation scenarios (default {Sizes.rows} on "
                             f"SQLite, {PG_ROWS} on PostgreSQL, where a turn costs more)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    backends: list[Backend] = (["sqlite", "postgres"] if args.backend == "both"
                               else [args.backend])
    results: list[TrialResult] = []
    started = datetime.now(UTC)
    with progress(args.json) as bar, _postgres(args.postgres, "postgres" in backends) as pg:
        import tempfile

        for backend in backends:
            if backend == "postgres" and pg is None:
                Console(stderr=True).print("skipping PostgreSQL: none could be started")
                continue
            with tempfile.TemporaryDirectory(prefix="ledgermem-crash-") as folder:
                stores = Stores(backend, folder if backend == "sqlite" else str(pg))
                try:
                    for scenario in scenarios:
                        task = bar.add_task(f"{scenario} on {backend}", total=args.trials)
                        results += run_scenario(
                            scenario, stores, Path(folder), args.trials,
                            sizes=Sizes(rows=args.rows or (
                                Sizes.rows if backend == "sqlite" else PG_ROWS)),
                            on_trial=functools.partial(_advance, bar, task))
                finally:
                    stores.close()
    report: dict[str, Any] = {"benchmark": "crash", "date": started.isoformat(timespec="seconds"),
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "sqlite": sqlite3.sqlite_version},
              "runs": list(summary(results).values()),
              "trials": [asdict(r) for r in results]}
    if args.json:
        print(json.dumps(report))
    else:
        show(report)
    return 1 if any(row["failed"] for row in report["runs"]) else 0


def show(report: dict[str, Any]) -> None:
    """Print a crash report's table, and the first problems found, if any."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"crash safety ({report['date']})")
    for column in ("scenario", "store", "trials", "killed mid-operation",
                   "writes acknowledged", "calls cut short", "trials with problems"):
        table.add_column(column, justify="right")
    for row in report["runs"]:
        table.add_row(row["scenario"], row["backend"], str(row["trials"]),
                      str(row["mid_operation"]), str(row["acknowledged"]), str(row["cut"]),
                      str(row["failed"]))
    console.print(table)
    for row in report["runs"]:
        for problem in row["problems"][:5]:
            console.print(f"{row['scenario']}/{row['backend']}: {problem}", markup=False)


def _advance(bar: Any, task: Any, _: TrialResult) -> None:
    bar.advance(task)


@contextmanager
def _postgres(url: str | None, wanted: bool) -> Iterator[str | None]:
    if url or not wanted:
        yield url
        return
    from .stores import private_postgres

    server = private_postgres()
    try:
        private = server.__enter__()
    except RuntimeError:
        yield None
        return
    try:
        yield private
    finally:
        server.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())
