"""What the async API's tests share: every test runs on asyncio and on trio (anyio's two
backends; trio where installed), over a memory with no embedder (no background
embedding thread)."""

from __future__ import annotations

import importlib.util

import pytest

from ledgermem import Memory

TRIO = pytest.param("trio", marks=pytest.mark.skipif(
    importlib.util.find_spec("trio") is None, reason="trio is not installed"))


@pytest.fixture(params=["asyncio", TRIO])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
def memory(mem: Memory) -> Memory:
    """The suite's ``mem`` (tests/conftest.py), by the name these tests give it."""
    return mem
