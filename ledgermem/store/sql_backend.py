"""What every SQL store is built on: the hooks a backend supplies (reads, write
transactions, the order of writers in the ledger), the dialect's flags, and the two
tables kept outside the ledger, ``meta`` and ``api_keys``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from .base import StoredKey
from .sql_rows import KEY_COLUMNS, key_from_row, marks

Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
"""Executes one statement inside a write transaction and returns its rows."""


class SQLBackend(ABC):
    """The backend hooks every SQL store implements, and what the shared queries
    build on them."""

    url: str
    common_postings_costly = False
    reads_beside = False

    _hint_ids = False
    """Whether the dialect reads ``+column`` as "do not use an index for this"."""

    _digest_text = False
    """Whether exact texts are looked up by ``md5(content)`` (see ``item_where_sql``)."""

    _unlimited = ""
    """What stands for "no LIMIT" before an OFFSET in this dialect."""

    # backend hooks ----------------------------------------------------------------
    @abstractmethod
    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only statement (placeholders ``?``) and return its rows."""

    @abstractmethod
    def _writing(self) -> AbstractContextManager[Run]:
        """A write transaction (nesting as a savepoint) yielding a statement runner."""

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._writing():
            yield

    def reading(self) -> AbstractContextManager[None]:
        """Several reads of this thread grouped, where the store gains by it (see
        ``PostgresStore.reading``); SQLite's reads are in-process calls already."""
        return nullcontext()

    def reading_beside(self) -> AbstractContextManager[bool]:
        """Nothing beside (``Store.reads_beside``), unless a backend says otherwise."""
        return nullcontext(False)

    def writing_for(self, user_id: str) -> AbstractContextManager[None]:
        """A write transaction in which reads of ``user_id``'s rows stay current until
        it ends: no other writer changes them in between. SQLite has one writer at a
        time anyway (``BEGIN IMMEDIATE``); PostgreSQL takes a per-user lock."""
        return self.transaction()

    def _in_ledger_order(self, run: Run, user_ids: Sequence[str]) -> None:
        """Make the writers of ``user_ids`` draw their ledger positions and change the
        views one transaction at a time, so the views change in ledger order. SQLite
        has one writer at a time already.

        Every transaction takes these before it locks a row of those users (an append,
        a claim, a forget): one that locked a row first and then waited for a user's
        lock could wait on a writer holding that lock and waiting for the row."""
        del run, user_ids

    # API keys ---------------------------------------------------------------------
    def add_api_key(self, key: StoredKey) -> None:
        with self._writing() as run:
            run(f"INSERT INTO api_keys ({', '.join(KEY_COLUMNS)}) VALUES ({marks(8)})",
                [key.key_id, key.user_id, key.agent_id, key.label, key.admin,
                 key.secret_hash, key.created_at, key.revoked_at])

    def api_key(self, key_id: str) -> StoredKey | None:
        rows = self._read(f"SELECT {', '.join(KEY_COLUMNS)} FROM api_keys WHERE key_id = ?",
                          [key_id])
        return key_from_row(rows[0]) if rows else None

    def api_keys(self, user_id: str | None = None, *, admin: bool | None = None
                 ) -> list[StoredKey]:
        where: list[str] = ["1 = 1"]
        params: list[Any] = []
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        if admin is not None:
            where.append("admin = ?")
            params.append(admin)
        rows = self._read(f"SELECT {', '.join(KEY_COLUMNS)} FROM api_keys WHERE "
                          f"{' AND '.join(where)} ORDER BY created_at, key_id", params)
        return [key_from_row(row) for row in rows]

    def revoke_api_key(self, key_id: str, at: str) -> bool:
        with self._writing() as run:
            return bool(run("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND "
                            "revoked_at IS NULL RETURNING 1", [at, key_id]))

    # meta -------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", [key])
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._writing() as run:
            run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                "value = excluded.value", [key, value])

    def claim_meta(self, values: Mapping[str, str]) -> dict[str, str | None]:
        keys = list(values)
        with self._writing() as run:
            self._claiming(run)
            found: dict[str, str] = {str(key): str(value) for key, value in run(
                f"SELECT key, value FROM meta WHERE key IN ({marks(len(keys))})", keys)}
            if not found:
                for key, value in values.items():
                    self.set_meta(key, value)
                found = dict(values)
        return {key: found.get(key) for key in keys}

    @abstractmethod
    def _claiming(self, run: Run) -> None:
        """Keep other claims out of this transaction until it ends."""
