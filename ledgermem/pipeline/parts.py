"""What the pipeline works with: parts already built, never the ``Memory`` facade.

``Memory`` builds one ``PipelineParts`` and hands it to the extraction worker and to
maintenance; every pipeline function takes it with the scope it writes for. Items are
written through ``writer`` (``domain.writer.ItemWriter``), the same write path the
per-user handle uses; other ledger events are appended to ``store`` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..clock import Clock
from ..domain.writer import ItemWriter
from ..providers.embedders import Embedder
from ..providers.llm import LLM
from ..retrieval.hybrid import Searcher
from ..store.base import Store

__all__ = ["PipelineParts"]


@dataclass(frozen=True)
class PipelineParts:
    """The built parts the pipeline needs.

    Attributes:
        store: the store read and appended to.
        clock: the time source.
        writer: the one write path for knowledge items.
        searcher: finds the items related to new turns (extraction).
        llm: the model asked (None: the LLM steps are skipped).
        embedder: None when there are no vectors (reconciliation compares them).
        embed_pending: embeds every row still waiting for a vector now; returns how many.
        report_skipped: logs, once per step, that a step is skipped and why.
    """

    store: Store
    clock: Clock
    writer: ItemWriter
    searcher: Searcher
    llm: LLM | None
    embedder: Embedder | None
    embed_pending: Callable[[], int]
    report_skipped: Callable[[str, str | None], None]
