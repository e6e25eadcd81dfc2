"""No LLM configured is a normal mode: turns are kept, verbatim writes work, and each
skipped step is reported once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermem import Memory, UserMemory
from tests.pipeline.conftest import open_memory
from tests.pipeline.scripts import LONG, said
from tests.support import FakeClock


@pytest.fixture
def offline(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    memory = open_memory(tmp_path / "offline.db", clock, None)
    yield memory
    memory.close()


def test_conversational_writes_keep_the_turns_and_say_what_was_skipped(
        offline: Memory, caplog: pytest.LogCaptureFixture) -> None:
    alice = offline.for_user("alice")
    with caplog.at_level(logging.INFO, logger="ledgermem"):
        said(alice, "I adopted a greyhound called Pixel " + LONG, "What a lovely name!")
        said(alice, "Pixel loves long walks on the beach " + LONG)
        offline.flush()  # returns: nothing can extract without an LLM
    assert [t.content.split(" ", 2)[:2] for t in alice.session_history()] == [
        ["I", "adopted"], ["What", "a"], ["Pixel", "loves"]]
    assert alice.all_knowledge()["items"] == []
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped == ["extraction skipped: no LLM configured"]  # once, not per write
    status = alice.status()
    assert (status["mode"], status["llm"], status["embedder"]) == ("embedder", None, "hash:64")
    assert status["extraction"] == {"pending": 3, "done": 0, "skipped": 0, "failed": 0}
    assert status["skipped"] == dict.fromkeys(("extraction", "reconcile", "consolidate"),
                                              "no LLM configured")
    assert status["embedding"] == {"pending": 0}


def test_verbatim_writes_search_and_maintenance_work_without_an_llm(
        offline: Memory, clock: FakeClock) -> None:
    alice: UserMemory = offline.for_user("alice")
    item = alice.remember("Prefers green tea", category="preference")
    assert alice.get(item.id).content == "Prefers green tea"
    offline.flush()
    assert [h.id for h in alice.search("green tea")] == [item.id]
    clock.advance(days=40)
    result = alice.maintain()
    assert result["decay"] == {"decayed": 1}
    assert result["reconcile"]["pairs_checked"] == 0
    assert result["consolidate"] == {"consolidated": 0, "extracted_items": 0}
    assert result["skipped"] == {"reconcile": "no LLM configured",
                                 "consolidate": "no LLM configured"}
    assert "llm_calls" not in alice.stats() and alice.stats()["llm"] is None


def test_without_an_embedder_too_the_mode_is_none(tmp_path: Path, clock: FakeClock) -> None:
    with Memory.open(tmp_path / "bare.db", embedder=None, clock=clock) as bare:
        status = bare.for_user("alice").status()
    assert (status["mode"], status["llm"], status["embedder"]) == ("none", None, None)
