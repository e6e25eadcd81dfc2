"""Asking the LLM from the pipeline: failures become values, every call becomes an event.

The pipeline never lets a model's failure escape into the conversation: ``ask``
returns the answer or the error, plus what each call cost, and the caller writes those
costs to the ledger as ``llm.called`` events in the same transaction as its result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Generic, TypeVar

from pydantic import BaseModel

from ..domain.events import Kind, new_event
from ..errors import ProviderError
from ..providers.llm import LLM, LLMCall, recording
from ..types import Event, Scope

__all__ = ["Answer", "ask", "llm_events"]

log = logging.getLogger("ledgermem.llm")

T = TypeVar("T", bound=BaseModel)


@dataclass
class Answer(Generic[T]):
    """An LLM's validated answer, or why there is none, and what the calls cost."""

    value: T | None
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)


def ask(llm: LLM, messages: Sequence[Mapping[str, str]], schema: type[T], *,
        purpose: str) -> Answer[T]:
    """Call ``llm`` and never raise for its failures (they are logged and returned)."""
    calls: list[LLMCall] = []
    started = time.perf_counter()
    value: T | None = None
    error: str | None = None
    try:
        with recording(calls.append):
            value = llm.complete(messages, schema, purpose=purpose)
    except ProviderError as exc:
        error = str(exc)
    except Exception as exc:  # a custom LLM's own failure must not break the pipeline
        error = f"{type(exc).__name__}: {exc}"
        log.exception("%s call failed", purpose)
    if not calls:  # an LLM that does not report its calls: account for it here
        calls.append(LLMCall(purpose=purpose, model=str(getattr(llm, "model", "?")),
                             tokens_in=0, tokens_out=0,
                             latency_ms=round((time.perf_counter() - started) * 1000, 3),
                             outcome="error" if error else "ok", error=error))
    return Answer(value, error, calls)


def llm_events(scope: Scope, ts: str, calls: Sequence[LLMCall]) -> list[Event]:
    """One ``llm.called`` event per call, for the ledger (and ``stats``)."""
    return [new_event(scope, ts, Kind.LLM_CALLED, {k: v for k, v in asdict(call).items()
                                                   if v is not None}) for call in calls]
