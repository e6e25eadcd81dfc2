"""Vector index at scale on SQLite: a process's first search, with and without the
vector file, and the cost of the vector stage.

    python -m bench.vectors --items 100000,1000000 [--db-dir DIR] [--json]

Per size, a new SQLite file is filled the way ``ledgermem bench scale`` fills its bulk:
80% of the items belong to one user (the scope searched), the rest to 50 others, each
written as a ``memory.added`` event through ``Store.append`` with a random 384-d unit
vector through ``Store.set_embeddings`` (the embedding worker's path; no model runs).
Then, each in a new Python process (so nothing is cached in memory but the operating
system's page cache, warm from the load), the first ``vector_search_items`` of the
large scope is timed three ways, each twice:

- ``blobs``: vector files off, every BLOB of the scope read (the old behaviour);
- ``rebuild``: no file yet: the BLOBs read and the file written;
- ``file``: the file there: mapped and checked against the store.

Finally, in this process, 200 queries time the vector stage alone (``vector_stage``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ledgermem.benchmarks.common import percentiles
from ledgermem.clock import iso, new_id
from ledgermem.domain.events import ItemAdded, Kind, new_event
from ledgermem.store import vector_file
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.types import START_CONFIDENCE, Item, ItemQuery, Scope

MAIN_USER = "bench-main"
DIMS = 384
MODEL = "bench-random"
BATCH = 5_000
ROOT = Path(__file__).resolve().parent.parent


def build(path: Path, items: int, seed: int = 1) -> float:
    """Fill a new store with ``items`` items and vectors; returns seconds taken."""
    rng = np.random.default_rng(seed)
    store = SQLiteStore(path)
    store.vector_file_rows = None
    store.set_meta("embedding_model", MODEL)
    store.set_meta("embedding_dimensions", str(DIMS))
    owners = np.where(rng.random(items) < 0.8, -1, rng.integers(0, 50, items))
    at = iso(datetime.now(UTC))
    started = time.perf_counter()
    for start in range(0, items, BATCH):
        chunk = owners[start:start + BATCH]
        events, rows = [], []
        vectors = rng.standard_normal((len(chunk), DIMS), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for n, owner in enumerate(chunk):
            user = MAIN_USER if owner < 0 else f"bench-user-{owner:02d}"
            text = f"item {start + n}"
            item = Item(id=new_id(), user_id=user, category="fact", content=text,
                        source="user", confidence=START_CONFIDENCE["user"], created_at=at,
                        updated_at=at, valid_from=at)
            events.append(new_event(Scope(user), at, Kind.MEMORY_ADDED, ItemAdded(item),
                                    subject_id=item.id))
            rows.append((item.id, text, vectors[n]))
        with store.transaction():
            store.append(events)
            store.set_embeddings("knowledge", rows, MODEL)
    store.close()
    return time.perf_counter() - started


def first_search(path: Path, files: bool) -> dict[str, float]:
    """Open the store and time its first vector search (run in a process of its own)."""
    started = time.perf_counter()
    store = SQLiteStore(path)
    if not files:
        store.vector_file_rows = None
    opened = time.perf_counter()
    query = np.random.default_rng(0).standard_normal(DIMS).astype(np.float32)
    store.vector_search_items(MAIN_USER, query, ItemQuery(), 50)
    done = time.perf_counter()
    store.close()
    return {"open_ms": round((opened - started) * 1000, 1),
            "first_search_ms": round((done - opened) * 1000, 1)}


def _in_process(path: Path, files: bool) -> dict[str, float]:
    command = [sys.executable, "-m", "bench.vectors", "--first-search", str(path),
               *([] if files else ["--no-files"])]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return json.loads(output.stdout)  # type: ignore[no-any-return]


def vector_stage(path: Path, queries: int = 200) -> dict[str, Any]:
    """The vector stage, index warm: ``vector_search_items`` (50 rows) p50 / p95, and
    the ranking alone, exact and in two stages, with the overlap of their top 50.

    Half the queries are random (the worst case for sign bits: every cosine near 0),
    half a stored row plus noise (a query with true neighbours, as real ones have)."""
    store = SQLiteStore(path)
    rng = np.random.default_rng(2)
    store.vector_search_items(MAIN_USER, rng.standard_normal(DIMS).astype(np.float32),
                              ItemQuery(), 50)
    block = store._indexes["knowledge"].users[MAIN_USER]
    block.shortlist(np.ones(DIMS, dtype=np.float32))  # sign bits built before timing
    search: list[float] = []
    timing: dict[str, list[float]] = {"exact": [], "two_stage": []}
    overlap: dict[str, list[float]] = {"random": [], "near_a_row": []}
    for n in range(queries):
        query = rng.standard_normal(DIMS).astype(np.float32)
        kind = "random" if n % 2 else "near_a_row"
        if kind == "near_a_row":
            query = np.asarray(block.matrix[int(rng.integers(0, block.count))]) + 0.05 * query
        query /= np.linalg.norm(query)
        started = time.perf_counter()
        store.vector_search_items(MAIN_USER, query, ItemQuery(), 50)
        search.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        exact = block.scores(query)
        timing["exact"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        short = block.shortlist(query)
        timing["two_stage"].append((time.perf_counter() - started) * 1000)
        if short is not None:
            top = set(block.best(exact, 0, 50).tolist())
            overlap[kind].append(len(top & set(block.best(short, 0, 50).tolist())) / 50)
    store.close()
    return {"scope_rows": block.count, "search_ms": percentiles(search),
            "ranking_ms": {k: percentiles(v) for k, v in timing.items()},
            "overlap_at_50": {k: {"mean": round(float(np.mean(v)), 3),
                                  "min": round(float(np.min(v)), 3)} if v else None
                              for k, v in overlap.items()}}


def run(sizes: list[int], db_dir: Path | None) -> dict[str, Any]:
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": __import__("os").cpu_count()}, "runs": []}
    for size in sizes:
        folder = Path(tempfile.mkdtemp(prefix="ledgermem-vectors-", dir=db_dir))
        try:
            path = folder / "bench.db"
            print(f"{size:,}: building", file=sys.stderr)
            build_s = build(path, size)
            run: dict[str, Any] = {"items": size, "build_s": round(build_s, 1),
                                   "file_mib": round(path.stat().st_size / 2**20, 1)}
            for label, files in (("blobs", False), ("rebuild", True), ("file", True)):
                for attempt in (1, 2):
                    if label == "rebuild":
                        vector_file.discard_all(vector_file.vectors_dir(path))
                    print(f"{size:,}: first search, {label} #{attempt}", file=sys.stderr)
                    run[f"{label}_{attempt}"] = _in_process(path, files)
            sidecar = vector_file.vectors_dir(path)
            run["vector_file_mib"] = round(
                sum(p.stat().st_size for p in sidecar.glob("*.lmv")) / 2**20, 1)
            print(f"{size:,}: vector stage", file=sys.stderr)
            run["vector_stage"] = vector_stage(path)
            results["runs"].append(run)
            print(json.dumps(run), file=sys.stderr)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", default="100000")
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--first-search", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-files", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_search is not None:
        print(json.dumps(first_search(args.first_search, not args.no_files)))
        return 0
    results = run([int(s) for s in args.items.split(",")], args.db_dir)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for run_ in results["runs"]:
            print(json.dumps(run_))
    return 0


if __name__ == "__main__":
    sys.exit(main())
