"""``ledgermem doctor``: what works with the configured model, found at set-up time.

One small extraction is sent to the configured OpenAI-compatible endpoint, the way the
pipeline sends it, and the answer says whether the endpoint is reachable, which model
answered, which structured-output mode the server takes (``json_schema``,
``json_object`` or none: ``json_mode="auto"`` settles on it), how long a small
extraction takes, and how many of the operations the model proposed pass the guards.
The embedding model in use is reported beside it. Without an LLM configured the report
says so, and what still works.

The verdict is one of three: ``ok``; ``misconfigured`` (the settings are invalid, the
endpoint cannot be reached, refuses the key, or knows no such model or path: exit code
2 in the CLI); ``degraded`` (the endpoint answers, but the model gave no usable
extraction: exit code 1).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from .config import Settings
from .errors import ConfigError, LedgermemError, NotFound, ProviderError
from .memory import open_store
from .pipeline.guards import Said, check_fact
from .pipeline.prompts import ExtractionResult, extraction_messages
from .providers.embedders import DEFAULT_EMBEDDER
from .providers.llm import OpenAICompatibleLLM
from .providers.openai import Refused
from .types import Turn

__all__ = ["PROBE_TURN", "LLMProbe", "Report", "diagnose", "probe_any", "probe_llm", "render"]

PROBE_TURN = ("I'm allergic to penicillin, and my sister Ana is a nurse in Porto. "
              "Please keep that in mind when you plan my trip to see her next month.")
"""The user turn of the probe extraction: two durable facts a model should find."""

Verdict = Literal["ok", "degraded", "misconfigured", "no llm"]


@dataclass
class LLMProbe:
    """What one probe extraction found out about the configured endpoint."""

    configured: bool
    base_url: str | None = None
    model: str | None = None
    reachable: bool | None = None
    served_model: str | None = None
    structured_output: str | None = None
    refused_modes: list[str] = field(default_factory=list)
    extraction_ms: float | None = None
    operations: int | None = None
    passed_guards: int | None = None
    verdict: Verdict = "no llm"
    problem: str | None = None


@dataclass
class Report:
    """The whole diagnosis: the LLM probe and the embedding model in use."""

    llm: LLMProbe
    embedder: str
    embedder_from: str
    verdict: Verdict

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data."""
        return asdict(self)


def probe_llm(llm: OpenAICompatibleLLM | None, *, now: str = "2026-01-05T09:00:00+00:00"
              ) -> LLMProbe:
    """Send one small extraction to ``llm`` and report what happened (never raises for
    the endpoint's failures: they are the report)."""
    if llm is None:
        return LLMProbe(configured=False, problem=(
            "no LLM configured: remember, search and conversations work, extraction, "
            "reconciliation and consolidation are skipped (set llm.base_url and llm.model, "
            "or LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL)"))
    probe = LLMProbe(configured=True, base_url=llm.client.base_url, model=llm.model)
    turn = Turn(id="probe-1", user_id="doctor", session_id="doctor", role="user",
                content=PROBE_TURN, ts=now)
    messages = extraction_messages([turn], {}, instructions=None, now=now)
    started = time.perf_counter()
    answer: ExtractionResult | None = None
    try:
        answer = llm.complete(messages, ExtractionResult, purpose="doctor")
    except ProviderError as exc:
        failure = exc
    probe.extraction_ms = round((time.perf_counter() - started) * 1000, 1)
    probe.refused_modes = list(llm.refusals)
    probe.structured_output = llm.structured_output
    probe.served_model = llm.served_model
    if answer is None:
        _failed(probe, llm, failure)
        return probe
    said = Said([(turn.id, turn.role, turn.content)], messages[0]["content"])
    adds = [op for op in answer.operations if op.op == "ADD"]
    probe.reachable = True
    probe.operations = len(answer.operations)
    probe.passed_guards = sum(check_fact(op.content, op.reason, said).problem is None
                              for op in adds)
    if not probe.passed_guards:
        probe.verdict = "degraded"
        probe.problem = (f"{llm.model} answered, but none of its {len(answer.operations)} "
                         "operation(s) would be stored: extraction with this model keeps "
                         "nothing (try a larger model)")
    else:
        probe.verdict = "ok"
    return probe


def _failed(probe: LLMProbe, llm: OpenAICompatibleLLM, exc: ProviderError) -> None:
    """Fill ``probe`` from the error a probe call ended with."""
    text = str(exc)
    status = exc.status if isinstance(exc, Refused) else _status(text)
    probe.reachable = status is not None or "no valid" in text
    probe.problem = text
    probe.verdict = "misconfigured"
    if status in (401, 403):
        probe.problem = f"{llm.client.base_url} refused the API key (HTTP {status}): " \
                        "set LEDGERMEM_LLM_API_KEY"
    elif status == 404:
        probe.problem = (f"{llm.client.base_url} has no /chat/completions or no model "
                         f"{llm.model!r} (HTTP 404): check llm.base_url (usually ending "
                         "in /v1) and llm.model")
    elif status is None and not probe.reachable:
        probe.structured_output = None  # nothing was settled
        probe.problem = (f"cannot reach {llm.client.base_url}: is the server running, and "
                         f"is the URL right? ({text[-160:]})")
    elif "no valid" in text:
        probe.verdict = "degraded"
        probe.problem = (f"{llm.model} answered, but not with usable JSON: extraction with "
                         f"this model will fail ({text[:200]})")


def _status(text: str) -> int | None:
    """The HTTP status an error message names, if any."""
    marker = "HTTP "
    at = text.rfind(marker)
    digits = text[at + len(marker):at + len(marker) + 3] if at != -1 else ""
    return int(digits) if digits.isdigit() else None


def diagnose(settings: Settings, *, db: str | None, embedder: str | None,
             timeout: float = 60.0, config_error: LedgermemError | None = None) -> Report:
    """Probe the LLM the settings name and find the embedding model in use.

    Args:
        settings: the loaded settings (their ``llm`` block is probed).
        db: the database URL, read (never created) for the embedding model it records.
        embedder: the embedder named on the command line or in the settings, if any.
        timeout: seconds the probe call may take (a small local model can be slow).
        config_error: why the settings could not be loaded, if they could not (then
            nothing is probed: the report says what to fix).
    """
    llm: OpenAICompatibleLLM | None = None
    if config_error is not None:
        probe = LLMProbe(configured=False, verdict="misconfigured",
                         problem=f"the configuration is invalid: {config_error}")
        return Report(probe, *_embedder(db, embedder), verdict="misconfigured")
    if settings.llm.configured:
        assert settings.llm.model is not None and settings.llm.base_url is not None
        try:
            llm = OpenAICompatibleLLM(settings.llm.model, settings.llm.base_url,
                                      api_key=settings.llm.api_key or None, timeout=timeout,
                                      retries=0, validation_retries=0)
        except ConfigError as exc:
            probe = LLMProbe(configured=True, base_url=settings.llm.base_url,
                             model=settings.llm.model, verdict="misconfigured",
                             problem=str(exc))
            return Report(probe, *_embedder(db, embedder), verdict="misconfigured")
    try:
        probe = probe_llm(llm)
    finally:
        if llm is not None:
            llm.close()
    return Report(probe, *_embedder(db, embedder), verdict=probe.verdict)


def _embedder(db: str | None, named: str | None) -> tuple[str, str]:
    """The embedding model in use and where that comes from."""
    if named:
        return named, "--embedder / LEDGERMEM_EMBEDDER / embedder in the config file"
    try:
        store = open_store(db, create=False)
    except (NotFound, LedgermemError, OSError):
        return DEFAULT_EMBEDDER, "the default (no database yet)"
    try:
        recorded = store.get_meta("embedding_model")
    finally:
        store.close()
    if recorded is None:
        return DEFAULT_EMBEDDER, "the default (the database records none yet)"
    return recorded, "the model the database records"


def probe_any(llm: object) -> dict[str, Any]:
    """``probe_llm`` for whatever LLM a ``Memory`` holds, as plain data (a custom
    ``LLM`` that is no ``OpenAICompatibleLLM`` is reported as not probed)."""
    if llm is None or isinstance(llm, OpenAICompatibleLLM):
        return asdict(probe_llm(llm))
    return {"configured": True, "model": getattr(llm, "model", None), "verdict": "ok",
            "problem": "not an OpenAICompatibleLLM: not probed"}


def render(console: Console, report: Report) -> None:
    """The report as a table, the verdict last."""
    table = Table(title="ledgermem doctor")
    table.add_column("check")
    table.add_column("result", overflow="fold")
    probe = report.llm
    if not probe.configured and report.verdict == "no llm":
        table.add_row("LLM", "not configured")
    else:
        table.add_row("endpoint", f"{probe.base_url or '-'}  (model {probe.model or '-'})")
        table.add_row("reachable", {True: "yes", False: "no", None: "-"}[probe.reachable])
        table.add_row("model answering", probe.served_model or "-")
        refused = f" (refused: {'; '.join(probe.refused_modes)})" if probe.refused_modes \
            else ""
        table.add_row("structured output", (probe.structured_output or "-") + refused)
        if probe.extraction_ms is not None:
            table.add_row("small extraction", f"{probe.extraction_ms:.0f} ms")
        if probe.operations is not None:
            table.add_row("operations", f"{probe.operations} proposed, "
                                        f"{probe.passed_guards} new facts pass the guards")
    table.add_row("embedding model", f"{report.embedder}  ({report.embedder_from})")
    table.add_row("verdict", report.verdict + (f": {probe.problem}" if probe.problem else ""))
    console.print(table)
