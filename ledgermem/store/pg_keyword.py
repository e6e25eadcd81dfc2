"""PostgreSQL's keyword search: FTS5's BM25 written in SQL over the postings of the
rows' ``tsvector`` columns (``<table>_terms``), with each user's corpus statistics,
and the term counts behind the common-term rule and dedup's lookup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..types import ItemQuery
from .base import MatchMode, Table, TurnQuery
from .pg_connection import PostgresConnection
from .sql_backend import Run
from .sql_keyword import common_term_rows, keyword_hits
from .sql_rows import item_where_sql, turn_where_sql

_IDF = """idf AS MATERIALIZED (
    SELECT l.lexeme, greatest(ln((greatest(?::float8, d.df) - d.df + 0.5) / (d.df + 0.5)), 1e-6)
           AS idf
    FROM unnest({lexemes}) AS l(lexeme) CROSS JOIN LATERAL (
        SELECT count(*) AS df FROM {table}_terms AS p
        WHERE p.user_id = ? AND p.lexeme = l.lexeme) AS d
)"""
"""Each lexeme's idf (FTS5's, floored at 1e-6), its document count an index-only count
of its postings for the user: a row per lexeme, computed before any posting is read."""
_BM25_SQL = """
WITH {idf}, scored AS MATERIALIZED (
    SELECT p.pk, sum(i.idf * p.freq * 2.2
                     / (p.freq + 1.2 * (0.25 + 0.75 * (p.doc_len + 1) / ?::float8))
                     ORDER BY p.lexeme) AS score
    FROM {table}_terms AS p JOIN idf AS i ON i.lexeme = p.lexeme
    WHERE p.user_id = ? AND p.lexeme = ANY({lexemes})
    GROUP BY p.pk{having}
)
SELECT t.id, s.score FROM (SELECT pk, score FROM scored ORDER BY score DESC, pk) AS s
CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?
"""
"""FTS5's bm25 (k1 = 1.2, b = 0.75, idf floored at 1e-6) over the postings of the
query's lexemes in ``<table>_terms`` (m0007), read once: a term's document count is
its number of postings for the user (``_IDF``), a row's score the sum over its
postings, with the term frequency (weight-B positions, a turn's neighbours' text,
counting 0.4) and row length (``doc_len``, tokens, plus one: FTS5 counts the user's
scope token, see ``sqlite_keyword.keyword_scope``) stored in each posting. ``two``
keeps the rows with two postings (``_TWO``; a row has one per lexeme); AND, over two
lexemes or more, is ``_BM25_EVERY_SQL``. The filters are checked on the rows in score
order, until ``limit`` pass.
The row count is cached (``CORPUS_TTL_S``) and another process's writes do not drop
it, so a term may be in more rows than it says: the count is taken as at least the
term's, and the idf then floors at 1e-6 as for a term in every row.
Each row's terms are summed in lexeme order, whatever plan the aggregate gets, so rows
with the same terms and length score the same to the last bit and ``pk`` breaks the
tie. (Before, the order was the plan's: a sort by ``pk`` alone could shuffle a row's
terms, and 33 of 396 lists of a comparison differed in a score's last bit.)

Before, the postings were read with a window counting each lexeme's, materialised,
and for ``two`` sorted by ``pk`` for a second window. Now the counts come first, from
the index alone, and only the aggregate by ``pk`` holds the postings. On 30,000 turns
two-of went from 41.5 / 283.8 to 33.9 / 145.5 ms p50 / p95, OR from 5.3 / 16.5 to
3.5 / 15.6 (the same rows in the same order in all 396 lists compared; docs/retrieval.md,
round ten).

The shape keeps plans sane under stale statistics (a user who just wrote thousands of
rows may look like a user of one row to the planner): the lexemes are an ``= ANY``
index condition as well as the join's (a join alone, under a one-row estimate, read all
the user's postings once per lexeme), nothing joins two intermediate results (``idf``
has a row per lexeme; a one-row estimate makes such a join a quadratic nested loop),
and each candidate is fetched by ``pk`` alone in a subquery that ``OFFSET 0`` keeps the
filters out of (given ``user_id = ?`` and a one-row estimate, the planner scanned the
user's rows instead)."""
_LEXEMES = "tsvector_to_array(to_tsvector('ledgermem_english', ?))"
_TWO = " HAVING count(*) >= 2"
_BM25_EVERY_SQL = """
WITH {idf}, every AS MATERIALIZED ({every}
), scored AS MATERIALIZED (
    SELECT e.pk, (SELECT sum(i.idf * h.freq * 2.2
                             / (h.freq + 1.2 * (0.25 + 0.75 * (h.doc_len + 1) / ?::float8))
                             ORDER BY h.lexeme)
                  FROM {table}_terms AS h JOIN idf AS i ON i.lexeme = h.lexeme
                  WHERE h.pk = e.pk) AS score
    FROM every AS e
)
SELECT t.id, s.score FROM (SELECT pk, score FROM scored ORDER BY score DESC, pk) AS s
CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?
"""
"""``_BM25_SQL`` for ``and`` (two lexemes or more), the same scores to the last bit
without scoring every posting. ``_BM25_SQL`` scores each posting of every
lexeme and keeps the rows holding all of them: a question with one word in most of
the user's rows (at 30,000 turns, one in 27,000) scored 30,000 postings to keep five
rows. Here each lexeme's document count is an index-only count, the rows holding all
of them an ``INTERSECT`` of index-only scans of ``pk`` alone, and only those rows'
postings are read (through the ``(pk)`` index) and scored, summed in lexeme order as
there. Nothing joins two intermediate results: ``idf`` has a row per lexeme."""
_BM25_BOTH_SQL = """
WITH {idf}, scored AS MATERIALIZED (
    SELECT p.pk, sum(i.idf * p.freq * 2.2
                     / (p.freq + 1.2 * (0.25 + 0.75 * (p.doc_len + 1) / ?::float8))
                     ORDER BY p.lexeme) AS score, count(*) AS held
    FROM {table}_terms AS p JOIN idf AS i ON i.lexeme = p.lexeme
    WHERE p.user_id = ? AND p.lexeme = ANY(?::text[])
    GROUP BY p.pk
)
(SELECT t.id, s.score, true FROM (SELECT pk, score FROM scored WHERE held = ?
                                 ORDER BY score DESC, pk) AS s
 CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
 WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?)
UNION ALL
(SELECT t.id, s.score, false FROM (SELECT pk, score FROM scored ORDER BY score DESC, pk) AS s
 CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
 WHERE {where} ORDER BY s.score DESC, s.pk LIMIT ?)
"""
"""``and`` and ``or`` over the same lexemes in one statement, for a search none of
whose words is common: ``_BM25_SQL``'s scores (the same sums, in lexeme order, so the
same to the last bit as ``_BM25_EVERY_SQL``'s for the rows holding every lexeme), the
rows holding all of them (``held``: a row has one posting a lexeme) first, marked
true, then the ``or`` ranking, each filtered and cut to its ``LIMIT``."""
_NEWEST_SQL = """
SELECT t.id FROM {table} AS t WHERE {where} AND EXISTS (
    SELECT 1 FROM {table}_terms AS p WHERE p.pk = t.pk AND p.lexeme = ANY(
        tsvector_to_array(to_tsvector('ledgermem_english', ?))))
ORDER BY t.pk DESC LIMIT ?
"""
"""The newest rows (by ``pk``, as SQLite orders by rowid) holding a common term."""
_NEWEST_ALL_SQL = """
SELECT t.id FROM (SELECT pk FROM ({every}) AS e ORDER BY pk DESC) AS s
CROSS JOIN LATERAL (SELECT * FROM {table} AS t WHERE t.pk = s.pk OFFSET 0) AS t
WHERE {where} ORDER BY s.pk DESC LIMIT ?
"""
"""The newest rows holding every one of the query's (common) lexemes (``_every``),
each fetched by ``pk`` as ``_BM25_SQL`` fetches its candidates. Given ``t.pk IN``
instead, the planner merge-joined the rows found with a backward scan of the user's
table: 67,000 rows read for 50 (150 ms at 100,000 turns)."""
CORPUS_TTL_S = 60.0
"""How long a user's row count and mean row length (BM25's corpus statistics) are
reused; this process's own writes to the user drop them at once."""
LEXEMES_KEPT = 100_000
"""Words whose lexemes a store keeps (``_lexemes``); past it they are dropped at once."""
COUNT_HEADROOM = 8
"""Dedup's word counts (``term_counts``) go an eighth further than the common-term
cut-off: the cut-off grows with the rows (a step every 100 rows past 100,000 items), and
a common word kept as past it then stays known as past it until its count expires
(``CORPUS_TTL_S``), instead of being counted again at each step."""
COUNTED_WORDS = 10_000
"""Words whose counts for the common-term rule (``_common_terms``) a store keeps."""


class PostgresKeywordSearch(PostgresConnection):
    """Keyword search over the postings (``PostgresStore``'s)."""

    _corpora: dict[tuple[str, str], tuple[int, int, float]]
    _counted: dict[tuple[str, str, str, int], tuple[tuple[int, int, float], int]]
    _word_lexemes: dict[str, tuple[str, ...]]

    def _keyword_search(self, table: str, user_id: str, terms: Sequence[str],
                        mode: MatchMode, where: str, params: list[Any], limit: int
                        ) -> list[tuple[str, float]]:
        """``sql_keyword.keyword_hits`` over the postings, as on SQLite. BM25 as FTS5
        computes it (same k1, b, column weights and idf floor); corpus statistics and term
        counts are this user's. Terms reach PostgreSQL as bound values parsed by
        ``to_tsvector``: no query syntax in them is interpreted."""
        if not terms:
            return []
        with self._writing() as run:
            n_rows, avgdl = self._corpus(run, table, user_id)
            if not n_rows:
                return []

            def bm25(words: Sequence[str], how: MatchMode) -> list[tuple[str, float]]:
                if how == "triples":
                    lexemes = self._lexemes(run, words)  # every word's, in one round trip
                    groups = [group for start in range(0, len(words), 3)
                              if (group := self._lexemes(run, words[start:start + 3]))]
                    if not groups:
                        return []
                    branches = [_every(table, user_id, group) for group in groups]
                    every = " UNION ".join(f"({sql})" for sql, _ in branches)
                    idf = _IDF.format(table=table, lexemes="?::text[]")
                    rows = run(_BM25_EVERY_SQL.format(table=table, idf=idf, every=every,
                                                      where=where),
                               [n_rows, lexemes, user_id,
                                *(value for _, values in branches for value in values),
                                avgdl + 1, *params, limit])
                    return [(r[0], float(r[1])) for r in rows]
                block = self._local.block
                either_key = ((table, user_id, tuple(words), where, repr(params), limit)
                              if block is not None else ())
                if how == "and":
                    lexemes = self._lexemes(run, words)
                    if len(lexemes) > 1 and block is not None and not self._common_terms(
                            run, table, user_id, words, common_term_rows(n_rows)):
                        # No word is common: ranking every posting costs about what the
                        # INTERSECT does, and gives the ``or`` search's rows as well
                        # (a search asks for them next when these are too few).
                        rows = run(_BM25_BOTH_SQL.format(
                            table=table, where=where,
                            idf=_IDF.format(table=table, lexemes="?::text[]")),
                            [n_rows, lexemes, user_id, avgdl + 1, user_id, lexemes,
                             len(lexemes), *params, limit, *params, limit])
                        block.either[either_key] = [(r[0], float(r[1])) for r in rows
                                                    if not r[2]]
                        return [(r[0], float(r[1])) for r in rows if r[2]]
                    if len(lexemes) > 1:
                        every, every_params = _every(table, user_id, lexemes)
                        idf = _IDF.format(table=table, lexemes="?::text[]")
                        rows = run(_BM25_EVERY_SQL.format(table=table, idf=idf, every=every,
                                                          where=where),
                                   [n_rows, lexemes, user_id, *every_params, avgdl + 1,
                                    *params, limit])
                        return [(r[0], float(r[1])) for r in rows]
                if how == "or" and block is not None and either_key in block.either:
                    return block.either.pop(either_key)
                text = " ".join(words)
                rows = run(_BM25_SQL.format(table=table, lexemes=_LEXEMES, where=where,
                                            idf=_IDF.format(table=table, lexemes=_LEXEMES),
                                            having=_TWO if how == "two" else ""),
                           [n_rows, text, user_id, avgdl + 1, user_id, text, *params, limit])
                return [(r[0], float(r[1])) for r in rows]

            def newest(words: Sequence[str], how: MatchMode) -> list[str]:
                text = " ".join(words)
                if how == "and":
                    lexemes = self._lexemes(run, words)
                    if not lexemes:
                        return []
                    every, every_params = _every(table, user_id, lexemes)
                    return [r[0] for r in run(
                        _NEWEST_ALL_SQL.format(table=table, where=where, every=every),
                        [*every_params, *params, limit])]
                return [r[0] for r in run(_NEWEST_SQL.format(table=table, where=where),
                                          [*params, text, limit])]

            return keyword_hits(
                terms, mode, limit, bm25=bm25, newest=newest,
                common_terms=lambda words: self._common_terms(
                    run, table, user_id, words, common_term_rows(n_rows)))

    def _lexemes(self, run: Run, words: Sequence[str]) -> list[str]:
        """The distinct lexemes of ``words`` as ``to_tsvector('ledgermem_english')``
        gives them (none for a word its parser drops), sorted. Each word's are kept
        (``LEXEMES_KEPT`` words), so a search asks the server only for words it has not
        met."""
        known = self._word_lexemes  # shared by threads: read once per word, never twice
        found = {word: known.get(word) for word in words}
        missing = sorted(word for word, lexemes in found.items() if lexemes is None)
        if missing:
            fetched = {r[0]: tuple(r[1]) for r in run(
                "SELECT w, tsvector_to_array(to_tsvector('ledgermem_english', w)) "
                "FROM unnest(?::text[]) AS w", [missing])}
            self._keep_lexemes(fetched)
            found.update(fetched)
        return sorted({lexeme for lexemes in found.values() for lexeme in lexemes or ()})

    def _keep_lexemes(self, fetched: dict[str, tuple[str, ...]]) -> None:
        """Keep each word's lexemes (``_lexemes``), up to ``LEXEMES_KEPT`` words."""
        known = self._word_lexemes
        if len(known) + len(fetched) > LEXEMES_KEPT:
            known.clear()
        known.update(fetched)

    def _common_terms(self, run: Run, table: str, user_id: str, terms: Sequence[str],
                      cutoff: int) -> set[str]:
        """The terms whose postings for this user outnumber ``cutoff``. Each word's
        count is kept while the user's cached corpus statistics are, and only the words
        not kept are counted (a search asks for its words' for the ``and`` search and
        again for the ``or`` one, and a time-naming one again without its time words)."""
        corpus = self._corpora.get((table, user_id))
        words = sorted(set(terms))
        counts: dict[str, int] = {}
        for word in words:
            kept = self._counted.get((table, user_id, word, cutoff))
            if kept is not None and corpus is not None and kept[0] is corpus:
                counts[word] = kept[1]
        missing = [word for word in words if word not in counts]
        if missing:
            fresh = self._term_counts(run, table, user_id, missing, cutoff)
            counts.update(fresh)
            if corpus is not None:
                if len(self._counted) + len(fresh) > COUNTED_WORDS:
                    self._counted.clear()
                for word, count in fresh.items():
                    self._counted[(table, user_id, word, cutoff)] = (corpus, count)
        return {term for term, count in counts.items() if count > cutoff}

    def term_counts(self, user_id: str, table: Table, terms: Sequence[str]
                    ) -> tuple[int, dict[str, int]]:
        """As on SQLite, over this user's postings: ``common_term_rows`` of the user's
        rows, and each term's postings stopping past it (``_term_counts``)."""
        with self._writing() as run:
            cutoff = common_term_rows(self._corpus(run, table, user_id)[0])
            counts, missing = self._words.known(table, user_id, sorted(set(terms)), cutoff)
            if missing:
                counted_to = cutoff + cutoff // COUNT_HEADROOM
                fresh = self._term_counts(run, table, user_id, missing, counted_to)
                self._words.keep(table, user_id, fresh, counted_to)
                counts.update((word, min(count, cutoff + 1)) for word, count in fresh.items())
            return cutoff, counts

    def _term_counts(self, run: Run, table: str, user_id: str, terms: Sequence[str],
                     cutoff: int) -> dict[str, int]:
        """Each term's postings for this user (those of all its lexemes), each count
        stopping past ``cutoff``: one statement for every term. Its lexemes come back
        too, kept for ``_lexemes`` (a search's AND asks for them next)."""
        words = sorted(set(terms))
        if not words:
            return {}
        rows = run(f"SELECT term, l.lexemes, (SELECT count(*) FROM (SELECT 1 FROM "
                   f"{table}_terms AS p WHERE p.user_id = ? AND p.lexeme = ANY(l.lexemes) "
                   "LIMIT ?) AS c) FROM unnest(?::text[]) AS term CROSS JOIN LATERAL (SELECT "
                   "tsvector_to_array(to_tsvector('ledgermem_english', term)) AS lexemes) AS l",
                   [user_id, cutoff + 1, words])
        self._keep_lexemes({r[0]: tuple(r[1]) for r in rows})
        return {r[0]: int(r[2]) for r in rows}

    def _corpus(self, run: Run, table: str, user_id: str) -> tuple[int, float]:
        """(rows, mean tokens per row) of this user's table, cached (``CORPUS_TTL_S``)
        since counting is linear in the user's rows. An empty table is not cached past
        the open block (``reading``: a search asks for knowledge's twice): search skips
        it, so a stale zero would hide rows another process (or a rebuild) wrote
        meanwhile; stale non-zero statistics only shift scores."""
        key, block = (table, user_id), self._local.block
        if block is not None and key in block.empty:
            return 0, 1.0
        cached = self._corpora.get(key)
        if cached is None or cached[2] <= time.monotonic():
            n_rows, length = run(f"SELECT count(*), coalesce(sum(doc_len), 0) FROM {table} "
                                 "WHERE user_id = ?", [user_id])[0]
            cached = (int(n_rows), int(length), time.monotonic() + CORPUS_TTL_S)
            if n_rows:
                self._corpora[key] = cached
            elif block is not None:
                block.empty.add(key)
        n_rows, length = cached[0], cached[1]
        return n_rows, (length / n_rows if n_rows else 0.0) or 1.0

    def _postings(self, user_id: str, terms: Sequence[str], cap: int
                  ) -> dict[str, list[int]]:
        """Every term's postings (those of all its lexemes) in one statement, each term's
        read through the postings index (a lookup per term, as ``_term_counts``) and sent
        as one array: a text's rarest words hold hundreds of rows, each a result row for
        the driver to build and a step to gather otherwise."""
        if not terms:
            return {}
        return {term: pks for term, pks in self._read(
            "SELECT w.term, (SELECT array_agg(p.pk) FROM (SELECT p.pk FROM knowledge_terms AS p "
            "WHERE p.user_id = ? AND p.lexeme = ANY(tsvector_to_array(to_tsvector("
            "'ledgermem_english', w.term))) LIMIT ?) AS p) FROM unnest(?::text[]) AS w(term)",
            [user_id, cap + 1, list(terms)]) if pks}

    def keyword_search_items(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = item_where_sql(user_id, query, prefix="t.")
        return self._keyword_search("knowledge", user_id, terms, mode, where, params, limit)

    def keyword_search_turns(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = turn_where_sql(user_id, query, prefix="t.")
        return self._keyword_search("conversations", user_id, terms, mode, where, params,
                                    limit)


def _every(table: str, user_id: str, lexemes: Sequence[str]) -> tuple[str, list[Any]]:
    """The ``INTERSECT`` that finds the user's rows holding every one of ``lexemes``,
    with its parameters: a branch a lexeme, each an index-only scan of its postings
    carrying nothing but ``pk``."""
    branch = f"SELECT pk FROM {table}_terms WHERE user_id = ? AND lexeme = ?"
    return (" INTERSECT ".join([branch] * len(lexemes)),
            [value for lexeme in lexemes for value in (user_id, lexeme)])

