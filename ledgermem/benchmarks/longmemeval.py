"""LongMemEval retrieval: does the search find the sessions (or turns) holding the answer?

Scored the way the LongMemEval code scores retrieval (Wu et al., ICLR 2025,
``src/retrieval``): only user turns are indexed; a session is gold when its id
contains ``answer`` and one of its user turns has ``has_answer``; at turn granularity
each such user turn is gold. Abstention questions (``…_abs``) are skipped, and so are
questions left without gold (counted apart; the paper's script would average them in,
with a vacuous recall_all of 1). Every question gets a fresh scope (user id =
question id) with the question date as "now". For each k we report ``recall_any@k``
(some gold key in the top k), ``recall_all@k`` (every gold key in the top k) and
``ndcg_any@k`` (binary-relevance NDCG with the paper's DCG, ``rel₁ + Σ_{i≥2} relᵢ /
log₂ i``), averaged over questions.
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from ..errors import InvalidInput
from ..memory import Memory, UserMemory
from ..retrieval.hybrid import SearchOptions
from .common import ManualClock, percentiles, progress, read_entries, require

__all__ = ["add_haystack", "gold_keys", "longmemeval_date", "run_longmemeval", "score_ranking",
           "turn_key"]

Granularity = Literal["session", "turn"]
METRICS = ("recall_any", "recall_all", "ndcg_any")
_WEEKDAY = re.compile(r"\s*\([^)]*\)\s*")


def longmemeval_date(text: str) -> datetime:
    """``"2023/05/30 (Tue) 23:40"`` → an aware UTC datetime (the weekday is ignored)."""
    clean = " ".join(_WEEKDAY.sub(" ", text).split())
    for pattern in ("%Y/%m/%d %H:%M", "%Y/%m/%d"):
        try:
            return datetime.strptime(clean, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise InvalidInput(f"cannot read a LongMemEval date from {text!r}")


def _check_question(question: dict[str, Any], where: str) -> None:
    """Refuse, before the run starts, a question missing what the run reads."""
    require(question, "question_id", (str, int), where)
    if str(question["question_id"]).endswith("_abs"):
        return
    require(question, "question", str, where)
    longmemeval_date(require(question, "question_date", str, where))
    ids = require(question, "haystack_session_ids", list, where)
    dates = require(question, "haystack_dates", list, where)
    sessions = require(question, "haystack_sessions", list, where)
    if not len(ids) == len(dates) == len(sessions):
        raise InvalidInput(f"{where}: haystack_session_ids, haystack_dates and "
                           "haystack_sessions must be as long as each other")
    for session_id, date, turns in zip(ids, dates, sessions, strict=True):
        if not isinstance(session_id, str) or not isinstance(date, str):
            raise InvalidInput(f"{where}: session ids and dates must be text")
        longmemeval_date(date)
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise InvalidInput(f"{where}: session {session_id!r} is not an array of turns")


def turn_key(session_id: str, turn_index: int) -> str:
    """The key of one turn: turns are numbered from 1 over the whole session (user and
    assistant turns alike), as the LongMemEval code numbers them."""
    return f"{session_id}_{turn_index + 1}"


def _is_answer(turn: dict[str, Any]) -> bool:
    return turn.get("role") == "user" and bool(turn.get("has_answer"))


def gold_keys(question: dict[str, Any], granularity: Granularity) -> set[str]:
    """The keys a search should find for ``question`` at this granularity."""
    gold: set[str] = set()
    for session_id, turns in zip(question["haystack_session_ids"],
                                 question["haystack_sessions"], strict=True):
        if "answer" not in session_id:
            continue
        if granularity == "session":
            if any(_is_answer(turn) for turn in turns):
                gold.add(session_id)
        else:
            gold.update(turn_key(session_id, i) for i, turn in enumerate(turns)
                        if _is_answer(turn))
    return gold


def _dcg(relevances: Sequence[int]) -> float:
    return sum(rel if rank == 1 else rel / math.log2(rank)
               for rank, rel in enumerate(relevances, start=1))


def score_ranking(ranked: Sequence[str], gold: set[str], ks: Sequence[int]) -> dict[str, float]:
    """``recall_any@k``, ``recall_all@k`` and ``ndcg_any@k`` of one ranking (keys best
    first; repeats after the first are dropped) for every k."""
    keys = list(dict.fromkeys(ranked))
    scores: dict[str, float] = {}
    for k in ks:
        top = keys[:k]
        found = gold.intersection(top)
        ideal = _dcg([1] * min(k, len(gold)))
        scores[f"recall_any@{k}"] = float(bool(found))
        scores[f"recall_all@{k}"] = float(bool(gold) and found == gold)
        scores[f"ndcg_any@{k}"] = _dcg([int(key in gold) for key in top]) / ideal if ideal else 0.0
    return scores


def add_haystack(handle: UserMemory, question: dict[str, Any], granularity: Granularity) -> None:
    """Add the question's haystack: user turns only, each session at its date."""
    for session_id, date_text, turns in zip(
            question["haystack_session_ids"], question["haystack_dates"],
            question["haystack_sessions"], strict=True):
        date = longmemeval_date(date_text)
        user_turns = [(i, str(t.get("content") or "")) for i, t in enumerate(turns)
                      if t.get("role") == "user" and str(t.get("content") or "").strip()]
        if not user_turns:
            continue
        if granularity == "session":
            batch = [{"role": "user", "content": "\n".join(text for _, text in user_turns),
                      "at": date, "metadata": {"key": session_id}}]
        else:
            batch = [{"role": "user", "content": text, "at": date + timedelta(seconds=i),
                      "metadata": {"key": turn_key(session_id, i)}} for i, text in user_turns]
        handle.add_turns(batch, session_id=session_id)


def run_longmemeval(
    data: Path,
    *,
    granularity: Granularity = "session",
    ks: Sequence[int] = (1, 3, 5, 10, 30, 50),
    mode: str = "hybrid",
    embedder: Any = "default",
    quiet: bool = False,
    limit_questions: int | None = None,
) -> dict[str, Any]:
    """Run the benchmark on a LongMemEval-format file and return the result object.

    ``limit_questions`` keeps the first n entries of the file (before any are skipped).
    """
    if granularity not in ("session", "turn"):
        raise InvalidInput(f"granularity must be 'session' or 'turn', not {granularity!r}")
    questions = read_entries(data, "LongMemEval")[:limit_questions]
    for number, question in enumerate(questions):
        _check_question(question, f"{data}: question {number}")
    clock = ManualClock()
    top = max(ks)
    rows: list[tuple[str, dict[str, float]]] = []
    latencies: list[float] = []
    ingest_s = 0.0
    skipped = {"abstention": 0, "no_gold": 0}
    with tempfile.TemporaryDirectory(prefix="ledgermem-longmemeval-") as folder:
        memory = Memory.open(Path(folder) / "longmemeval.db", clock=clock,
                             embedder=None if mode == "keyword" else embedder,
                             search=SearchOptions(mode=mode))  # type: ignore[arg-type]
        try:
            with progress(quiet) as bar:
                task = bar.add_task(f"LongMemEval ({granularity})", total=len(questions))
                for question in questions:
                    bar.advance(task)
                    question_id = str(question["question_id"])
                    if question_id.endswith("_abs"):
                        skipped["abstention"] += 1
                        continue
                    gold = gold_keys(question, granularity)
                    if not gold:
                        skipped["no_gold"] += 1
                        continue
                    clock.now = longmemeval_date(question["question_date"])
                    handle = memory.for_user(question_id)
                    started = time.perf_counter()
                    add_haystack(handle, question, granularity)
                    memory.flush()
                    ingest_s += time.perf_counter() - started
                    started = time.perf_counter()
                    hits = handle.search_conversations(question["question"], limit=top)
                    latencies.append((time.perf_counter() - started) * 1000)
                    ranked = [str(h.turn.metadata.get("key")) for h in hits if h.turn]
                    rows.append((str(question.get("question_type", "unknown")),
                                 score_ranking(ranked, gold, ks)))
        finally:
            memory.close()
    return _summary(rows, ks, granularity, mode, skipped, latencies, ingest_s)


def _summary(rows: list[tuple[str, dict[str, float]]], ks: Sequence[int], granularity: str,
             mode: str, skipped: dict[str, int], latencies: list[float], ingest_s: float
             ) -> dict[str, Any]:
    names = [f"{metric}@{k}" for k in ks for metric in METRICS]

    def means(group: list[dict[str, float]]) -> dict[str, float]:
        return {name: round(sum(r[name] for r in group) / len(group), 4) if group else 0.0
                for name in names}

    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for question_type, scores in rows:
        groups[question_type].append(scores)
    return {
        "benchmark": "longmemeval", "granularity": granularity, "mode": mode,
        "questions": len(rows), "skipped_abstention": skipped["abstention"],
        "skipped_no_gold": skipped["no_gold"], **means([scores for _, scores in rows]),
        "by_type": {name: {"questions": len(group), **means(group)}
                    for name, group in sorted(groups.items())},
        "latency_ms": percentiles(latencies), "ingest_s": round(ingest_s, 2),
    }
