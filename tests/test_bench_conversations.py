"""The conversation-search benchmark on a small SQLite store: the turns it writes carry
vectors, every kind of question is timed, and each question's time phrase names a
window that holds the turn its words came from."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from rich.progress import Progress

from bench import conversations
from bench.stores import Stores
from ledgermem import Memory
from ledgermem.benchmarks.scale import Corpus
from ledgermem.memory import open_store
from ledgermem.providers.embedders import embedder_from_name
from ledgermem.retrieval.when import find_time_window


def test_every_kind_of_question_is_timed(tmp_path: Path) -> None:
    run = conversations.measure_conversations(
        Stores("sqlite", tmp_path), turns=250, queries=3, embedder_name="minilm", quiet=True)
    assert run["turns"] == 250 and run["backend"] == "sqlite"
    assert set(run["latency_ms"]) == set(conversations.KINDS)
    assert all(figures["p50"] > 0 for figures in run["latency_ms"].values())


def test_the_turns_have_vectors_and_each_phrase_names_their_time(tmp_path: Path) -> None:
    embedder = embedder_from_name("minilm")
    now = datetime(2026, 11, 28, 9, tzinfo=UTC)
    rng = np.random.default_rng(1)
    with Memory(open_store(str(tmp_path / "c.db")), embedder=None) as memory, \
            Progress(disable=True) as bar:
        turns = conversations._fill(memory, Corpus(rng), rng, 230, embedder, now, bar)
        assert memory.store.counts(conversations.USER)["turns"] == 230
        assert memory.store.user_counts()[conversations.USER]["vectors"] == 230
    assert len({turn.session_id for turn in turns}) == 3  # sessions of 100
    stamps = [datetime.fromisoformat(turn.ts) for turn in turns]
    assert stamps == sorted(stamps) and stamps[0].year == 2023 and stamps[-1] < now
    for words, at in conversations._questions(rng, turns, 20):
        assert words and 2 <= len(words.split()) <= 4
        assert find_time_window(words, now) is None
        for kind, said in conversations.KINDS.items():
            if kind == "no time":
                continue
            window = find_time_window(words + said(at), now)
            assert window is not None, kind
            assert window.start is not None and window.end is not None, kind
            assert window.start <= at < window.end, kind
