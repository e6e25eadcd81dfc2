"""Numbered schema migrations of the PostgreSQL store.

Same tables and columns as SQLite (see ``migrations.py``), in PostgreSQL's types:
identity columns for ``seq`` and ``pk``, BOOLEAN flags, DOUBLE PRECISION numbers,
``vector`` embeddings (no fixed dimension: the HNSW index is an expression index
created once the dimension is recorded), ``tsvector`` columns set by triggers
(m0002, m0013) and B-tree postings (m0007) instead of FTS5 tables, and row-level security
keyed on a per-transaction setting. Timestamps stay ISO 8601 TEXT and JSON stays TEXT,
so the SQL shared with SQLite reads the same on both. Text columns use the "C"
collation: ids and timestamps sort byte-wise, as in SQLite.
"""

from __future__ import annotations

from .migrations import Migration, Step
from .sql import Run

__all__ = ["PG_MIGRATIONS", "SECURED_TABLES", "USER_TABLES", "hnsw_index_sql"]

USER_TABLES = ("events", "knowledge", "conversations", "tool_history")
"""Tables of one user's rows in m0004 (later migrations secure their own tables)."""

_TEXT = 'TEXT COLLATE "C"'


def m0001_initial() -> tuple[str, ...]:
    t = _TEXT
    return (
        f"CREATE TABLE IF NOT EXISTS meta (key {t} PRIMARY KEY, value TEXT NOT NULL)",
        f"""CREATE TABLE events (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {t} NOT NULL UNIQUE,
            ts {t} NOT NULL,
            user_id {t} NOT NULL,
            agent_id {t},
            session_id {t},
            kind {t} NOT NULL,
            subject_id {t},
            payload TEXT NOT NULL,
            visibility {t} NOT NULL DEFAULT 'private'
        )""",
        "CREATE INDEX events_user_seq ON events (user_id, seq)",
        "CREATE INDEX events_subject ON events (subject_id)",
        f"""CREATE TABLE knowledge (
            pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {t} NOT NULL UNIQUE,
            user_id {t} NOT NULL,
            agent_id {t},
            category {t} NOT NULL,
            content TEXT NOT NULL,
            domain {t},
            source {t} NOT NULL,
            confidence DOUBLE PRECISION NOT NULL,
            context {t} NOT NULL DEFAULT 'global',
            entity {t},
            sensitive BOOLEAN NOT NULL DEFAULT FALSE,
            due_at {t},
            reminded_at {t},
            superseded_by {t},
            valid_from {t},
            valid_to {t},
            created_at {t} NOT NULL,
            updated_at {t} NOT NULL,
            last_used_at {t},
            use_count INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            embedding vector,
            embedding_model {t},
            emb_seq BIGINT
        )""",
        "CREATE INDEX knowledge_user ON knowledge (user_id, category, context)",
        "CREATE INDEX knowledge_entity ON knowledge (user_id, entity)",
        "CREATE INDEX knowledge_due ON knowledge (user_id, due_at) WHERE due_at IS NOT NULL",
        "CREATE INDEX knowledge_embedded ON knowledge (user_id) WHERE embedding IS NOT NULL",
        "CREATE INDEX knowledge_pending ON knowledge (pk) WHERE embedding IS NULL",
        f"""CREATE TABLE conversations (
            pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {t} NOT NULL UNIQUE,
            user_id {t} NOT NULL,
            agent_id {t},
            session_id {t} NOT NULL,
            role {t} NOT NULL,
            name {t},
            content TEXT NOT NULL,
            ts {t} NOT NULL,
            consolidated_at {t},
            metadata TEXT NOT NULL DEFAULT '{{}}',
            context TEXT NOT NULL DEFAULT '',
            day TEXT NOT NULL DEFAULT '',
            embedding vector,
            embedding_model {t},
            emb_seq BIGINT
        )""",
        "CREATE INDEX conversations_session ON conversations (user_id, session_id, ts)",
        "CREATE INDEX conversations_ts ON conversations (user_id, ts)",
        "CREATE INDEX conversations_embedded ON conversations (user_id) "
        "WHERE embedding IS NOT NULL",
        "CREATE INDEX conversations_pending ON conversations (pk) WHERE embedding IS NULL",
        f"""CREATE TABLE tool_history (
            id {t} PRIMARY KEY,
            user_id {t} NOT NULL,
            agent_id {t},
            session_id {t},
            name {t} NOT NULL,
            arguments TEXT NOT NULL DEFAULT '{{}}',
            success BOOLEAN NOT NULL,
            duration_ms DOUBLE PRECISION,
            error TEXT,
            ts {t} NOT NULL
        )""",
        "CREATE INDEX tool_history_user ON tool_history (user_id, name, ts)",
        "CREATE SEQUENCE embedding_seq",
    )


_TSVECTORS = {
    "knowledge": "setweight(to_tsvector('ledgermem_english', {r}content || ' ' || "
                 "coalesce({r}entity, '')), 'A')",
    "conversations": "setweight(to_tsvector('ledgermem_english', {r}content || ' ' || "
                     "coalesce({r}name, '') || ' ' || {r}day), 'A') || "
                     "setweight(to_tsvector('ledgermem_english', {r}context), 'B')",
}
"""Each table's ``fts``: its text as lexemes, ``{r}`` the row's prefix (``NEW.`` in a
trigger)."""
_TSVECTOR_COLUMNS = {"knowledge": "content, entity",
                     "conversations": "content, name, day, context"}
"""The columns each ``fts`` is made of."""
TSVECTOR_COLUMNS = {table: frozenset(columns.split(", "))
                    for table, columns in _TSVECTOR_COLUMNS.items()}
"""The same, as sets: a write of one of them changes the row's lexemes and length."""
ITEM_TSVECTOR = _TSVECTORS["knowledge"].format(r="")
TURN_TSVECTOR = _TSVECTORS["conversations"].format(r="")


def m0002_add_fts() -> tuple[str, ...]:
    """Generated tsvector columns (always in step with the row, nothing to rebuild)
    and the token counts BM25 needs.

    The ``ledgermem_english`` configuration stems like PostgreSQL's ``english`` but
    keeps stopwords, as SQLite's porter tokenizer does: "and", "not" or "who" stay
    searchable words. Weights mirror SQLite's BM25 column weights: a turn's
    neighbours' text (``context``) is weight B (counts 0.4), everything else A (1.0).
    """
    statements = [
        "CREATE TEXT SEARCH DICTIONARY ledgermem_english_stem "
        "(TEMPLATE = snowball, Language = english)",
        "CREATE TEXT SEARCH CONFIGURATION ledgermem_english (COPY = english)",
        "ALTER TEXT SEARCH CONFIGURATION ledgermem_english ALTER MAPPING FOR asciiword, "
        "asciihword, hword_asciipart, word, hword, hword_part WITH ledgermem_english_stem",
        "CREATE FUNCTION ledgermem_tokens(tsvector) RETURNS integer LANGUAGE sql IMMUTABLE "
        "PARALLEL SAFE AS $$ SELECT coalesce(sum(cardinality(positions)), 0)::integer "
        "FROM unnest($1) $$",
    ]
    for table, tsvector in (("knowledge", ITEM_TSVECTOR), ("conversations", TURN_TSVECTOR)):
        statements += [
            f"ALTER TABLE {table} ADD COLUMN fts tsvector GENERATED ALWAYS AS ({tsvector}) "
            "STORED",
            f"ALTER TABLE {table} ADD COLUMN doc_len integer GENERATED ALWAYS AS "
            f"(ledgermem_tokens({tsvector})) STORED",
            f"CREATE INDEX {table}_fts ON {table} USING gin (fts)",
            f"CREATE INDEX {table}_doc_len ON {table} (user_id) INCLUDE (doc_len)",
        ]
    return tuple(statements)


def m0003_add_embedding_staging() -> tuple[str, ...]:
    """Vectors of a new model, kept apart while ``reembed`` runs."""
    t = _TEXT
    return (
        f"""CREATE TABLE embedding_staging (
            table_name {t} NOT NULL,
            id {t} NOT NULL,
            model {t} NOT NULL,
            content TEXT NOT NULL,
            vector vector NOT NULL,
            PRIMARY KEY (table_name, id, model)
        )""",
    )


def _row_level_security(table: str) -> tuple[str, ...]:
    """A second wall behind the ``user_id = ?`` of every statement.

    A row is visible (and writable) when its ``user_id`` is the transaction's
    ``ledgermem.user_id`` setting, or when the transaction set
    ``ledgermem.all_users`` for maintenance across users. FORCE makes the policies
    bind the table's owner too; only superusers and BYPASSRLS roles pass around them.
    NULLIF: once a transaction has set a custom setting, later transactions of the
    session read it as '' rather than NULL.
    """
    user = "user_id = NULLIF(current_setting('ledgermem.user_id', true), '')"
    every = "current_setting('ledgermem.all_users', true) = 'on'"
    return (
        f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY {table}_own ON {table} USING ({user}) WITH CHECK ({user})",
        f"CREATE POLICY {table}_maintenance ON {table} USING ({every}) WITH CHECK ({every})",
    )


def m0004_row_level_security() -> tuple[str, ...]:
    return tuple(s for table in USER_TABLES for s in _row_level_security(table))


def m0005_add_pipeline() -> tuple[str, ...]:
    """The extraction queue on turns, LLM call accounting and reconciled pairs (see
    SQLite's m0005), with row-level security on the two new tables."""
    t = _TEXT
    return (
        *(f"ALTER TABLE conversations ADD COLUMN {column} {t}" for column in (
            "extraction", "extraction_batch", "extraction_claim", "extraction_claim_until")),
        "CREATE INDEX conversations_extraction ON conversations (pk) "
        "WHERE extraction = 'pending'",
        "CREATE INDEX conversations_extraction_batch ON conversations (extraction_batch) "
        "WHERE extraction_batch IS NOT NULL",
        f"""CREATE TABLE llm_calls (
            id {t} PRIMARY KEY,
            user_id {t} NOT NULL,
            ts {t} NOT NULL,
            purpose {t} NOT NULL,
            model {t} NOT NULL,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            latency_ms DOUBLE PRECISION NOT NULL DEFAULT 0,
            outcome {t} NOT NULL,
            error TEXT
        )""",
        "CREATE INDEX llm_calls_user ON llm_calls (user_id, purpose)",
        f"""CREATE TABLE comparisons (
            user_id {t} NOT NULL,
            item_a {t} NOT NULL,
            item_b {t} NOT NULL,
            outcome {t} NOT NULL,
            similarity DOUBLE PRECISION,
            ts {t} NOT NULL,
            PRIMARY KEY (user_id, item_a, item_b)
        )""",
        *_row_level_security("llm_calls"),
        *_row_level_security("comparisons"),
    )


def m0006_add_lookup_indexes() -> tuple[str, ...]:
    """Exact-text lookups (dedup) by a prefix expression index, as on SQLite (the
    embedding queue's partial indexes came with m0001)."""
    return ("CREATE INDEX knowledge_text ON knowledge (user_id, substr(content, 1, 64))",)


TERM_FREQ = "cardinality(v.weights) - 0.6 * cardinality(array_positions(v.weights, 'B'))"
"""A lexeme's frequency in a row as SQLite's BM25 counts it: a weight-B position (a
turn's neighbours' text) counts 0.4, as that FTS5 column is weighted."""


def _copy_terms_sql(table: str, row: str, source: str = "") -> str:
    """Postings of ``row``'s tsvector into ``<table>_terms`` (``source`` joins rows in)."""
    return (f"INSERT INTO {table}_terms (user_id, lexeme, pk, freq, doc_len) SELECT "
            f"{row}.user_id, v.lexeme, {row}.pk, {TERM_FREQ}, {row}.doc_len "
            f"FROM {source}unnest({row}.fts) AS v")


def _backfill_terms(table: str) -> Step:
    def backfill(run: Run) -> None:
        # A step, not a statement: only the store's runner sets the all-users scope
        # that row-level security needs to let the rows be read.
        run(_copy_terms_sql(table, "t", f"{table} AS t CROSS JOIN "), [])

    return backfill


def _term_index(table: str) -> tuple[Step, ...]:
    """``<table>_terms``: one row per (row, lexeme) with its BM25 frequency and the
    row's length, kept in step with ``<table>.fts`` by triggers (an update that leaves
    the text alone, as a recall's confidence bump, does not touch it)."""
    terms = f"{table}_terms"
    return (
        f"""CREATE TABLE {terms} (
            user_id {_TEXT} NOT NULL,
            lexeme {_TEXT} NOT NULL,
            pk BIGINT NOT NULL,
            freq DOUBLE PRECISION NOT NULL,
            doc_len INTEGER NOT NULL
        )""",
        f"CREATE FUNCTION {terms}_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF TG_OP <> 'INSERT' THEN DELETE FROM {terms} WHERE pk = OLD.pk; END IF; "
        f"IF TG_OP <> 'DELETE' THEN {_copy_terms_sql(table, 'NEW')}; END IF; "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER {terms}_rows AFTER INSERT OR DELETE ON {table} FOR EACH ROW "
        f"EXECUTE FUNCTION {terms}_sync()",
        f"CREATE TRIGGER {terms}_text AFTER UPDATE ON {table} FOR EACH ROW "
        f"WHEN (OLD.fts IS DISTINCT FROM NEW.fts) EXECUTE FUNCTION {terms}_sync()",
        _backfill_terms(table),
        f"CREATE INDEX {terms}_lookup ON {terms} (user_id, lexeme) INCLUDE (pk, freq, doc_len)",
        f"CREATE INDEX {terms}_row ON {terms} (pk)",
        *_row_level_security(terms),
    )


def m0007_add_term_index() -> tuple[Step, ...]:
    """An inverted index for BM25: per row and lexeme, the frequency and row length.

    The GIN index on ``fts`` cannot serve a search under row-level security: ``@@``
    is not leakproof, so PostgreSQL must apply the policies before it, and scans every
    row of the table. Text equality is leakproof, so a B-tree on (user, lexeme) can;
    BM25 then reads only the postings of the query's lexemes, as FTS5 does."""
    return (*_term_index("knowledge"), *_term_index("conversations"))


def _inline_vectors(table: str) -> tuple[Step, ...]:
    def rewrite(run: Run) -> None:
        # ``vector(v, -1, false)`` is pgvector's cast to an unbounded vector: the value
        # unchanged but detoasted, so the row is written anew with it inline (an UPDATE
        # that assigns the column to itself would keep the old out-of-line copy).
        run(f"UPDATE {table} SET embedding = vector(embedding, -1, false) "
            "WHERE embedding IS NOT NULL", [])

    return (f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE MAIN", rewrite)


def m0008_inline_vectors() -> tuple[Step, ...]:
    """Vectors kept in the row rather than in TOAST.

    pgvector's type defaults to ``EXTERNAL`` storage, so a row of text, tsvector and a
    384-dimension vector (1,544 bytes) passes the 2 kB threshold and its vector moves
    out of line. An exact search reads every vector of a user, and each out-of-line
    one costs a TOAST index lookup (twice: ``vector_dims`` and the distance each
    detoast it): 8,000 items took 31 ms against 7 ms inline. ``MAIN`` still moves a
    vector out when the row would not fit a page (large dimensions)."""
    return (*_inline_vectors("knowledge"), *_inline_vectors("conversations"))


def m0009_add_api_keys() -> tuple[Step, ...]:
    """The REST server's API keys (see SQLite's m0007). No row-level security: a key is
    looked up by its id before any user is known, and the table holds no memory."""
    t = _TEXT
    return (
        f"""CREATE TABLE api_keys (
            key_id {t} PRIMARY KEY,
            user_id {t},
            agent_id {t},
            label TEXT NOT NULL DEFAULT '',
            admin BOOLEAN NOT NULL DEFAULT FALSE,
            secret_hash {t} NOT NULL,
            created_at {t} NOT NULL,
            revoked_at {t}
        )""",
        "CREATE INDEX api_keys_user ON api_keys (user_id)",
    )


def m0010_add_text_digest_index() -> tuple[str, ...]:
    """Exact-text lookups (dedup) by ``md5(content)``: row-level security lets only
    leakproof functions of a column into an index condition, and ``substr`` is not, so
    m0006's prefix index was never used and each lookup read the user's every row.
    ``md5`` and text equality are leakproof."""
    return ("CREATE INDEX knowledge_digest ON knowledge (user_id, md5(content))",
            "DROP INDEX IF EXISTS knowledge_text")


def m0011_drop_fts_gin() -> tuple[str, ...]:
    """The GIN indexes on ``fts`` go: no search can use them under row-level security
    (``@@`` is not leakproof; keyword search reads m0007's postings instead), and each
    write paid for them (bulk ``add_turns`` 3–8% faster without)."""
    return ("DROP INDEX IF EXISTS knowledge_fts", "DROP INDEX IF EXISTS conversations_fts")


def _one_tsvector(table: str) -> tuple[str, ...]:
    terms, row = f"{table}_terms", "NEW."
    return (
        f"ALTER TABLE {table} ALTER COLUMN fts DROP EXPRESSION",
        f"ALTER TABLE {table} ALTER COLUMN doc_len DROP EXPRESSION",
        f"CREATE FUNCTION {table}_fts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"NEW.fts := {_TSVECTORS[table].format(r=row)}; "
        "NEW.doc_len := ledgermem_tokens(NEW.fts); RETURN NEW; END $$",
        f"CREATE TRIGGER {table}_fts BEFORE INSERT OR UPDATE OF {_TSVECTOR_COLUMNS[table]} "
        f"ON {table} FOR EACH ROW EXECUTE FUNCTION {table}_fts()",
        f"DROP TRIGGER {terms}_rows ON {table}",
        f"CREATE FUNCTION {terms}_added() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"{_copy_terms_sql(table, 'n', 'added AS n CROSS JOIN ')}; RETURN NULL; END $$",
        f"CREATE FUNCTION {terms}_removed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"DELETE FROM {terms} WHERE pk IN (SELECT pk FROM removed); RETURN NULL; END $$",
        f"CREATE TRIGGER {terms}_added AFTER INSERT ON {table} REFERENCING NEW TABLE AS "
        f"added FOR EACH STATEMENT EXECUTE FUNCTION {terms}_added()",
        f"CREATE TRIGGER {terms}_removed AFTER DELETE ON {table} REFERENCING OLD TABLE AS "
        f"removed FOR EACH STATEMENT EXECUTE FUNCTION {terms}_removed()",
    )


def m0013_text_once_per_row() -> tuple[str, ...]:
    """A row's lexemes are computed once per write, and its postings once per statement.

    ``fts`` and ``doc_len`` were generated columns of the same expression, so each
    write ran ``to_tsvector`` twice (a generated column cannot read another); a
    ``BEFORE`` trigger now sets both from one call, and only when a column they are
    made of is written. The postings of new and deleted rows are written by one
    statement-level trigger each (over the statement's transition table) instead of
    one trigger call per row; a changed text keeps m0007's row trigger. The values
    are those of before. Bulk ``add_turns`` of 4,000 turns, no embedder: 1,452–1,598 →
    1,724–1,845 turns/s."""
    return (*_one_tsvector("knowledge"), *_one_tsvector("conversations"))


def m0014_knowledge_fillfactor() -> tuple[str, ...]:
    """Pages of ``knowledge`` keep a fifth free: room for a new version of one of their
    rows beside the old (a full page holds five rows with 384-dimension vectors). An
    update that changes no indexed column (a restatement's refresh, a recall's
    bookkeeping) then stays on its page, a HOT update that touches no index; one that
    moves writes a new entry in every index, the HNSW index's included (a graph search
    for a vector that did not change). Pages written before it get the room when they
    are rewritten (``vacuum``)."""
    return ("ALTER TABLE knowledge SET (fillfactor = 80)",)


SECURED_TABLES = (*USER_TABLES, "llm_calls", "comparisons", "knowledge_terms",
                  "conversations_terms")
"""Every table with m0004's two policies (m0004, m0005, m0007)."""


def m0012_read_policy_settings_once() -> tuple[str, ...]:
    """The policies read their settings once per statement, not once per row.

    ``current_setting()`` in a policy was called for every row a statement touched (a
    BM25 lookup reads thousands of postings); inside a scalar subquery it is an
    InitPlan, run once, and each row compares with its value. The same rows pass: the
    settings do not change within a statement. Measured on one database of 100,000
    items, the same 150 ``remember`` calls' statements replayed under each form in
    turn, three rounds: dedup's lookup 9.6 → 9.1 ms, its word counts 3.5 → 3.2."""
    user = "user_id = (SELECT NULLIF(current_setting('ledgermem.user_id', true), ''))"
    every = "(SELECT current_setting('ledgermem.all_users', true)) = 'on'"
    return tuple(
        statement for table in SECURED_TABLES for statement in (
            f"ALTER POLICY {table}_own ON {table} USING ({user}) WITH CHECK ({user})",
            f"ALTER POLICY {table}_maintenance ON {table} USING ({every}) "
            f"WITH CHECK ({every})"))


def hnsw_index_sql(table: str, dims: int) -> str:
    """An HNSW cosine index over the vectors of one dimension (a column of type
    ``vector`` without a dimension cannot be indexed directly)."""
    return (f"CREATE INDEX IF NOT EXISTS {table}_hnsw_{int(dims)} ON {table} USING hnsw "
            f"((embedding::vector({int(dims)})) vector_cosine_ops) "
            f"WHERE vector_dims(embedding) = {int(dims)}")


PG_MIGRATIONS: tuple[Migration, ...] = tuple(
    Migration(number, fn.__name__.split("_", 1)[1], fn())
    for number, fn in enumerate(
        (m0001_initial, m0002_add_fts, m0003_add_embedding_staging, m0004_row_level_security,
         m0005_add_pipeline, m0006_add_lookup_indexes, m0007_add_term_index,
         m0008_inline_vectors, m0009_add_api_keys, m0010_add_text_digest_index,
         m0011_drop_fts_gin, m0012_read_policy_settings_once, m0013_text_once_per_row,
         m0014_knowledge_fillfactor),
        start=1)
)
