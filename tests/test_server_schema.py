"""The OpenAPI document against the app, with schemathesis: requests generated from
the document (valid ones and invalid ones) with a valid user key, over the in-process
ASGI app. No answer may be a 5xx, and every answer must be one the document lists, in
its media type, with a body that matches its schema.

``positive_data_acceptance`` is left out on purpose: a schema-valid request may still
be refused with 422 by the library (a date in words it cannot read, a reserved event
kind, text with NUL), which the document cannot express in JSON Schema; the checks
kept here catch the document lying about what the server does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import checks as builtin
from schemathesis.specs.openapi import checks as openapi_checks

from ledgermem import Memory
from ledgermem.aio import AsyncMemory
from ledgermem.server.app import ServerSettings, create_app
from ledgermem.server.keys import KeyRing
from tests.support import FakeClock

CHECKS = (
    builtin.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.negative_data_rejection,
    openapi_checks.missing_required_header,
    openapi_checks.ignored_auth,
)


EXAMPLES = 4
"""Examples per operation and generation mode (valid, invalid): about 400 requests."""


@pytest.fixture
def served(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Any, str]]:
    """The app's schema (loaded through the app) and a valid user key."""
    memory = Memory.open(tmp_path / "m.db", embedder=None, clock=clock)
    keys = KeyRing(memory.store)
    keys.ensure_admin()
    key, _ = keys.create("alice")
    # Something to find, so that routes with ids and lists answer with bodies too.
    alice = memory.for_user("alice")
    alice.remember("Alice drinks green tea", entity="drink:tea", due_at="in 2 days")
    alice.add_turns([{"role": "user", "content": "hello there"}], session_id="alice:web")
    alice.log_tool_call("weather", {"city": "Porto"}, error="timeout")
    alice.record("agent.spoke", {"text": "good morning"}, agent_id="miller",
                 visibility="global")
    app = create_app(AsyncMemory.from_sync(memory, threads=2), keys,
                     settings=ServerSettings(rate_limit=None, dashboard_dir=tmp_path))
    yield schemathesis.openapi.from_asgi("/openapi.json", app), key
    memory.close()


def _exercise(operation: Any, mode: GenerationMode, key: str) -> None:
    @given(operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    def run(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=CHECKS)

    run()


def test_the_api_keeps_to_its_openapi_document(served: tuple[Any, str]) -> None:
    schema, key = served
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 50
    failures = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _exercise(operation, mode, key)
            except Unsatisfiable:
                continue  # nothing invalid can be said to this operation
            except Exception as exc:  # one line per operation and mode, all reported
                failures.append(f"{operation.label} ({mode.value}): {exc}"[:2000])
    assert failures == [], "\n\n".join(failures)
