"""LongMemEval benchmark: gold rules, skipping, metrics checked against hand computation.

``tests/data/longmemeval_tiny.json`` holds six questions, all sessions on one date so
recency cannot reorder hits. With keyword-only search the rankings are:

    q1  (single-session-user)  answer_q1_a, q1_noise_b           turn: a_1, a_3, noise_b_1
    q2  (multi-session)        q2_noise_a, answer_q2_a, answer_q2_b, answer_q2_c
    q3_abs                     skipped: abstention
    q4  (temporal-reasoning)   skipped: its answer session has no has_answer turn
    q5  (knowledge-update)     q5_noise_a (the gold shares no word with the question)
    q6  (single-session-user)  q6_noise_a, answer_q6_a

q2's gold is answer_q2_a and answer_q2_b (answer_q2_c has "answer" in its id but no
has_answer turn). At turn level q1's session has two gold turns (1 and 3).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ledgermem import InvalidInput, Memory
from ledgermem.benchmarks.longmemeval import (
    add_haystack,
    gold_keys,
    longmemeval_date,
    run_longmemeval,
    score_ranking,
)
from ledgermem.testing import HashEmbedder

TINY = Path(__file__).parent / "data" / "longmemeval_tiny.json"
KS = (1, 2, 3, 5)
LOG3 = 1 / math.log2(3)  # the paper's DCG weight of rank 3


def run(granularity: str = "session", **options: Any) -> dict[str, Any]:
    options.setdefault("ks", KS)
    return run_longmemeval(TINY, granularity=granularity,  # type: ignore[arg-type]
                           mode=options.pop("mode", "keyword"),
                           embedder=options.pop("embedder", None), quiet=True, **options)


def metrics(result: dict[str, Any], ks: tuple[int, ...] = KS) -> dict[str, float]:
    return {f"{m}@{k}": result[f"{m}@{k}"] for k in ks
            for m in ("recall_any", "recall_all", "ndcg_any")}


Rows = Mapping[int, Sequence[float]]
"""``{k: (recall_any, recall_all, ndcg_any)}`` for one question or a mean."""


def at(values: Rows) -> dict[str, Any]:
    """``{k: (recall_any, recall_all, ndcg_any)}`` → the flat metric names."""
    return {f"{m}@{k}": pytest.approx(v, abs=1e-4)
            for k, row in values.items()
            for m, v in zip(("recall_any", "recall_all", "ndcg_any"), row, strict=True)}


# scoring ----------------------------------------------------------------------------
def test_score_ranking_by_hand() -> None:
    scores = score_ranking(["n1", "g1", "n2", "g2", "n3"], {"g1", "g2"}, (1, 2, 3, 4, 5))
    # DCG: rank 1 weighs 1, rank r ≥ 2 weighs 1/log2(r). Ideal for two gold: 1 + 1 = 2.
    assert scores == at({
        1: (0, 0, 0),
        2: (1, 0, 1 / 2),
        3: (1, 0, 1 / 2),
        4: (1, 1, (1 + 1 / 2) / 2),
        5: (1, 1, (1 + 1 / 2) / 2),
    })


def test_score_ranking_uses_the_papers_dcg_where_rank_two_counts_fully() -> None:
    # The LongMemEval code's DCG is rel1 + Σ_{i≥2} rel_i / log2(i): one gold hit at rank
    # 2 scores 1.0 (textbook DCG, 1/log2(i+1), would give 0.631), at rank 3 1/log2(3).
    assert score_ranking(["n", "g"], {"g"}, (2,))["ndcg_any@2"] == pytest.approx(1.0)
    assert score_ranking(["n", "m", "g"], {"g"}, (3,))["ndcg_any@3"] == pytest.approx(LOG3)


def test_score_ranking_drops_repeated_keys_before_cutting() -> None:
    scores = score_ranking(["n", "n", "n", "g"], {"g"}, (2,))
    assert scores["recall_any@2"] == 1.0
    assert score_ranking([], {"g"}, (1,)) == {"recall_any@1": 0.0, "recall_all@1": 0.0,
                                              "ndcg_any@1": 0.0}


# gold and indexing rules --------------------------------------------------------------
def question(sessions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"question_id": "x", "question_type": "t", "question": "?",
            "question_date": "2023/05/30 (Tue) 23:40",
            "haystack_session_ids": list(sessions),
            "haystack_dates": ["2023/05/20 (Sat) 10:00", "2023/05/21 (Sun) 08:05"][
                :len(sessions)],
            "haystack_sessions": list(sessions.values()), "answer_session_ids": []}


def test_gold_needs_answer_in_the_session_id_and_a_user_turn_with_has_answer() -> None:
    q = question({
        "answer_1": [{"role": "assistant", "content": "a", "has_answer": True},
                     {"role": "user", "content": "b", "has_answer": True},
                     {"role": "user", "content": "c", "has_answer": False}],
        "noise_1": [{"role": "user", "content": "d", "has_answer": True}],
    })
    assert gold_keys(q, "session") == {"answer_1"}
    assert gold_keys(q, "turn") == {"answer_1_2"}  # turns count from 1, assistant included
    only_assistant = question({"answer_1": [{"role": "assistant", "content": "a",
                                             "has_answer": True}]})
    assert gold_keys(only_assistant, "session") == gold_keys(only_assistant, "turn") == set()


def test_add_haystack_indexes_user_turns_only_at_their_session_dates(tmp_path: Path) -> None:
    q = question({
        "answer_1": [{"role": "user", "content": "first"},
                     {"role": "assistant", "content": "reply"},
                     {"role": "user", "content": "second"}],
        "noise_1": [{"role": "assistant", "content": "only the assistant"},
                    {"role": "user", "content": "   "}],
    })
    with Memory.open(tmp_path / "m.db", embedder=None) as memory:
        sessions = memory.for_user("sessions")
        add_haystack(sessions, q, "session")
        turns = sessions.recent_conversations(limit=10)
        assert [(t.role, t.content, t.metadata, t.session_id, t.ts) for t in turns] == [
            ("user", "first\nsecond", {"key": "answer_1"}, "answer_1",
             "2023-05-20T10:00:00.000000+00:00")]
        by_turn = memory.for_user("turns")
        add_haystack(by_turn, q, "turn")
        turns = by_turn.recent_conversations(limit=10)[::-1]
        assert [(t.content, t.metadata["key"], t.ts) for t in turns] == [
            ("first", "answer_1_1", "2023-05-20T10:00:00.000000+00:00"),
            ("second", "answer_1_3", "2023-05-20T10:00:02.000000+00:00")]


def test_longmemeval_date() -> None:
    assert longmemeval_date("2023/05/30 (Tue) 23:40") == datetime(2023, 5, 30, 23, 40,
                                                                   tzinfo=UTC)
    assert longmemeval_date("2023/01/02") == datetime(2023, 1, 2, tzinfo=UTC)
    with pytest.raises(InvalidInput):
        longmemeval_date("30 May 2023")


# end to end -------------------------------------------------------------------------
def test_session_granularity_matches_hand_computed_metrics() -> None:
    result = run("session")
    assert (result["benchmark"], result["granularity"], result["questions"],
            result["skipped_abstention"], result["skipped_no_gold"]) == (
        "longmemeval", "session", 4, 1, 1)
    q1 = {k: (1, 1, 1) for k in KS}
    q6 = {1: (0, 0, 0), 2: (1, 1, 1), 3: (1, 1, 1), 5: (1, 1, 1)}
    # gold at ranks 2 and 3: DCG@3 = 1 + 1/log2(3), ideal 2
    q2 = {1: (0, 0, 0), 2: (1, 0, 1 / 2), 3: (1, 1, (1 + LOG3) / 2), 5: (1, 1, (1 + LOG3) / 2)}
    q5 = {k: (0, 0, 0) for k in KS}
    assert metrics(result) == at(mean_of(q1, q2, q5, q6))
    assert metrics(result) == at({1: (0.25, 0.25, 0.25), 2: (0.75, 0.5, 0.625),
                                  3: (0.75, 0.75, 0.7039), 5: (0.75, 0.75, 0.7039)})
    assert sorted(result["by_type"]) == ["knowledge-update", "multi-session",
                                         "single-session-user"]
    assert result["by_type"]["single-session-user"] == {"questions": 2,
                                                        **at(mean_of(q1, q6))}
    assert result["by_type"]["multi-session"] == {"questions": 1, **at(q2)}
    assert result["by_type"]["knowledge-update"] == {"questions": 1, **at(q5)}
    assert set(result["latency_ms"]) >= {"p50", "p95"}
    assert result["ingest_s"] >= 0


def test_turn_granularity_needs_every_gold_turn_for_recall_all() -> None:
    result = run("turn")
    assert (result["granularity"], result["questions"], result["skipped_abstention"],
            result["skipped_no_gold"]) == ("turn", 4, 1, 1)
    # q1 now has two gold turns ranked 1 and 2: recall_all@1 is 0 where it was 1.
    q1 = {1: (1, 0, 1), 2: (1, 1, 1), 3: (1, 1, 1), 5: (1, 1, 1)}
    q6 = {1: (0, 0, 0), 2: (1, 1, 1), 3: (1, 1, 1), 5: (1, 1, 1)}
    q2 = {1: (0, 0, 0), 2: (1, 0, 1 / 2), 3: (1, 1, (1 + LOG3) / 2), 5: (1, 1, (1 + LOG3) / 2)}
    q5 = {k: (0, 0, 0) for k in KS}
    assert metrics(result) == at(mean_of(q1, q2, q5, q6))
    assert result["recall_all@1"] == 0.0
    assert result["by_type"]["single-session-user"] == {"questions": 2,
                                                        **at(mean_of(q1, q6))}


def test_hybrid_with_an_embedder_finds_every_gold_key_in_a_small_haystack() -> None:
    # Vector search ranks every entry of a scope, so with k above the haystack size all
    # gold is found, even q5's, which shares no word with its question.
    result = run("session", mode="hybrid", embedder=HashEmbedder(), ks=(1, 50))
    assert (result["recall_any@50"], result["recall_all@50"]) == (1.0, 1.0)
    keyword = run("session", ks=(50,))
    assert (keyword["recall_any@50"], keyword["recall_all@50"]) == (0.75, 0.75)


def test_default_cutoffs_and_limit_questions() -> None:
    result = run("session", ks=(1, 3, 5, 10, 30, 50), limit_questions=3)
    assert (result["questions"], result["skipped_abstention"], result["skipped_no_gold"]) == (
        2, 1, 0)
    for k in (1, 3, 5, 10, 30, 50):
        assert {f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}"} <= set(result)
    defaults = run_longmemeval(TINY, mode="keyword", embedder=None, quiet=True)
    assert "ndcg_any@50" in defaults and defaults["granularity"] == "session"
    with pytest.raises(InvalidInput):
        run("sentence")


def test_an_empty_file_gives_zeros(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([]))
    result = run_longmemeval(empty, mode="keyword", embedder=None, quiet=True, ks=(5,))
    assert (result["questions"], result["recall_any@5"], result["by_type"]) == (0, 0.0, {})


def mean_of(*rows: Rows) -> Rows:
    return {k: tuple(sum(r[k][i] for r in rows) / len(rows) for i in range(3))
            for k in rows[0]}
