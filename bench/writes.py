"""Writes: how many items per second ``remember``, ``remember_many`` and bulk
``add_turns`` store, on an empty store and on one holding ``--full`` items.

    python -m bench.writes                          # SQLite and PostgreSQL, full = 100,000
    python -m bench.writes --backend sqlite --full 10000 --json
    python -m bench.writes --postgres URL           # that database instead of a private one

Default options, as a user gets them: dedup on and the default embedder, whose
background worker embeds what is written while the writes go on (writes never wait
for it). Only the write calls are timed. How fast the worker embeds is measured
apart: a fresh store, ``--embed-sample`` items written, then ``flush()`` timed
(passages per second); ``--embedder none`` leaves embedding out altogether.

The full store is filled as ``memory.added`` events appended straight to the store,
with random unit vectors (no model runs for 100,000 items), all in the one user's
scope that the timed writes go to. Texts are the scale benchmark's synthetic sentences
(a Zipf vocabulary), so keyword postings and the dedup lookup look like real text.
Then the store is settled as an import leaves it (``Store.settle``: on PostgreSQL
``VACUUM (ANALYZE)``, what autovacuum does some while after a load); ``--unsettled``
times the writes right after the raw fill instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ledgermem import Memory
from ledgermem.benchmarks.common import progress
from ledgermem.benchmarks.scale import Corpus
from ledgermem.clock import iso, new_id
from ledgermem.domain.events import ItemAdded, Kind, new_event
from ledgermem.memory import open_store
from ledgermem.providers.embedders import Embedder, embedder_from_name, normalise
from ledgermem.types import START_CONFIDENCE, Item, Scope

from .stores import Stores, add_backend_options, each_backend, report_start

__all__ = ["measure_writes"]

USER = "writer"
FILL_CHUNK = 5_000


def _fill(memory: Memory, corpus: Corpus, rng: np.random.Generator, count: int,
          embedder: Embedder | None, bar: Progress) -> float:
    """Append ``count`` items to the user's scope (vectors too when there is an
    embedder); returns the seconds it took."""
    store = memory.store
    task = bar.add_task(f"fill {count:,} items", total=count)
    now = datetime.now(UTC)
    started = time.perf_counter()
    for start in range(0, count, FILL_CHUNK):
        texts = corpus.sentences(rng, min(FILL_CHUNK, count - start))
        events = []
        for text, age in zip(texts, rng.uniform(0, 365 * 86400, size=len(texts)),
                             strict=True):
            at = iso(now - timedelta(seconds=float(age)))
            item = Item(id=new_id(), user_id=USER, category="fact", content=text,
                        source="user", confidence=START_CONFIDENCE["user"], created_at=at,
                        updated_at=at, valid_from=at)
            events.append(new_event(Scope(USER), at, Kind.MEMORY_ADDED, ItemAdded(item),
                                    subject_id=item.id))
        with store.transaction():
            store.append(events)
            if embedder is not None:
                vectors = normalise(rng.standard_normal((len(events), embedder.dimensions),
                                                        dtype=np.float32))
                store.set_embeddings("knowledge", [
                    (str(e.subject_id), text, vectors[i])
                    for i, (e, text) in enumerate(zip(events, texts, strict=True))],
                    embedder.model_id)
        bar.advance(task, len(events))
    return time.perf_counter() - started


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds else 0.0


def _remember(memory: Memory, texts: list[str], bar: Progress, label: str) -> float:
    user = memory.for_user(USER)
    task = bar.add_task(label, total=len(texts))
    started = time.perf_counter()
    for text in texts:
        user.remember(text)
        bar.advance(task)
    return _rate(len(texts), time.perf_counter() - started)


def _remember_many(memory: Memory, texts: list[str], batch: int, bar: Progress,
                   label: str) -> float:
    user = memory.for_user(USER)
    task = bar.add_task(label, total=len(texts))
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        user.remember_many(texts[start:start + batch])
        bar.advance(task, min(batch, len(texts) - start))
    return _rate(len(texts), time.perf_counter() - started)


def _add_turns(memory: Memory, texts: list[str], batch: int, bar: Progress) -> float:
    """Bulk ``add_turns``: each call a session of ``batch`` alternating turns."""
    user = memory.for_user(USER)
    task = bar.add_task("add_turns (bulk)", total=len(texts))
    started = time.perf_counter()
    for number, start in enumerate(range(0, len(texts), batch)):
        user.add_turns([{"role": "user" if n % 2 == 0 else "assistant", "content": text}
                        for n, text in enumerate(texts[start:start + batch])],
                       session_id=f"{USER}:bulk-{number}")
        bar.advance(task, min(batch, len(texts) - start))
    return _rate(len(texts), time.perf_counter() - started)


def _embedding_rate(url: str, embedder: Embedder, corpus: Corpus, rng: np.random.Generator,
                    count: int) -> float:
    """Passages per second the background worker embeds: ``count`` items written at
    once, then ``flush()`` (which waits for the worker) timed."""
    with Memory(open_store(url), embedder=embedder) as memory:
        memory.for_user(USER).remember_many(corpus.sentences(rng, count), dedup=False)
        started = time.perf_counter()
        memory.flush()
        return _rate(count, time.perf_counter() - started)


def measure_writes(stores: Stores, *, full: int, calls: int, batch_items: int, batch: int,
                   embedder_name: str, embed_sample: int, seed: int = 0,
                   quiet: bool = False, settle: bool = True) -> dict[str, Any]:
    """One backend's figures (items per second) in new stores made by ``stores``;
    ``settle``: the full store is settled after its fill (``Store.settle``)."""
    rng = np.random.default_rng(seed)
    corpus = Corpus(rng)
    embedder = None if embedder_name == "none" else embedder_from_name(embedder_name)
    if embedder is not None:
        embedder.embed_query("warm up")  # a model's load time is no write's
    run: dict[str, Any] = {"backend": stores.backend, "full_items": full,
                           "embedder": embedder.model_id if embedder else None}
    with progress(quiet) as bar:
        with Memory(open_store(stores.new("empty")), embedder=embedder) as memory:
            run["remember_empty"] = _remember(memory, corpus.sentences(rng, calls), bar,
                                              "remember (empty)")
        with Memory(open_store(stores.new("many")), embedder=embedder) as memory:
            run["remember_many_empty"] = _remember_many(
                memory, corpus.sentences(rng, batch_items), batch, bar,
                "remember_many (empty)")
        with Memory(open_store(stores.new("turns")), embedder=embedder) as memory:
            run["add_turns_empty"] = _add_turns(memory, corpus.sentences(rng, batch_items),
                                                batch, bar)
        with Memory(open_store(stores.new("full")), embedder=embedder) as memory:
            run["fill_s"] = round(_fill(memory, corpus, rng, full, embedder, bar), 1)
            if settle:  # as an import leaves a store (``Store.settle``)
                started = time.perf_counter()
                memory.store.settle()
                run["settle_s"] = round(time.perf_counter() - started, 1)
            run["remember_full"] = _remember(memory, corpus.sentences(rng, calls), bar,
                                             f"remember (at {full:,})")
            run["remember_many_full"] = _remember_many(
                memory, corpus.sentences(rng, batch_items), batch, bar,
                f"remember_many (at {full:,})")
    if embedder is not None and embed_sample:
        run["embedding_per_s"] = _embedding_rate(stores.new("embed"), embedder, corpus, rng,
                                                 embed_sample)
    return run


def show(report: dict[str, Any]) -> None:
    """Print a writes report's table (items per second)."""
    table = Table(title=f"writes, items/s ({report['date']}; batches of {report['batch']})")
    for column in ("store", "remember empty", "remember at N", "N",
                   "remember_many empty", "remember_many at N", "add_turns bulk",
                   "embedding/s (background)"):
        table.add_column(column, justify="right")
    for run in report["runs"]:
        table.add_row(run["backend"], f"{run['remember_empty']:.0f}",
                      f"{run['remember_full']:.0f}", f"{run['full_items']:,}",
                      f"{run['remember_many_empty']:.0f}", f"{run['remember_many_full']:.0f}",
                      f"{run['add_turns_empty']:.0f}",
                      f"{run['embedding_per_s']:.0f}" if "embedding_per_s" in run else "-")
    Console().print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_options(parser)
    parser.add_argument("--full", type=int, default=100_000,
                        help="items in the full store (default 100,000)")
    parser.add_argument("--calls", type=int, default=300, help="remember calls timed")
    parser.add_argument("--batch-items", type=int, default=10_000,
                        help="items written by remember_many and turns by add_turns")
    parser.add_argument("--batch", type=int, default=1_000, help="items per call")
    parser.add_argument("--embedder", default="default",
                        help="'default', a registered name, or 'none'")
    parser.add_argument("--embed-sample", type=int, default=500,
                        help="items the embedding rate is measured on (0: not measured)")
    parser.add_argument("--unsettled", action="store_true",
                        help="time the writes right after the fill, not settling it first")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from ledgermem.providers.embedders import DEFAULT_EMBEDDER

    name = DEFAULT_EMBEDDER if args.embedder == "default" else args.embedder
    report = report_start("writes", calls=args.calls, batch_items=args.batch_items,
                          batch=args.batch)
    report["runs"] = each_backend(args, "ledgermem-writes-", lambda stores: measure_writes(
        stores, full=args.full, calls=args.calls, batch_items=args.batch_items,
        batch=args.batch, embedder_name=name, embed_sample=args.embed_sample,
        quiet=args.json, settle=not args.unsettled))
    if args.json:
        print(json.dumps(report))
    else:
        show(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
