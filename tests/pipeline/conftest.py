"""Fixtures for the write pipeline: a real SQLite file, a scripted OpenAI-compatible
server on loopback, and a client with small timeouts so failures are fast."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermem import ExtractionOptions, Memory, OpenAICompatibleLLM, SQLiteStore, UserMemory
from ledgermem.testing import HashEmbedder, ScriptedLLMServer
from tests.support import FakeClock


def make_llm(server: ScriptedLLMServer, **options: object) -> OpenAICompatibleLLM:
    """A client for ``server`` that gives up fast: 0.5 s timeout, one HTTP retry after
    10 ms, no second chance for invalid JSON (tests script each answer)."""
    settings: dict[str, object] = {"timeout": 0.5, "retries": 1, "backoff": 0.01,
                                   "validation_retries": 0}
    settings.update(options)
    return OpenAICompatibleLLM("scripted-model", server.url, **settings)  # type: ignore[arg-type]


def open_memory(path: Path, clock: FakeClock, llm: OpenAICompatibleLLM | None,
                **options: object) -> Memory:
    return Memory(SQLiteStore(path), embedder=HashEmbedder(), llm=llm, clock=clock,
                  **options)  # type: ignore[arg-type]


@pytest.fixture
def llm(server: ScriptedLLMServer) -> Iterator[OpenAICompatibleLLM]:
    client = make_llm(server)
    yield client
    client.close()


@pytest.fixture
def mem(tmp_path: Path, clock: FakeClock, llm: OpenAICompatibleLLM) -> Iterator[Memory]:
    memory = open_memory(tmp_path / "m.db", clock, llm,
                         extraction=ExtractionOptions(claim_seconds=5))
    yield memory
    memory.close()


@pytest.fixture
def alice(mem: Memory) -> UserMemory:
    return mem.for_user("alice", session_id="alice:chat")
