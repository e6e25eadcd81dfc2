"""Sensitive items and secrets.

- A sensitive item is never in the frozen prompt prefix, the profile (raw, or what the
  profile's LLM call is sent and answers), the per-turn block, nor any log line;
  asked for (``search``, ``get``), it is returned.
- The LLM key given through the settings (``LEDGERMEM_LLM_API_KEY``) reaches the LLM
  server as a bearer token and nowhere else: not in the settings' or the client's
  repr, the errors of failed calls (HTTP 400 / 401 / 500 after retries, invalid JSON),
  the log (tracebacks included), the ledger, an export, the database file, nor the
  CLI's output.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ledgermem import LedgermemError, Memory, OpenAICompatibleLLM, ProviderError
from ledgermem.agent.prompt import profile, system_prefix, turn_block
from ledgermem.cli import main
from ledgermem.config import load_settings, memory_options
from ledgermem.pipeline.extraction import ExtractionOptions
from ledgermem.testing import Reply, ScriptedLLMServer
from ledgermem.transfer import export_jsonl
from tests.support import FakeClock, raw

SECRET = "zzdiagnosisqq"
LONG = ("and that is something I would really like you to keep in mind for all of our "
        "future conversations together")


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every record's message, arguments and formatted traceback."""
    formatter = logging.Formatter()
    return "\n".join(
        f"{record.getMessage()} {record.args!r} "
        f"{formatter.formatException(record.exc_info) if record.exc_info else ''}"
        for record in caplog.records)


def test_sensitive_items_stay_out_of_the_prefix_the_profile_and_the_logs(
        mem: Memory, clock: FakeClock, server: ScriptedLLMServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice = mem.for_user("alice")
    secret = alice.remember(f"Diagnosis {SECRET} confirmed", "fact", sensitive=True)
    alice.remember(f"Prefers to keep {SECRET} private", "preference", sensitive=True)
    alice.remember(f"Appointment about {SECRET}", "reminder", sensitive=True,
                   due_at=clock.now.isoformat())
    alice.remember("Prefers green tea", "preference")
    alice.remember("Works at the port authority", "fact")

    assert SECRET not in system_prefix(alice)
    raw_profile = profile(alice)
    assert raw_profile.source == "raw" and SECRET not in repr(raw_profile)
    assert SECRET not in turn_block(alice)
    server.reply({"bullets": ["Prefers green tea", "Works at the port authority"]})
    llm = OpenAICompatibleLLM("scripted-model", server.url, retries=0)
    distilled = profile(alice, llm=llm)
    assert distilled.source == "llm" and SECRET not in repr(distilled)
    assert all(SECRET not in request.text for request in server.requests)

    # asked for, it is there
    assert secret.id in [hit.id for hit in alice.search(SECRET, sensitive=True)]
    assert alice.get(secret.id).sensitive
    mem.flush()
    assert caplog.records, "nothing was logged: the check below would prove nothing"
    assert SECRET not in everything_logged(caplog)


@pytest.fixture
def failing_llm() -> ScriptedLLMServer:
    """A server that fails every way a provider can: client errors, server errors
    past the retries, unreadable answers."""
    return ScriptedLLMServer(
        401, Reply(status=400, content="bad request"), 500, 500, 500, 500,
        "not json at all", "still not json", {"operations": "no list"}, {"bullets": 7},
        {"bullets": 7}, default=503)


@pytest.mark.sqlite_only  # reason: reads the database file's bytes; the key never reaches
# the store layer, whichever it is
def test_the_llm_key_never_reaches_logs_errors_the_ledger_or_an_export(
        tmp_path: Path, failing_llm: ScriptedLLMServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = f"sk-live-{uuid.uuid4().hex}"
    env = {"LEDGERMEM_LLM_BASE_URL": failing_llm.url, "LEDGERMEM_LLM_MODEL": "scripted",
           "LEDGERMEM_LLM_API_KEY": key}
    settings = load_settings(None, env)
    assert key not in repr(settings) and key not in str(settings.llm)
    options = memory_options(settings)
    llm = options["llm"]
    llm.client.backoff = 0.01  # the retries, without their waits
    assert key not in repr(llm)
    path = tmp_path / "m.db"
    errors: list[str] = []
    with failing_llm, Memory.open(path, embedder=None, clock=FakeClock(),
                                  extraction=ExtractionOptions(background=False),
                                  **options) as memory:
        alice = memory.for_user("alice")
        for n in range(4):
            alice.add_turns([{"role": "user", "content": f"Note {n} {LONG}"}], infer=True)
            memory.flush()
        alice.remember("Prefers green tea", "preference")
        errors.append(repr(profile(alice)))
        for _ in range(2):
            try:
                llm.complete([{"role": "user", "content": "hi"}], dict_schema(), purpose="test")
            except ProviderError as exc:
                errors += [str(exc), repr(exc)]
        try:
            memory.for_user("alice").maintain()
        except LedgermemError as exc:
            errors.append(repr(exc))
        ledger = json.dumps([e.payload for e in memory.store.events("alice")])
        out = io.StringIO()
        export_jsonl(memory.store, out)
        assert memory.for_user("alice").llm_usage(), "no LLM call was recorded"
        sent = [r.headers.get("Authorization") for r in failing_llm.requests]
    assert sent and all(header == f"Bearer {key}" for header in sent)  # the key is used
    assert any("401" in e or "500" in e or "503" in e for e in errors), errors
    for where, text in (("errors", "\n".join(errors)), ("logs", everything_logged(caplog)),
                        ("ledger", ledger), ("export", out.getvalue()),
                        ("database file", database_bytes(path))):
        assert key not in text, f"the key is in the {where}"


def dict_schema() -> type:
    from pydantic import BaseModel

    class Answer(BaseModel):
        text: str

    return Answer


def database_bytes(path: Path) -> str:
    with raw(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return "".join(p.read_bytes().decode("latin-1") for p in path.parent.glob(path.name + "*"))


@pytest.mark.sqlite_only  # reason: as above
def test_the_cli_never_prints_the_llm_key(tmp_path: Path,
                                          failing_llm: ScriptedLLMServer) -> None:
    key = f"sk-live-{uuid.uuid4().hex}"
    env = {"LEDGERMEM_LLM_BASE_URL": failing_llm.url, "LEDGERMEM_LLM_MODEL": "scripted",
           "LEDGERMEM_LLM_API_KEY": key}
    db = str(tmp_path / "m.db")
    with failing_llm:
        for args in (["add-turn", f"Note {LONG}", "--infer"], ["maintain"],
                     ["status", "--json"], ["status"]):
            result = CliRunner().invoke(main, ["--db", db, "--embedder", "none", *args],
                                        env=env)
            assert key not in result.output, args
            assert "Traceback" not in result.output, args
        assert any(r.headers.get("Authorization") == f"Bearer {key}"
                   for r in failing_llm.requests)


def test_a_server_echoing_the_key_in_an_error_does_not_leak_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = f"sk-live-{uuid.uuid4().hex}"

    def echo(request: httpx.Request) -> httpx.Response:  # what such a proxy answers
        return httpx.Response(401, text="invalid key in Authorization: "
                                         + request.headers["Authorization"])

    llm = OpenAICompatibleLLM("scripted", "http://llm.invalid/v1", api_key=key, retries=0,
                              transport=httpx.MockTransport(echo))
    with Memory.open(tmp_path / "m.db", embedder=None, llm=llm,
                     extraction=ExtractionOptions(background=False)) as memory:
        alice = memory.for_user("alice")
        alice.add_turns([{"role": "user", "content": f"Note {LONG}"}], infer=True)
        memory.flush()
        ledger = json.dumps([e.payload for e in memory.store.events("alice")])
    assert "invalid key" in ledger  # the failure was recorded
    assert key not in everything_logged(caplog)
    assert key not in ledger
