"""SQLite's keyword search: FTS5 MATCH expressions that take user text literally,
each user's rows narrowed by a scope token, BM25 ranking, and the term counts behind
the common-term rule and dedup's lookup.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

from ..domain.projection import TEXT_KEPT_KINDS
from ..types import Event, ItemQuery
from .base import MatchMode, Table, TurnQuery, iter_chunks
from .migrations import FTS_COLUMNS
from .sql import SQLStore
from .sql_keyword import TERMS_PER_STATEMENT, common_term_rows_sql, keyword_hits
from .sql_rows import item_where_sql, turn_where_sql

_BM25: dict[str, str] = {
    "knowledge": "bm25(knowledge_fts, 1.0, 1.0, 0.0)",
    "conversations": "bm25(conversations_fts, 1.0, 1.0, 0.4, 1.0, 0.0)",
}
"""BM25 with column weights (``FTS_COLUMNS`` and the scope token, which weighs
nothing). Knowledge: content, entity. Turns: content, speaker name, neighbours' text
(light), day in words."""


def fts_match_sql(terms: Sequence[str], mode: MatchMode) -> str:
    """An FTS5 MATCH expression that treats every term as a literal phrase (``two``:
    any two of them, as an OR of pairs, FTS5 having no "at least n of"; ``triples``:
    all of one consecutive triple, an OR of ANDs).

    Terms are double-quoted (inner quotes doubled), so FTS5 operators and syntax in
    user text (``AND``, ``NEAR``, ``*``, ``-``, parentheses) are matched as words.
    """
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms]
    if mode == "triples":
        return " OR ".join(f"({' '.join(quoted[start:start + 3])})"
                           for start in range(0, len(quoted), 3))
    if mode == "two" and len(quoted) > 2:
        return " OR ".join(f"({a} {b})" for a, b in combinations(quoted, 2))
    return (" OR " if mode == "or" or len(quoted) == 1 else " ").join(quoted)


def keyword_scope(user_id: str) -> str:
    """The one-word token the full-text indexes hold for ``user_id``'s rows: what the
    ``scope`` column computes, ``'u' || hex(user_id)`` (FTS5 folds the case)."""
    return "u" + user_id.encode("utf-8").hex()


def text_match(table: Table, terms: Sequence[str], mode: MatchMode) -> str:
    """``fts_match_sql`` over ``table``'s text columns (never the scope token)."""
    return columns_match(table, fts_match_sql(terms, mode))


def columns_match(table: Table, expression: str) -> str:
    """An FTS5 ``expression`` over ``table``'s text columns (never the scope token)."""
    return f"{{{' '.join(FTS_COLUMNS[table])}}} : ({expression})"


def scoped_match(table: Table, user_id: str, terms: Sequence[str], mode: MatchMode) -> str:
    """``text_match``, limited to ``user_id``'s rows by their scope token."""
    return in_scope(user_id, text_match(table, terms, mode))


def in_scope(user_id: str, match: str) -> str:
    """An FTS5 ``match`` limited to ``user_id``'s rows by their scope token.

    The token is a filter, not the check: a search still compares ``user_id`` (two
    ids could stem to one token)."""
    return f'scope : "{keyword_scope(user_id)}" AND {match}'


SCOPE_SHARE = 0.5
"""A user holding less than this share of a table's rows is searched through the scope
token; a larger one without it. FTS5 walks the token's row list to intersect it with
the query's: about 35 ns a row, 2.8 ms for a user of 80,000 rows, where ranking the
few other users' rows and dropping them costs less (measured: docs/retrieval.md,
"Keyword search scoped to its user")."""
KEYWORD_STATS_TTL_S = 60.0
"""How long a user's share of a table, and a query's term counts, are reused before
they are counted again (another process's writes do not drop them)."""
COUNTED_WORDS = 10_000
"""Words whose counts a store keeps per table (``_term_counts``) before it starts over."""
SPAN_SHARE = 0.25
SPAN_ROWS = 20_000
"""A search of turns inside a time range reads only the index's stretch of rowids
between the range's turns when that stretch is at most ``SPAN_SHARE`` of the table and
the range holds at most ``SPAN_ROWS`` of the user's turns (``SQLiteStore._turn_span``)."""
SHARE_RECOUNT_ROWS = 1_000
"""A share is also counted again once this process has appended more events since the
count than the table then held (or than this many): a table that grew from empty."""


class SQLiteKeywordSearch(SQLStore):
    """Keyword search over the FTS5 indexes (``SQLiteStore``'s)."""

    _shares: dict[tuple[str, str], tuple[float, float, int, int]]
    _appended: int
    _counted: dict[str, tuple[int, float, int, dict[str, int]]]

    def keyword_search_items(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        # Only current-ness narrows a plain query beyond its user: few of the best
        # rows are superseded, so ranking the index alone first pays (``_bm25``).
        plain = query == ItemQuery(include_superseded=query.include_superseded)
        return self._keyword("knowledge", user_id, terms, mode, query, plain, limit)

    def keyword_search_turns(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        return self._keyword("conversations", user_id, terms, mode, query,
                             query == TurnQuery(), limit)

    def _keyword(self, table: Table, user_id: str, terms: Sequence[str], mode: MatchMode,
                 query: ItemQuery | TurnQuery, plain: bool, limit: int
                 ) -> list[tuple[str, float]]:
        """``sql_keyword.keyword_hits`` over FTS5 (BM25, counts and statistics of the
        whole file), each match limited to the user's rows by their ``scope`` token
        unless the user holds most of them (``SCOPE_SHARE``)."""
        if not terms:
            return []
        fts = f"{table}_fts"
        share = self._share(table, user_id)
        scoped = share < SCOPE_SHARE

        def match(words: Sequence[str], how: MatchMode) -> str:
            return (scoped_match(table, user_id, words, how) if scoped
                    else text_match(table, words, how))

        spans: list[tuple[int, int] | None] = []  # ``_turn_span``, read on first use

        def where(by_id: bool) -> tuple[str, list[Any]]:
            if isinstance(query, ItemQuery):
                return item_where_sql(user_id, query, prefix="t.", by_id=by_id)
            clause, params = turn_where_sql(user_id, query, prefix="t.", by_id=by_id)
            if not spans:
                spans.append(self._turn_span(user_id, query))
            if spans[0] is None:
                return clause, params
            return f"{fts}.rowid BETWEEN ? AND ? AND {clause}", [*spans[0], *params]

        def newest(words: Sequence[str], how: MatchMode) -> list[str]:
            clause, params = where(False)
            return [r[0] for r in self._read(
                f"SELECT t.id FROM {fts} JOIN {table} AS t ON t.pk = {fts}.rowid "
                f"WHERE {fts} MATCH ? AND {clause} ORDER BY {fts}.rowid DESC LIMIT ?",
                [match(words, how), *params, limit])]

        return keyword_hits(
            terms, mode, limit,
            bm25=lambda words, how: self._bm25(table, match(words, how), where,
                                               plain, limit, 1.0 if scoped else share),
            common_terms=lambda words: self._common_terms(fts, table, words), newest=newest)

    def _turn_span(self, user_id: str, query: TurnQuery | ItemQuery) -> tuple[int, int] | None:
        """For a search of turns inside a time range, the least and greatest ``pk`` of
        the user's turns in that range; None without a range, or when bounding by them
        would not pay.

        Bounding the match's rowids by them changes no answer (the range's own filter
        still applies), but FTS5 then reads only that stretch of each term's postings:
        turns are mostly written in time order, so a day or a month of them is a short
        stretch, and a time-naming search costs what its window holds rather than every
        row matching its words (at 100,000 turns a month's search took 10 ms bounded,
        38 ms at p95 not).

        The exact bounds take a read of every turn in the range (0.3 µs a turn), so two
        probes of the ``(user_id, ts)`` index come first: the range's earliest and
        latest turn. When the ``pk`` stretch between them is more than ``SPAN_SHARE`` of
        the table, bounding would skip too little to pay for that read (a year of
        100,000 turns cost 35 ms to read twice); and the read stops past ``SPAN_ROWS``
        turns, for turns written out of time order."""
        if not isinstance(query, TurnQuery) or (query.time_from is None
                                                and query.time_to is None):
            return None
        times = [(f"ts {op} ?", bound) for op, bound in ((">=", query.time_from),
                                                         ("<=", query.time_to))
                 if bound is not None]
        inside = " AND ".join(["user_id = ?", *(clause for clause, _ in times)])
        params = [user_id, *(bound for _, bound in times)]
        first, last, top = self._read(
            f"SELECT (SELECT pk FROM conversations WHERE {inside} ORDER BY ts LIMIT 1), "
            f"(SELECT pk FROM conversations WHERE {inside} ORDER BY ts DESC LIMIT 1), "
            f"(SELECT max(pk) FROM conversations)", [*params, *params])[0]
        if first is None:
            return 0, -1  # no turn in the range
        if abs(last - first) > SPAN_SHARE * top:
            return None
        low, high, rows = self._read(
            f"SELECT min(pk), max(pk), count(*) FROM (SELECT pk FROM conversations "
            f"WHERE {inside} LIMIT {SPAN_ROWS + 1})", params)[0]
        return None if rows > SPAN_ROWS else (low, high)

    def _postings(self, user_id: str, terms: Sequence[str], cap: int
                  ) -> dict[str, list[int]]:
        """One FTS5 match of each term alone (through the user's scope token, as
        ``_keyword``), ``TERMS_PER_STATEMENT`` terms a statement."""
        return dict(zip(terms, self._rowids(user_id, [
            text_match("knowledge", [term], "or") for term in terms], cap), strict=True))

    def _holding_both(self, user_id: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]
                      ) -> list[set[int] | None]:
        """One FTS5 match of each pair, ``(first OR …) AND (second OR …)``: FTS5 steps
        through a common word's doclist by rowid to the rows holding the rarer words, so
        that word's postings are not read (1–2 ms where two-of over both ranked its
        holders in 7–13 ms at 100,000 items)."""
        return [set(pks) for pks in self._rowids(user_id, [columns_match(
            "knowledge", f"({fts_match_sql(first, 'or')}) AND ({fts_match_sql(second, 'or')})")
            for first, second in pairs], None)]

    def _rowids(self, user_id: str, matches: Sequence[str], cap: int | None
                ) -> list[list[int]]:
        """The rowids of the knowledge rows each FTS5 expression matches (up to ``cap`` + 1
        of them), through the user's scope token where it narrows the search,
        ``TERMS_PER_STATEMENT`` expressions a statement. Each comes back as one JSON
        array (``json_group_array``): a row per rowid cost twice as much to fetch, and
        a comma-separated list half as much again to parse."""
        scoped = self._share("knowledge", user_id) < SCOPE_SHARE
        limit = "" if cap is None else f" LIMIT {int(cap) + 1}"
        found: list[list[int]] = []
        for part in iter_chunks(matches, TERMS_PER_STATEMENT):
            rows = dict(self._read(" UNION ALL ".join(
                f"SELECT {index}, (SELECT json_group_array(rowid) FROM (SELECT rowid FROM "
                f"knowledge_fts WHERE knowledge_fts MATCH ?{limit}))"
                for index in range(len(part))),
                [in_scope(user_id, match) if scoped else match for match in part]))
            found.extend(json.loads(rows[index]) for index in range(len(part)))
        return found

    def _share(self, table: Table, user_id: str) -> float:
        """About the share of ``table``'s rows that are ``user_id``'s; ``SCOPE_SHARE``
        when it is that or more (counted no further). Kept ``KEYWORD_STATS_TTL_S``, or until
        ``SHARE_RECOUNT_ROWS``."""
        key, now = (table, user_id), time.monotonic()
        known = self._shares.get(key)
        if (known is None or known[1] <= now
                or self._appended - known[2] > max(known[3], SHARE_RECOUNT_ROWS)):
            total = f"(SELECT coalesce(max(pk), 0) FROM {table})"
            total_rows, rows = self._read(
                f"SELECT {total}, (SELECT count(*) FROM (SELECT 1 FROM {table} WHERE "
                f"user_id = ? LIMIT (SELECT CAST({total} * ? AS INTEGER) + 1)))",
                [user_id, SCOPE_SHARE])[0]
            share = min(1.0, rows / total_rows) if total_rows else 0.0
            if len(self._shares) >= 10_000:
                self._shares.clear()
            known = self._shares[key] = (min(share, SCOPE_SHARE), now + KEYWORD_STATS_TTL_S,
                                         self._appended, total_rows)
        return known[0]

    def append(self, events: Sequence[Event]) -> None:
        super().append(events)
        # Events that change no indexed text (a search's bookkeeping) keep the counts.
        self._appended += sum(event.kind not in TEXT_KEPT_KINDS for event in events)

    def _bm25(self, table: Table, match: str,
              where: Callable[[bool], tuple[str, list[Any]]], plain: bool, limit: int,
              share: float) -> list[tuple[str, float]]:
        """The ``limit`` best rows matching ``match`` and ``where``, by BM25.

        A plain query (``where`` narrows no further than the user, and for items their
        being current) ranks the index alone and then reads only its best rows: a join
        ranks every matching row after reading it from the table, which cost a LoCoMo
        search as much as the ranking. ``share`` is the part of the index's best rows
        expected to pass (the user's share of the table, when ``match`` does not hold
        the scope token). The filter marks the rows it drops (a left join); should it
        drop so many that fewer than ``limit`` remain, the joined statement runs."""
        fts, bm25 = f"{table}_fts", _BM25[table]
        if plain:
            # Without the scope token the index's best rows include other users',
            # about 1 - ``share`` of them.
            wanted = int((limit + limit // 4 + 1) / share)
            clause, params = where(True)
            ranked = self._read(
                f"SELECT t.id, -s.score FROM (SELECT rowid, {bm25} AS score FROM {fts} "
                f"WHERE {fts} MATCH ? ORDER BY score LIMIT ?) AS s "
                f"LEFT JOIN {table} AS t ON t.pk = s.rowid AND {clause} ORDER BY s.score",
                [match, wanted, *params])
            kept = [(doc_id, float(score)) for doc_id, score in ranked if doc_id is not None]
            if len(kept) >= limit or len(ranked) < wanted:
                return kept[:limit]
        clause, params = where(False)
        rows = self._read(
            f"SELECT t.id, -{bm25} AS score FROM {fts} JOIN {table} AS t ON t.pk = {fts}.rowid "
            f"WHERE {fts} MATCH ? AND {clause} ORDER BY {bm25} LIMIT ?",
            [match, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def _common_terms(self, fts: str, table: str, terms: Sequence[str]) -> set[str]:
        """The terms held by more rows than ``common_term_rows`` allows (see
        ``_term_counts``)."""
        cutoff, counts = self._term_counts(fts, table, terms)
        return {word for word, count in counts.items() if count > cutoff}

    def term_counts(self, user_id: str, table: Table, terms: Sequence[str]
                    ) -> tuple[int, dict[str, int]]:
        """Counted in the whole file as ``_term_counts`` counts, and kept in ``_words``
        with the cut-off they were counted to: no statement when every word is kept,
        else one per ``TERMS_PER_STATEMENT`` words not kept (and, when the rows grew
        past a step of the cut-off, one for the kept words that stopped past the old
        one)."""
        fts, words = f"{table}_fts", sorted(set(terms))
        cutoff = self._words.cutoff(table, user_id)
        counts, missing = (({}, words) if cutoff is None
                           else self._words.known(table, user_id, words, cutoff))
        if missing or cutoff is None:
            counted_to, fresh = self._count_words(fts, table, missing)
            if cutoff is not None and counted_to != cutoff:
                counts, again = self._words.known(
                    table, user_id, [word for word in words if word not in fresh], counted_to)
                if again:
                    fresh.update(self._count_words(fts, table, again)[1])
            cutoff = counted_to
            self._words.keep(table, user_id, fresh, cutoff)
            counts.update(fresh)
        return cutoff, counts

    def _term_counts(self, fts: str, table: str, terms: Sequence[str]
                     ) -> tuple[int, dict[str, int]]:
        """``common_term_rows`` of the whole file (FTS5's BM25 statistics are the
        file's) and each term's rows, each count stopping past that cut-off.

        Each word's count is kept until this process appends an event (or
        ``KEYWORD_STATS_TTL_S``), and only the words not kept are counted: a search
        counts its words for the ``and`` search and again for the ``or`` one, and a
        time-naming one again without its time words (for the rows inside the
        window)."""
        words = sorted(set(terms))
        now, appended = time.monotonic(), self._appended
        kept = self._counted.get(table)
        if (kept is None or kept[0] != appended or kept[1] <= now
                or len(kept[3]) + len(words) > COUNTED_WORDS):
            kept = self._counted[table] = (appended, now + KEYWORD_STATS_TTL_S, 0, {})
        known = kept[3]
        missing = [word for word in words if word not in known]
        if missing or not known:
            cutoff, counted = self._count_words(fts, table, missing)
            known.update(counted)
            kept = self._counted[table] = (kept[0], kept[1], cutoff, known)
        return kept[2], {word: known[word] for word in words}

    def _count_words(self, fts: str, table: str, words: Sequence[str]
                     ) -> tuple[int, dict[str, int]]:
        """The cut-off and each word's rows, counted past it no further: one statement
        for the corpus size and up to ``TERMS_PER_STATEMENT`` words (a statement per
        word cost a search 1 + n statements twice, for turns and for the knowledge they
        gave)."""
        limit, limit_params = common_term_rows_sql(f"SELECT coalesce(max(pk), 0) FROM {table}")
        cutoff, counts = 0, dict[str, int]()
        for part in list(iter_chunks(words, TERMS_PER_STATEMENT)) or [[]]:
            columns = "".join(f", (SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} "
                              f"MATCH ? LIMIT {limit} + 1))" for _ in part)
            params: list[Any] = list(limit_params)
            for word in part:
                params += [fts_match_sql([word], "or"), *limit_params]
            row = self._read(f"SELECT {limit}{columns}", params)[0]
            cutoff = row[0]
            counts.update(zip(part, row[1:], strict=True))
        return cutoff, counts
