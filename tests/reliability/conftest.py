"""Fixtures of the reliability tests: fresh stores of the test's backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.stores import Stores


@pytest.fixture
def stores(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stores]:
    """Makes empty stores of the test's backend: files under ``tmp_path``, or schemas
    of the session's PostgreSQL database (dropped after the test)."""
    where = request.getfixturevalue("pg_database") if backend == "postgres" else tmp_path
    made = Stores("postgres" if backend == "postgres" else "sqlite", where)
    yield made
    made.close()
