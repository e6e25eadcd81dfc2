"""Where a default hybrid search spends its time, and how fast passages are embedded.

    python -m bench.latency                  # LoCoMo dev, every sample
    python -m bench.latency --samples 2 --json

LoCoMo as ``ledgermem bench locomo`` runs it (each sample ingested, then its questions
asked with ``search_conversations`` and the default options, so recall is the same),
with the store's retrieval calls and the embedder timed in place:

- embed: the query embedding (a worker thread, beside the keyword search);
- keyword: every keyword search of the call (turns, and the knowledge whose source
  turns are candidates too);
- vector: the vector search, after the embedding;
- wait: how long the caller waited for the embedding after its keyword searches;
- fetch: loading the candidate turns (one statement);
- fusion: the rest (fusion, speaker and time rankings, salience, building the hits);
- total: the call, wall-clock; total CPU: the calling thread's CPU time, which other
  work on the machine moves far less than wall-clock time.

Passages: every LoCoMo turn as it is embedded (``speaker: text``) in the embedding
worker's claims (``EmbeddingWorker.batch_size``), wall-clock passages/s and passages
per CPU-second of the process. The load average before and after is printed: on a
shared machine, wall-clock figures mean little without it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from ledgermem import Memory
from ledgermem.benchmarks.common import ManualClock, read_entries
from ledgermem.benchmarks.locomo import _sessions, normalise_evidence, turn_text
from ledgermem.retrieval.embedding import QUERIES, EmbeddingWorker

from .__main__ import DEFAULT_LOCOMO

PHASES = ("embed", "keyword", "vector", "wait", "fetch", "fusion", "total", "total_cpu")


class Timings:
    """Intervals of the timed calls of the current search, by phase."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def timed(self, phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.calls[phase].append((start, time.perf_counter()))
        return run

    def spent(self, phase: str) -> float:
        return sum(end - start for start, end in self.calls[phase])


def _instrument(memory: Memory, timings: Timings) -> None:
    store, embedder = memory.store, memory.embedder
    for name, phase in (("keyword_search_turns", "keyword"), ("keyword_search_items", "keyword"),
                        ("vector_search_turns", "vector"), ("query_turns", "fetch")):
        setattr(store, name, timings.timed(phase, getattr(store, name)))
    embedder.embed_query = timings.timed("embed", embedder.embed_query)


def _breakdown(timings: Timings, total: float, cpu: float) -> dict[str, float]:
    calls = timings.calls
    keyword_end = max((end for _, end in calls["keyword"]), default=0.0)
    embed_end = max((end for _, end in calls["embed"]), default=0.0)
    wait = max(0.0, embed_end - keyword_end) if calls["embed"] else 0.0
    parts = {phase: timings.spent(phase) for phase in ("embed", "keyword", "vector", "fetch")}
    parts["wait"] = wait
    parts["fusion"] = max(0.0, total - parts["keyword"] - parts["vector"] - parts["fetch"]
                          - wait)
    parts["total"], parts["total_cpu"] = total, cpu
    return {phase: value * 1000 for phase, value in parts.items()}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def searches(data: Path, samples: int | None) -> dict[str, Any]:
    """Ingest LoCoMo sample by sample and time each default search of its questions."""
    clock = ManualClock()
    rows: list[dict[str, float]] = []
    recall: dict[int, list[float]] = {5: [], 10: [], 20: []}
    texts: list[str] = []
    ingest_s = 0.0
    with tempfile.TemporaryDirectory(prefix="ledgermem-latency-") as folder, \
            Memory.open(Path(folder) / "locomo.db", clock=clock) as memory:
        timings = Timings()
        _instrument(memory, timings)
        for sample in read_entries(data, "LoCoMo")[:samples]:
            handle = memory.for_user(str(sample["sample_id"]))
            sessions = _sessions(sample["conversation"])
            speaker_a = sample["conversation"].get("speaker_a")
            known: set[str] = set()
            started = time.perf_counter()
            for number, (date, turns) in enumerate(sessions, start=1):
                batch = []
                for offset, turn in enumerate(turns):
                    known.add(turn["dia_id"])
                    texts.append(f"{turn.get('speaker')}: {turn_text(turn)}")
                    batch.append({
                        "role": "user" if turn.get("speaker") == speaker_a else "assistant",
                        "name": turn.get("speaker"), "content": turn_text(turn),
                        "at": date + timedelta(seconds=offset),
                        "metadata": {"dia_id": turn["dia_id"]}})
                if batch:
                    handle.add_turns(batch, session_id=f"{sample['sample_id']}:session_{number}")
            memory.flush()
            ingest_s += time.perf_counter() - started
            clock.now = sessions[-1][0] + timedelta(hours=1)
            for qa in sample.get("qa", []):
                evidence = normalise_evidence(qa.get("evidence", []), known).ids
                if int(qa.get("category", 0)) not in (1, 2, 3, 4) or not evidence:
                    continue
                timings.calls.clear()
                cpu, wall = time.thread_time(), time.perf_counter()
                hits = handle.search_conversations(qa["question"], limit=20)
                total, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                rows.append(_breakdown(timings, total, cpu))
                found = [h.turn.metadata.get("dia_id") for h in hits if h.turn]
                for k, values in recall.items():
                    values.append(len(set(found[:k]) & set(evidence)) / len(evidence))
        QUERIES.clear()
    return {"questions": len(rows), "ingest_s": round(ingest_s, 2), "turns": len(texts),
            "recall": {f"R@{k}": round(float(np.mean(v)), 4) for k, v in recall.items()},
            "latency_ms": {phase: {"p50": round(float(np.percentile([r[phase] for r in rows],
                                                                     50)), 2),
                                   "p95": round(float(np.percentile([r[phase] for r in rows],
                                                                     95)), 2)}
                           for phase in PHASES},
            "_texts": texts}


def passages(memory_texts: list[str]) -> dict[str, Any]:
    """Passages/s of the default embedder over ``memory_texts`` in the worker's claims."""
    from ledgermem.providers.embedders import default_embedder

    embedder = default_embedder()
    embedder.embed_batch(["warm up"])
    claim = EmbeddingWorker.__init__.__kwdefaults__["batch_size"]  # type: ignore[index]
    cpu, wall = _cpu(), time.perf_counter()
    for start in range(0, len(memory_texts), claim):
        embedder.embed_batch(memory_texts[start:start + claim])
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    return {"passages": len(memory_texts), "claim": claim,
            "passages_per_s": round(len(memory_texts) / wall, 1),
            "passages_per_cpu_s": round(len(memory_texts) / cpu, 1)}


def show(result: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"default hybrid search on LoCoMo ({result['questions']} questions), ms")
    table.add_column("")
    for phase in PHASES:
        table.add_column(phase.replace("_", " "), justify="right")
    for stat in ("p50", "p95"):
        table.add_row(stat, *[f"{result['latency_ms'][phase][stat]:.2f}" for phase in PHASES])
    console.print(table)
    embed = result["passages"]
    console.print(f"recall {result['recall']}; ingest {result['ingest_s']} s for "
                  f"{result['turns']} turns; passages {embed['passages_per_s']}/s wall, "
                  f"{embed['passages_per_cpu_s']} per CPU-second (claims of {embed['claim']}); "
                  f"load {result['load_before']} → {result['load_after']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--samples", type=int, default=None, help="the first N samples only")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if not args.locomo.exists():
        print(f"skipping: {args.locomo} not found", file=sys.stderr)
        return 0
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = searches(args.locomo, args.samples)
    result["passages"] = passages(result.pop("_texts"))
    result.update(load_before=load_before, load_after=[round(x, 2) for x in os.getloadavg()],
                  cpus=os.cpu_count())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
