"""Extraction against a real OpenAI-compatible endpoint (skipped unless configured).

Set LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (and LEDGERMEM_LLM_API_KEY if the
server needs one), e.g. an Ollama at http://localhost:11434/v1 with qwen2.5:7b.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledgermem import Memory, OpenAICompatibleLLM, SQLiteStore
from ledgermem.testing import HashEmbedder

pytestmark = pytest.mark.skipif(not os.environ.get("LEDGERMEM_LLM_BASE_URL"),
                                reason="set LEDGERMEM_LLM_BASE_URL to run against a real LLM")


def test_extraction_against_a_real_endpoint(tmp_path: Path) -> None:
    llm = OpenAICompatibleLLM(os.environ.get("LEDGERMEM_LLM_MODEL", "gpt-4o-mini"),
                              os.environ["LEDGERMEM_LLM_BASE_URL"],
                              api_key=os.environ.get("LEDGERMEM_LLM_API_KEY"), timeout=120)
    with Memory(SQLiteStore(tmp_path / "real.db"), embedder=HashEmbedder(), llm=llm) as memory:
        alice = memory.for_user("alice")
        alice.add_turns([
            {"role": "user", "content": "Please remember that I am allergic to peanuts, and "
                                        "that my sister Anna lives in Porto. I am visiting "
                                        "her in the first week of July."},
            {"role": "assistant", "content": "Got it, I have noted both."},
        ], infer=True)
        memory.flush()
        items = alice.all_knowledge()["items"]
        status = alice.status()
        stats = alice.stats()
    assert status["extraction"]["done"] == 2, status
    assert items and all(i.source == "llm_extract" for i in items)
    text = " ".join(i.content.lower() for i in items)
    assert "peanut" in text and "anna" in text
    assert stats["llm_calls"]["calls"] >= 1 and stats["llm_calls"]["tokens_in"] > 0
