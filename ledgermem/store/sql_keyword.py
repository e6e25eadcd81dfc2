"""Keyword search as both SQL stores run it over their own primitives (BM25, term
counts, the newest rows holding a term), the rule that tells common terms from rare
ones, and dedup's lookup of the items holding two of a text's words.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ..types import ItemQuery
from .base import POSTINGS_CAP, MatchMode, holding_two, iter_chunks, rare_and_common
from .sql_backend import SQLBackend
from .sql_rows import item_where_sql, marks

COMMON_TERM_MIN_ROWS = 1_000
COMMON_TERM_SHARE = 0.01
"""A keyword held by more rows than both of these (a count, a share of the rows) is
*common*. Rows that hold only common keywords are not BM25-ranked by an ``or`` search,
which would score every one of them (tens of thousands in a large scope), but come
after the rows holding a rarer keyword, newest first. Their BM25 weight is small
anyway (a term in 1% of rows has an idf of 4.6, one in 0.01% of 9.2)."""


TERMS_PER_STATEMENT = 200
"""Terms one statement counts (``term_counts``): a batch's words are counted in a few
statements, well under the drivers' limits on bound parameters."""


def common_term_rows(rows: int) -> int:
    """Rows a keyword may be in before it counts as common, in a corpus of ``rows``."""
    return max(COMMON_TERM_MIN_ROWS, int(COMMON_TERM_SHARE * rows))


def common_term_rows_sql(rows_sql: str) -> tuple[str, list[Any]]:
    """``common_term_rows`` as an SQL expression over ``rows_sql`` (an expression giving
    the corpus size), with its parameters: a store can count the corpus and the terms
    in one statement. CAST truncates toward zero, as ``int()`` does."""
    return (f"max(?, CAST(? * ({rows_sql}) AS INTEGER))",
            [COMMON_TERM_MIN_ROWS, COMMON_TERM_SHARE])


def _kind_matches(row: Sequence[Any], query: ItemQuery) -> bool:
    """Whether a row's (id, category, context, entity) passes ``query``'s filters on
    those three columns."""
    return ((query.category is None or query.category == row[1])
            and (query.context is None or query.context == row[2])
            and (query.entity is None or query.entity == row[3]))


def keyword_hits(
    terms: Sequence[str], mode: MatchMode, limit: int, *,
    bm25: Callable[[Sequence[str], MatchMode], list[tuple[str, float]]],
    common_terms: Callable[[Sequence[str]], set[str]],
    newest: Callable[[Sequence[str], MatchMode], list[str]],
) -> list[tuple[str, float]]:
    """The keyword search both stores run over their own primitives: ``and`` ranks the
    rows holding every term by BM25, ``two`` those holding two of them, ``triples``
    those holding all of one triple; ``or`` ranks by BM25 over the terms that are not
    common, then fills with the newest rows holding a common one (score 0). ``two`` of
    two terms is ``and`` (BM25 always), of one ``or``. When every term is common,
    ``and`` lists the rows holding them all newest first (score 0), as ``or`` does:
    ranking them could mean scoring thousands of rows, as many as a common term's.

    ``bm25(terms, mode)`` returns up to ``limit`` (id, score) best first,
    ``common_terms(terms)`` the common ones, ``newest(terms, mode)`` up to ``limit`` ids
    of rows holding any (``or``) or all (``and``) of ``terms``, newest first.
    """
    if mode == "triples" or (mode == "two" and len(terms) > 2):
        return bm25(terms, mode)
    if mode in ("and", "two") and len(terms) > 1:
        # Not for ``two``: dedup's lookup wants the shortest rows holding a short
        # text's words, which BM25 ranks first, not the newest.
        if mode == "two" or len(common_terms(terms)) < len(terms):
            return bm25(terms, "and")
        return [(doc_id, 0.0) for doc_id in newest(terms, "and")]
    common = common_terms(terms)
    rare = [term for term in terms if term not in common]
    found = bm25(rare, "or") if rare else []
    if len(found) < limit and common:
        seen = {doc_id for doc_id, _ in found}
        found += [(doc_id, 0.0) for doc_id in newest([t for t in terms if t in common], "or")
                  if doc_id not in seen]
    return found[:limit]



class SQLKeywordLookup(SQLBackend):
    """Dedup's lookup over a backend's postings (``_postings``, ``_holding_both``)."""

    def items_holding_two(self, user_id: str, term_lists: Sequence[Sequence[str]],
                          limit: int, queries: Sequence[ItemQuery] | None = None
                          ) -> list[list[str] | None]:
        lists = [list(dict.fromkeys(terms)) for terms in term_lists]
        postings = self._postings(user_id, sorted({t for terms in lists for t in terms}),
                                  POSTINGS_CAP)
        rare = [[t for t in terms if len(postings.get(t, ())) <= POSTINGS_CAP]
                for terms in lists]
        # A list with a term past the cap: the rows holding one of its other terms and
        # one of those (``_holding_both``), where the store can tell them apart cheaply.
        mixed = [index for index, terms in enumerate(lists)
                 if rare_and_common(len(terms), len(rare[index]))]
        both = dict(zip(mixed, self._holding_both(user_id, [
            (rare[index], [t for t in lists[index] if t not in rare[index]])
            for index in mixed]) if mixed else [], strict=True))
        held: list[Counter[int] | None] = []
        for index, terms in enumerate(lists):
            if len(rare[index]) == len(terms):
                held.append(holding_two([postings.get(term, ()) for term in terms]))
            elif (also := both.get(index)) is not None:   # as if one term, held by those
                held.append(holding_two([*(postings.get(t, ()) for t in rare[index]), also]))
            else:
                held.append(None)
        # Other users' and superseded rows hold words too: only the user's current
        # items (of the list's query) count towards ``limit``, as the ranked lookup
        # filters before its LIMIT.
        rows: dict[int, tuple[Any, ...]] = {}
        where, params = item_where_sql(user_id, ItemQuery(), by_id=self._hint_ids)
        for chunk in iter_chunks(sorted({pk for pks in held if pks for pk in pks})):
            rows.update({row[0]: row for row in self._read(
                f"SELECT pk, id, category, context, entity FROM knowledge WHERE pk IN "
                f"({marks(len(chunk))}) AND {where}", [*chunk, *params])})
        # The rows of each kind asked for, found once: a batch's texts mostly ask for one.
        of_kind: dict[tuple[str | None, str | None, str | None], set[int]] = {}
        found: list[list[str] | None] = []
        for index, pks in enumerate(held):
            if pks is None:
                found.append(None)
                continue
            query = queries[index] if queries is not None else ItemQuery()
            kind = (query.category, query.context, query.entity)
            if (matching := of_kind.get(kind)) is None:
                matching = of_kind[kind] = {pk for pk, row in rows.items()
                                            if _kind_matches(row[1:], query)}
            kept = [pk for pk in pks if pk in matching]
            if len(kept) > limit:
                # Rarer words weigh more, as in BM25: among items holding as many of the
                # terms, those whose held terms are in the fewest rows (a common term a
                # row holds counts as past the cap).
                also = both.get(index)
                weights: list[tuple[Collection[int], float]] = (
                    [(also, math.log(POSTINGS_CAP + 1))] if also is not None else [])
                weights += [(postings.get(t, ()), math.log(len(postings.get(t, ())) or 1))
                            for t in rare[index]]
                # Each kept row's weights, found from the terms' side (a row holds a few).
                held_weights: dict[int, list[float]] = {pk: [] for pk in kept}
                for holding, weight in weights:
                    for pk in held_weights.keys() & holding:
                        held_weights[pk].append(weight)
                rarity = {pk: sum(of_row) for pk, of_row in held_weights.items()}
                kept.sort(key=lambda pk: (-pks[pk], rarity[pk], -pk))
                kept = kept[:limit]
            else:
                kept.sort(key=lambda pk: (-pks[pk], -pk))
            found.append([rows[pk][1] for pk in kept])
        return found

    def _holding_both(self, user_id: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]
                      ) -> list[set[int] | None]:
        """For each pair of term lists, the ``pk`` of the knowledge rows holding a term of
        the first and one of the second (the user's at least, as ``_postings``), or None
        where the backend cannot find them without reading the second's postings
        (the default)."""
        return [None] * len(pairs)

    @abstractmethod
    def _postings(self, user_id: str, terms: Sequence[str], cap: int
                  ) -> dict[str, list[int]]:
        """For each of ``terms``, the ``pk`` of up to ``cap + 1`` knowledge rows holding it
        (as keyword search matches it), the user's at least; rows of other users may be
        among them."""
