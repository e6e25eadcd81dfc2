"""Process entry points for the crash test (spawned children import this module)."""

from __future__ import annotations

from ledgermem import ExtractionOptions, Memory, OpenAICompatibleLLM, SQLiteStore


def extract_everything(path: str, url: str) -> None:
    """Open the file with an LLM and extract the whole queue in this process."""
    llm = OpenAICompatibleLLM("scripted-model", url, timeout=60, retries=0)
    memory = Memory(SQLiteStore(path), llm=llm,
                    extraction=ExtractionOptions(claim_seconds=1.0, background=False))
    try:
        memory.flush()
    finally:
        memory.close()
