"""Numbered schema migrations per backend. Each runs in its own transaction and is
recorded in ``schema_version``; a database newer than this code raises
``SchemaMismatch`` instead of being touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby

from .sql import CONTEXT_TURNS, Run, spoken_day

__all__ = ["SQLITE_MIGRATIONS", "Migration"]


Step = str | Callable[[Run], None]
"""A SQL statement, or a function given the transaction's statement runner."""


@dataclass(frozen=True)
class Migration:
    """One schema step: ``version`` is its number, ``statements`` run in order."""

    version: int
    name: str
    statements: tuple[Step, ...]


def m0001_initial() -> tuple[str, ...]:
    return (
        """CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            ts TEXT NOT NULL,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            session_id TEXT,
            kind TEXT NOT NULL,
            subject_id TEXT,
            payload TEXT NOT NULL,
            visibility TEXT NOT NULL DEFAULT 'private'
        )""",
        "CREATE INDEX events_user_seq ON events (user_id, seq)",
        "CREATE INDEX events_subject ON events (subject_id)",
        """CREATE TABLE knowledge (
            pk INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            category TEXT NOT NULL,
            content TEXT NOT NULL,
            domain TEXT,
            source TEXT NOT NULL,
            confidence REAL NOT NULL,
            context TEXT NOT NULL DEFAULT 'global',
            entity TEXT,
            sensitive INTEGER NOT NULL DEFAULT 0,
            due_at TEXT,
            reminded_at TEXT,
            superseded_by TEXT,
            valid_from TEXT,
            valid_to TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            last_used_at TEXT,
            use_count INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{}',
            embedding BLOB,
            embedding_model TEXT,
            emb_seq INTEGER
        )""",
        "CREATE INDEX knowledge_user ON knowledge (user_id, category, context)",
        "CREATE INDEX knowledge_entity ON knowledge (user_id, entity)",
        "CREATE INDEX knowledge_due ON knowledge (user_id, due_at) WHERE due_at IS NOT NULL",
        "CREATE INDEX knowledge_emb ON knowledge (user_id, emb_seq)",
        """CREATE TABLE conversations (
            pk INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            session_id TEXT NOT NULL,
            role TEXT NOT NULL,
            name TEXT,
            content TEXT NOT NULL,
            ts TEXT NOT NULL,
            consolidated_at TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            embedding BLOB,
            embedding_model TEXT,
            emb_seq INTEGER
        )""",
        "CREATE INDEX conversations_session ON conversations (user_id, session_id, ts)",
        "CREATE INDEX conversations_ts ON conversations (user_id, ts)",
        "CREATE INDEX conversations_emb ON conversations (user_id, emb_seq)",
        """CREATE TABLE tool_history (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            session_id TEXT,
            name TEXT NOT NULL,
            arguments TEXT NOT NULL DEFAULT '{}',
            success INTEGER NOT NULL,
            duration_ms REAL,
            error TEXT,
            ts TEXT NOT NULL
        )""",
        "CREATE INDEX tool_history_user ON tool_history (user_id, name, ts)",
    )


def _fts_sql(table: str, columns: tuple[str, ...], *, scoped: bool = False
             ) -> tuple[str, ...]:
    """An external-content FTS5 index of ``columns`` of ``table``, kept in step by
    triggers. ``scoped`` adds the table's ``scope`` column (its user's one-word
    token, see ``m0008``), which a trigger rewrites when ``user_id`` changes."""
    indexed = (*columns, "scope") if scoped else columns
    cols = ", ".join(indexed)
    watched = ", ".join((*columns, "user_id") if scoped else columns)
    new = ", ".join(f"new.{c}" for c in indexed)
    old = ", ".join(f"old.{c}" for c in indexed)
    fts = f"{table}_fts"
    return (
        f"CREATE VIRTUAL TABLE {fts} USING fts5({cols}, content='{table}', content_rowid='pk', "
        "tokenize='porter unicode61 remove_diacritics 2')",
        f"CREATE TRIGGER {table}_ai AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts} (rowid, {cols}) VALUES (new.pk, {new}); END",
        f"CREATE TRIGGER {table}_ad AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts} ({fts}, rowid, {cols}) VALUES ('delete', old.pk, {old}); END",
        f"CREATE TRIGGER {table}_au AFTER UPDATE OF {watched} ON {table} BEGIN "
        f"INSERT INTO {fts} ({fts}, rowid, {cols}) VALUES ('delete', old.pk, {old}); "
        f"INSERT INTO {fts} (rowid, {cols}) VALUES (new.pk, {new}); END",
        f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')",
    )


def m0002_add_fts() -> tuple[str, ...]:
    return _fts_sql("knowledge", ("content", "entity")) + _fts_sql(
        "conversations", ("content", "name")
    )


def m0003_add_embedding_staging() -> tuple[str, ...]:
    """Vectors of a new model, kept apart while ``reembed`` runs."""
    return (
        """CREATE TABLE embedding_staging (
            table_name TEXT NOT NULL,
            id TEXT NOT NULL,
            model TEXT NOT NULL,
            content TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (table_name, id, model)
        )""",
    )


def _backfill_turn_context(run: Run) -> None:
    rows = run("SELECT pk, session_id, user_id, content, ts FROM conversations "
               "ORDER BY user_id, session_id, ts, pk", [])
    n = CONTEXT_TURNS
    for _, group in groupby(rows, key=lambda r: (r[2], r[1])):
        turns = list(group)
        for i, (pk, _, _, _, ts) in enumerate(turns):
            around = [turns[j][3] for j in range(max(0, i - n), min(len(turns), i + n + 1))
                      if j != i]
            run("UPDATE conversations SET context = ?, day = ? WHERE pk = ?",
                ["\n".join(around), spoken_day(ts), pk])


def m0004_add_turn_context() -> tuple[Step, ...]:
    """Index each turn with its neighbours' text and its day in words."""
    return (
        "ALTER TABLE conversations ADD COLUMN context TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE conversations ADD COLUMN day TEXT NOT NULL DEFAULT ''",
        "DROP TRIGGER conversations_ai",
        "DROP TRIGGER conversations_ad",
        "DROP TRIGGER conversations_au",
        "DROP TABLE conversations_fts",
        _backfill_turn_context,
        *_fts_sql("conversations", ("content", "name", "context", "day")),
    )


def m0005_add_pipeline() -> tuple[Step, ...]:
    """The extraction queue on turns, LLM call accounting and reconciled pairs.

    ``extraction`` is NULL (not asked), ``pending``, ``done``, ``skipped`` or
    ``failed``; ``extraction_batch`` groups the turns of one ``add_turns`` call. The
    claim columns are scheduling state (which worker holds a batch, until when), not
    memory: they are not in the ledger and a rebuild clears them.
    """
    return (
        "ALTER TABLE conversations ADD COLUMN extraction TEXT",
        "ALTER TABLE conversations ADD COLUMN extraction_batch TEXT",
        "ALTER TABLE conversations ADD COLUMN extraction_claim TEXT",
        "ALTER TABLE conversations ADD COLUMN extraction_claim_until TEXT",
        "CREATE INDEX conversations_extraction ON conversations (pk) "
        "WHERE extraction = 'pending'",
        "CREATE INDEX conversations_extraction_batch ON conversations (extraction_batch) "
        "WHERE extraction_batch IS NOT NULL",
        """CREATE TABLE llm_calls (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            ts TEXT NOT NULL,
            purpose TEXT NOT NULL,
            model TEXT NOT NULL,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            latency_ms REAL NOT NULL DEFAULT 0,
            outcome TEXT NOT NULL,
            error TEXT
        )""",
        "CREATE INDEX llm_calls_user ON llm_calls (user_id, purpose)",
        """CREATE TABLE comparisons (
            user_id TEXT NOT NULL,
            item_a TEXT NOT NULL,
            item_b TEXT NOT NULL,
            outcome TEXT NOT NULL,
            similarity REAL,
            ts TEXT NOT NULL,
            PRIMARY KEY (user_id, item_a, item_b)
        )""",
    )


def m0006_add_lookup_indexes() -> tuple[Step, ...]:
    """Exact-text lookups (dedup) and the embedding queue without table scans."""
    return (
        "CREATE INDEX knowledge_text ON knowledge (user_id, substr(content, 1, 64))",
        "CREATE INDEX knowledge_unembedded ON knowledge (pk) WHERE embedding IS NULL",
        "CREATE INDEX conversations_unembedded ON conversations (pk) WHERE embedding IS NULL",
    )


def m0007_add_api_keys() -> tuple[Step, ...]:
    """The REST server's API keys: the hash of each key's secret, never the key."""
    return (
        """CREATE TABLE api_keys (
            key_id TEXT PRIMARY KEY,
            user_id TEXT,
            agent_id TEXT,
            label TEXT NOT NULL DEFAULT '',
            admin INTEGER NOT NULL DEFAULT 0,
            secret_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked_at TEXT
        )""",
        "CREATE INDEX api_keys_user ON api_keys (user_id)",
    )


FTS_COLUMNS: dict[str, tuple[str, ...]] = {
    "knowledge": ("content", "entity"),
    "conversations": ("content", "name", "context", "day"),
}
"""The text columns each full-text index holds (besides ``scope``)."""


def m0008_scope_keyword_index() -> tuple[Step, ...]:
    """Each full-text index holds its row's user as one word, so a keyword search reads
    and ranks only the searching user's rows.

    ``scope`` is a virtual generated column: ``'u'`` and the hex digits of the user id,
    one token that no text holds (``keyword_scope`` writes the same in Python). FTS5
    keeps one index for the whole file; without this token every row of every user
    holding a query word was BM25-scored and then dropped by the user filter. The
    index is rebuilt once, by this migration."""
    steps: list[Step] = []
    for table, columns in FTS_COLUMNS.items():
        steps += [f"DROP TRIGGER {table}_ai", f"DROP TRIGGER {table}_ad",
                  f"DROP TRIGGER {table}_au", f"DROP TABLE {table}_fts",
                  f"ALTER TABLE {table} ADD COLUMN scope TEXT "
                  "GENERATED ALWAYS AS ('u' || hex(user_id)) VIRTUAL",
                  *_fts_sql(table, columns, scoped=True)]
    return tuple(steps)


def m0009_session_index_covers_turns() -> tuple[Step, ...]:
    """The session index holds each turn's ``pk`` and id too, so a user's turns in
    session order (the neighbours a vector search of turns smooths over) are read from
    the index alone, without their rows and vectors: 0.16 s at 100,000 turns against
    0.41 s."""
    return (
        "DROP INDEX conversations_session",
        "CREATE INDEX conversations_session ON conversations "
        "(user_id, session_id, ts, pk, id)",
    )


def m0010_index_knowledge_by_context() -> tuple[Step, ...]:
    """Knowledge by context alone: its only index held it behind the category, so a
    search filtered by context read every row of the user. A vector search for the
    20 items of one context among 100,000 read them in 0.37 s."""
    return ("CREATE INDEX knowledge_context ON knowledge (user_id, context)",)


SQLITE_MIGRATIONS: tuple[Migration, ...] = tuple(
    Migration(number, fn.__name__.split("_", 1)[1], fn())
    for number, fn in enumerate(
        (m0001_initial, m0002_add_fts, m0003_add_embedding_staging, m0004_add_turn_context,
         m0005_add_pipeline, m0006_add_lookup_indexes, m0007_add_api_keys,
         m0008_scope_keyword_index, m0009_session_index_covers_turns,
         m0010_index_knowledge_by_context),
        start=1)
)

