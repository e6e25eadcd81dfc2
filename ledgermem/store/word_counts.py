"""Each word's count of rows as dedup reads it (``Store.term_counts``), kept between
writes.

Dedup picks a text's rarest words by these counts and then reads those words'
postings themselves, so a stale count costs a lookup speed, never its answer. A count
is therefore kept a while and raised by each row this process inserts holding the
word, instead of being counted again after every write: a ``remember_many`` batch of
1,000 texts holds about 2,500 words, and counting them again after each batch cost
SQLite about 0.25 s a batch at 100,000 items: one full-text match a word, 60–110 µs
each whatever the word's rows. Another process's writes show once a count expires.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

WORD = re.compile(r"\w+")
"""A word of a text, as keyword search splits one (``retrieval.keyword.query_terms``)."""
TEXT_COLUMNS = ("content", "entity", "name")
"""The columns of a new row whose words raise the kept counts."""
KEPT_WORDS = 100_000
"""Words kept at most, over all tables and scopes; past it the store starts over."""


class WordCounts:
    """(table, scope, word) → the rows holding the word, kept ``ttl`` seconds.

    ``scope`` is the user the rows were counted for, or ``""`` where a store counts its
    whole file (SQLite: FTS5's statistics are the file's). A count stops past the
    cut-off it was counted to (``common_term_rows``, which grows with the rows).
    """

    def __init__(self, ttl: float, *, per_user: bool) -> None:
        self._ttl = ttl
        self._per_user = per_user
        self._counts: dict[tuple[str, str, str], tuple[int, int, float]] = {}
        """(table, scope, word) → (count, the cut-off it was counted to, until when)."""
        self._tables: set[str] = set()
        self._cutoffs: dict[tuple[str, str], tuple[int, float]] = {}
        """(table, scope) → (the cut-off last counted to, until when)."""

    def scope(self, user_id: str) -> str:
        return user_id if self._per_user else ""

    def cutoff(self, table: str, user_id: str) -> int | None:
        """The cut-off the last count of ``table`` went to, while it is kept."""
        kept = self._cutoffs.get((table, self.scope(user_id)))
        return kept[0] if kept is not None and kept[1] > time.monotonic() else None

    def known(self, table: str, user_id: str, words: Sequence[str], cutoff: int
              ) -> tuple[dict[str, int], list[str]]:
        """The kept counts of ``words`` under ``cutoff``, and the words to count."""
        now, scope = time.monotonic(), self.scope(user_id)
        counts: dict[str, int] = {}
        missing: list[str] = []
        for word in words:
            kept = self._counts.get((table, scope, word))
            # A count within its cut-off is exact under any other; one past it only
            # says "more than that cut-off", so more than any lower one.
            if kept is not None and kept[2] > now and (kept[0] <= kept[1] or kept[1] >= cutoff):
                counts[word] = min(kept[0], cutoff + 1)
            else:
                missing.append(word)
        return counts, missing

    def keep(self, table: str, user_id: str, counts: Mapping[str, int], cutoff: int) -> None:
        """Keep fresh ``counts`` (each stopping past ``cutoff``)."""
        if len(self._counts) + len(counts) > KEPT_WORDS:
            self._counts.clear()
            self._cutoffs.clear()
        until, scope = time.monotonic() + self._ttl, self.scope(user_id)
        self._tables.add(table)
        self._cutoffs[(table, scope)] = (cutoff, until)
        for word, count in counts.items():
            self._counts[(table, scope, word)] = (count, cutoff, until)

    def inserted(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
                 ) -> None:
        """Raise the kept count of each word of these new rows of ``table`` by one a
        row (not past its cut-off)."""
        if table not in self._tables or not self._counts:
            return
        at = [columns.index(column) for column in TEXT_COLUMNS if column in columns]
        user_at = columns.index("user_id")
        for row in rows:
            text = " ".join(str(row[i]) for i in at if row[i] is not None)
            scope = self.scope(row[user_at])
            for word in set(WORD.findall(text.lower())):
                key = (table, scope, word)
                kept = self._counts.get(key)
                if kept is not None and kept[0] <= kept[1]:
                    self._counts[key] = (kept[0] + 1, kept[1], kept[2])

    def forget(self, user_id: str) -> None:
        """Drop the counts of ``user_id``'s words (all of them where counts are the
        file's): no word of a redacted text or a deleted user stays in this process."""
        if not self._per_user:
            self._counts.clear()
            return
        for key in [key for key in self._counts if key[1] == user_id]:
            del self._counts[key]
        for counted in [key for key in self._cutoffs if key[1] == user_id]:
            del self._cutoffs[counted]
