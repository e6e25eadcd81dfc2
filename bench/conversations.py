"""Conversation search at scale: a default ``search_conversations`` over one user's
``--turns`` turns (default 100,000), by the time its question names.

    python -m bench.conversations                       # SQLite and PostgreSQL
    python -m bench.conversations --backend sqlite --turns 20000 --json
    python -m bench.conversations --postgres URL        # that database, not a private one

The turns are written with ``add_turns``, one session of ``SESSION`` turns a call,
evenly over the three years before now and in time order, as a user's conversations
grow.
Texts are the scale benchmark's synthetic sentences (a Zipf vocabulary); each turn gets
a random unit vector (no model runs for 100,000 turns), so the vector search reads
what a real store holds. The store is then settled as an import leaves it
(``Store.settle``) and reopened with the default embedder and options.

Each question is two to four words of a stored turn plus what it says of time: nothing,
that turn's day ("on March 3, 2025"), its month ("in March 2025"), its year ("in
2025"), or "in the last three years" (every turn). The query embedding is in every
timing (the query cache is cleared before each search). Per kind: p50 / p95 / mean ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ledgermem import Memory
from ledgermem.benchmarks.common import percentiles, progress
from ledgermem.benchmarks.scale import Corpus
from ledgermem.memory import open_store
from ledgermem.providers.embedders import Embedder, embedder_from_name, normalise
from ledgermem.retrieval.embedding import QUERIES
from ledgermem.types import Turn

from .stores import Stores, add_backend_options, each_backend, report_start

__all__ = ["KINDS", "measure_conversations"]

USER = "talker"
SESSION = 100
YEARS = 3

KINDS: dict[str, Callable[[datetime], str]] = {
    "no time": lambda at: "",
    "a day": lambda at: f" on {at:%B} {at.day}, {at:%Y}",
    "a month": lambda at: f" in {at:%B %Y}",
    "a year": lambda at: f" in {at:%Y}",
    "three years": lambda at: " in the last three years",
}
"""What a question says of time, from the time of the turn its words come from."""


def _fill(memory: Memory, corpus: Corpus, rng: np.random.Generator, count: int,
          embedder: Embedder, now: datetime, bar: Progress) -> list[Turn]:
    """``count`` turns of ``USER``'s over the ``YEARS`` before ``now``, with random
    vectors; returns them."""
    user = memory.for_user(USER)
    start = now - timedelta(days=365 * YEARS)
    step = (now - timedelta(hours=1) - start) / count
    task = bar.add_task(f"fill {count:,} turns", total=count)
    turns: list[Turn] = []
    for first in range(0, count, SESSION):
        texts = corpus.sentences(rng, min(SESSION, count - first))
        written = user.add_turns(
            [{"role": "user" if n % 2 == 0 else "assistant", "content": text,
              "at": start + step * (first + n)} for n, text in enumerate(texts)],
            session_id=f"{USER}:{first // SESSION}")
        vectors = normalise(rng.standard_normal((len(written), embedder.dimensions),
                                                dtype=np.float32))
        memory.store.set_embeddings("conversations", [
            (turn.id, turn.content, vectors[n]) for n, turn in enumerate(written)],
            embedder.model_id)
        turns += written
        bar.advance(task, len(written))
    return turns


def _questions(rng: np.random.Generator, turns: Sequence[Turn], count: int
               ) -> list[tuple[str, datetime]]:
    """Two to four words of ``count`` random turns, with each turn's time."""
    out = []
    for pick in rng.integers(0, len(turns), size=count):
        turn = turns[int(pick)]
        words = turn.content.rstrip(".").lower().split()
        size = min(len(words), int(rng.integers(2, 5)))
        out.append((" ".join(str(w) for w in rng.choice(words, size=size, replace=False)),
                    datetime.fromisoformat(turn.ts)))
    return out


def measure_conversations(stores: Stores, *, turns: int, queries: int, embedder_name: str,
                          seed: int = 0, quiet: bool = False) -> dict[str, Any]:
    """One backend's latencies (ms) per kind of question, in a new store."""
    rng = np.random.default_rng(seed)
    corpus = Corpus(rng)
    embedder = embedder_from_name(embedder_name)
    embedder.embed_query("warm up")  # a model's load time is no search's
    now = datetime.now(UTC).replace(microsecond=0)
    url = stores.new("turns")
    run: dict[str, Any] = {"backend": stores.backend, "turns": turns,
                           "embedder": embedder.model_id, "queries": queries}
    with progress(quiet) as bar:
        with Memory(open_store(url), embedder=None) as memory:
            started = time.perf_counter()
            written = _fill(memory, corpus, rng, turns, embedder, now, bar)
            run["fill_s"] = round(time.perf_counter() - started, 1)
            memory.store.settle()
        questions = _questions(rng, written, queries)
        del written
        with Memory(open_store(url), embedder=embedder, clock=lambda: now) as memory:
            user = memory.for_user(USER)
            started = time.perf_counter()
            user.search_conversations(questions[0][0], limit=10)
            run["first_search_ms"] = round((time.perf_counter() - started) * 1000, 1)
            samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
            task = bar.add_task("search", total=len(questions) * len(KINDS))
            for words, at in questions:
                for kind, said in KINDS.items():  # interleaved, so load falls on all
                    QUERIES.clear()
                    started = time.perf_counter()
                    user.search_conversations(words + said(at), limit=10)
                    samples[kind].append((time.perf_counter() - started) * 1000)
                    bar.advance(task)
    run["latency_ms"] = {kind: percentiles(values) for kind, values in samples.items()}
    return run


def show(report: dict[str, Any]) -> None:
    """Print a report's table (ms)."""
    table = Table(title=f"conversation search, p50 / p95 ms ({report['date']})")
    for column in ("store", "turns", *KINDS, "first search", "fill s"):
        table.add_column(column, justify="right")
    for run in report["runs"]:
        lat = run["latency_ms"]
        table.add_row(run["backend"], f"{run['turns']:,}",
                      *[f"{lat[kind]['p50']:.1f} / {lat[kind]['p95']:.1f}" for kind in KINDS],
                      f"{run['first_search_ms']:.0f}", f"{run['fill_s']:.0f}")
    Console().print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_options(parser)
    parser.add_argument("--turns", type=int, default=100_000,
                        help="turns in the store (default 100,000)")
    parser.add_argument("--queries", type=int, default=100,
                        help="questions, each asked once per kind")
    parser.add_argument("--embedder", default="default", help="'default' or a registered name")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.turns < 1 or args.queries < 1:
        parser.error("--turns and --queries must be at least 1")
    from ledgermem.providers.embedders import DEFAULT_EMBEDDER

    name = DEFAULT_EMBEDDER if args.embedder == "default" else args.embedder
    report = report_start("conversations")
    report["runs"] = each_backend(
        args, "ledgermem-conversations-", lambda stores: measure_conversations(
            stores, turns=args.turns, queries=args.queries, embedder_name=name,
            quiet=args.json))
    if args.json:
        print(json.dumps(report))
    else:
        show(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
