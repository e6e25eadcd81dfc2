"""The ``Store`` protocol: what every backend (SQLite, PostgreSQL) implements.

The ledger (``events``) is the truth. ``append`` writes events and, in the same
transaction, applies each one to the views (knowledge, conversations, tool history);
``rebuild`` re-derives every view from the ledger. Reads are always filtered by
``user_id`` inside the store, so no caller can forget to.

Score contract: ``keyword_search_*`` return ``(id, score)`` pairs best first, where a
larger score is better (BM25 on both: FTS5's on SQLite, the same formula in SQL on
PostgreSQL with corpus statistics per user); scores are only
comparable within one call. Ranking across retrievers happens above the store, on
ranks (reciprocal rank fusion), so both backends rank the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..types import Event, Item, ItemQuery, ToolCall, Turn

__all__ = ["Store", "TurnQuery"]

Vector = npt.NDArray[np.float32]
MatchMode = Literal["and", "or"]
Table = Literal["knowledge", "conversations"]


@dataclass(frozen=True)
class TurnQuery:
    """Filters for conversation turns. ``None`` means any."""

    session_id: str | None = None
    time_from: str | None = None
    time_to: str | None = None
    role: str | None = None
    ids: tuple[str, ...] | None = None


@runtime_checkable
class Store(Protocol):
    """Storage backend. Every method is scoped to one ``user_id`` unless it says not."""

    url: str

    # ledger -----------------------------------------------------------------------
    def append(self, events: Sequence[Event]) -> None:
        """Append events and apply them to the views, atomically."""

    def transaction(self) -> AbstractContextManager[None]:
        """Group several ``append`` calls into one atomic write (nests)."""

    def writing_for(self, user_id: str) -> AbstractContextManager[None]:
        """A ``transaction`` in which no other writer changes ``user_id``'s rows, so a
        check read inside it still holds when the write that depends on it lands."""

    def events(
        self,
        user_id: str,
        *,
        subject_id: str | None = None,
        kinds: Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Ledger entries of one user in append order."""

    def redact(self, user_id: str, subject_id: str) -> None:
        """Blank the text of every event about ``subject_id`` (forgetting)."""

    def delete_user(self, user_id: str) -> int:
        """Remove every row of one user, the ledger included. Returns events removed."""

    def rebuild(self) -> None:
        """Re-derive every view and index from the ledger (all users)."""

    # knowledge --------------------------------------------------------------------
    def get_item(self, user_id: str, item_id: str) -> Item | None:
        """One item of this user, or None."""

    def query_items(
        self,
        user_id: str,
        query: ItemQuery,
        *,
        sort: str = "updated_at",
        descending: bool = True,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[list[Item], int]:
        """Items matching the filters, and how many match in all."""

    def keyword_search_items(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Full-text search over knowledge content and entity, best first.

        ``and``: the rows holding every term, by BM25. ``or``: the rows holding some
        term: by BM25 over the terms that are not common (``sql.COMMON_TERM_SHARE``),
        then the newest rows holding a common term (score 0).
        """

    def due_items(self, user_id: str, until: str) -> list[Item]:
        """Active items with ``due_at`` at or before ``until``."""

    # conversations ----------------------------------------------------------------
    def query_turns(
        self, user_id: str, query: TurnQuery, *, descending: bool = False,
        limit: int | None = None,
    ) -> list[Turn]:
        """Turns matching the filters, ordered by time."""

    def keyword_search_turns(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Full-text search over turns (content, speaker, neighbours, day in words);
        modes as ``keyword_search_items``."""

    def sessions(self, user_id: str) -> list[dict[str, Any]]:
        """One row per session: id, turns, first and last timestamps."""

    # tools ------------------------------------------------------------------------
    def query_tool_calls(
        self, user_id: str, *, name: str | None = None, success: bool | None = None,
        since: str | None = None, limit: int | None = None,
    ) -> list[ToolCall]:
        """Logged tool calls, newest first."""

    def tool_stats(self, user_id: str) -> list[dict[str, Any]]:
        """Per tool name: calls, failures, mean duration, last call."""

    # observability ----------------------------------------------------------------
    def counts(self, user_id: str) -> dict[str, Any]:
        """Row counts for ``stats``."""

    def facets(self, user_id: str, column: Literal["entity", "context", "category"]) -> list[
        tuple[str, int]
    ]:
        """Distinct values of a knowledge column with item counts (active items)."""

    def activity(self, user_id: str, since: str) -> list[tuple[str, str, int]]:
        """(day, event kind, count) since a time."""

    def stale_items(self, user_id: str, before: str) -> list[tuple[str, float]]:
        """(id, confidence) of active items unused since ``before``."""

    def prunable(self, user_id: str, before: str, min_confidence: float) -> dict[str, list[str]]:
        """Ids of turns, tool calls and low-confidence items older than ``before``."""

    def user_ids(self) -> list[str]:
        """Every user with at least one event (for maintenance across users)."""

    # moving between stores (any user) ---------------------------------------------
    def ledger(self, after_seq: int, limit: int) -> list[tuple[int, Event]]:
        """(seq, event) of every user's events after ``after_seq``, in ledger order."""

    def stored_embeddings(self, table: Table, after_id: str, limit: int
                          ) -> list[tuple[str, str, Vector, str]]:
        """(id, text it was made from, vector, model) of rows, any user, that have a
        vector, ordered by id, starting after ``after_id``."""

    def user_counts(self) -> dict[str, dict[str, int]]:
        """Per user: ``events``, ``items`` (superseded and invalidated included),
        ``turns``, ``tool_calls`` and ``vectors`` (rows with an embedding)."""

    # embeddings -------------------------------------------------------------------
    def pending_embeddings(self, table: Table, limit: int) -> list[tuple[str, str]]:
        """(id, text) of rows, any user, that have no embedding yet."""

    def claim_pending_embeddings(self, table: Table, limit: int
                                 ) -> AbstractContextManager[list[tuple[str, str]]]:
        """Like ``pending_embeddings``, but other workers skip the rows while the block
        runs (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has one writer anyway)."""

    def set_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> int:
        """Store vectors for (id, text it was made from, vector) rows; a row whose text
        changed meanwhile is skipped. Derived data: no ledger event. Returns rows set."""

    def vector_search_items(
        self, user_id: str, vector: Vector, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Items by cosine similarity to ``vector`` (filters applied first), best first."""

    def vector_search_turns(
        self, user_id: str, vector: Vector, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Turns by cosine similarity to ``vector`` (filters applied first), best first."""

    def unstaged(self, table: Table, model: str, limit: int) -> list[tuple[str, str]]:
        """(id, text) of rows with no staged vector of ``model`` for their current text."""

    def stage_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> None:
        """Keep vectors of a new model aside until ``promote_staged``."""

    def promote_staged(self, model: str, dimensions: int) -> bool:
        """Atomically make the staged vectors of ``model`` the live ones and record the
        model; False (nothing changed) while some row still lacks a staged vector."""

    def clear_embeddings(self) -> None:
        """Drop every stored vector (when the embedding model changes)."""

    # write pipeline ---------------------------------------------------------------
    def pending_extractions(
        self, limit: int, *, claimable_at: str | None = None, holder: str | None = None
    ) -> list[tuple[str, list[str]]]:
        """Turns waiting for extraction, any user: ``(user_id, turn ids)`` per batch (the
        turns of one ``add_turns`` call), oldest batch first. With ``claimable_at`` only
        batches no other worker holds at that time (unclaimed, expired, or ``holder``'s)."""

    def claim_extraction(self, user_id: str, ids: Sequence[str], holder: str, until: str,
                         now: str) -> bool:
        """Claim pending turns for ``holder`` until ``until`` (all or none); False when
        another worker holds one of them past ``now`` or one is no longer pending.
        Scheduling state, not memory: no ledger event."""

    def confirm_extraction(self, user_id: str, ids: Sequence[str], holder: str) -> bool:
        """Inside the transaction that applies an extraction: lock the turns and say
        whether every one is still pending and claimed by ``holder``."""

    def extraction_ids(self, user_id: str, state: str) -> list[str]:
        """Ids of this user's turns in one extraction state (``failed``, …), oldest first."""

    def backlog(self, user_id: str) -> dict[str, int]:
        """Turns by extraction state (``extraction_pending`` / ``_done`` / ``_skipped`` /
        ``_failed``) and rows still waiting for a vector (``embedding_pending``)."""

    def item_vectors(self, user_id: str) -> list[tuple[str, Vector]]:
        """(id, vector) of this user's active items that have an embedding."""

    def compared_pairs(self, user_id: str) -> set[tuple[str, str]]:
        """Item pairs (smaller id first) reconciliation has already compared."""

    def llm_usage(self, user_id: str) -> list[dict[str, Any]]:
        """Per purpose and model: calls, tokens_in, tokens_out, errors, latency_ms (sum)."""

    def get_meta(self, key: str) -> str | None:
        """A store-wide setting (embedding model id, dimension)."""

    def set_meta(self, key: str, value: str) -> None:
        """Record a store-wide setting."""

    def close(self) -> None:
        """Release connections."""


def iter_chunks(values: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    """Slices of at most ``size`` values (keeps ``IN (...)`` lists under bind limits)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
