"""When a new text restates an item memory already holds.

A write whose words overlap an active item's by more than ``DEDUP_OVERLAP``
(Szymkiewicz–Simpson: shared words over the smaller set) refreshes that item instead
of adding a copy — but only a true restatement, one that adds words to the other or
drops one or a few of them (``drops``). Texts that differ in what makes a fact a different fact are
never merged, however many words they share: a word of one swapped for another
("allergic to shellfish" / "allergic to peanuts"; stopwords aside), a negation ("Do
not deploy on Fridays" / "Deploy on Fridays"), a number, dose, version or id ("20mg" /
"40mg", "prod-db-1" / "prod-db-2"), a date word ("Monday", "March") or a proper name
("son Tom" / "son Max"). A restatement that drops words leaves the fuller text
(``says_less``). Pure functions: the caller supplies the candidates.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Literal, NamedTuple

from ..retrieval.keyword import STOPWORDS, query_terms, word_set
from ..store.base import rare_and_common
from ..types import Item

__all__ = [
    "DEDUP_OVERLAP",
    "Said",
    "dedup_lookup",
    "dedup_terms",
    "dedup_triples",
    "drops",
    "markers",
    "overlaps",
    "prefix_size",
    "rarest_marker",
    "restates",
    "said",
    "says_less",
    "search_terms",
    "swapped",
    "twin_of",
]

DEDUP_OVERLAP = 0.8

_TOKEN = re.compile(r"[\w'’-]+", re.UNICODE)
_NEGATIONS = frozenset(
    """not no never none nobody nothing nowhere neither nor cannot without dont doesnt didnt
    isnt arent wasnt werent wont wouldnt shouldnt couldnt cant hasnt havent hadnt mustnt
    neednt aint""".split())
_DATE_WORDS = frozenset(
    """monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays
    thursdays fridays saturdays sundays january february march april june july august
    september october november december jan feb mar apr jun jul aug sep sept oct nov dec
    today tomorrow yesterday tonight morning afternoon evening night weekend weekends
    weekday weekdays daily weekly monthly yearly annually""".split())


_PLAIN_SUSPECTS = _NEGATIONS | _DATE_WORDS
"""The lower-case words of letters alone that ``markers`` keeps."""


def markers(text: str) -> frozenset[str]:
    """What makes ``text`` one particular fact: its negations (as one ``¬`` marker, so
    "not" and "never" agree), every token holding a digit, date words, and capitalised
    words that are not stopwords (names), all lower-cased."""
    return _markers(_TOKEN.findall(text))


def _markers(tokens: Iterable[str]) -> frozenset[str]:
    """``markers`` of a text's tokens (``_TOKEN``), in their own case."""
    found: set[str] = set()
    for raw in tokens:
        if raw.isalpha() and raw.islower() and raw not in _PLAIN_SUSPECTS:
            continue    # most words: lower-case letters, no negation or date word
        token = raw.strip("'’-")
        lower = token.lower()
        if lower.replace("’", "'").replace("'", "") in _NEGATIONS or lower.endswith(
                ("n't", "n’t")):
            found.add("¬")
        elif (any(map(str.isdigit, token)) or lower in _DATE_WORDS
              or (token[:1].isupper() and lower not in STOPWORDS)):
            found.add(lower)
    return frozenset(found)


class Said(NamedTuple):
    """What ``restates`` compares of a text (``said``)."""

    words: frozenset[str]
    """Its ``word_set``."""
    markers: frozenset[str]
    """Its ``markers``."""
    tokens: frozenset[str]
    """Every token and word of it, lower-cased: where another text's markers are
    looked for."""


@functools.lru_cache(maxsize=4096)
def said(text: str) -> Said:
    """``text``'s ``Said``, computed once per text while it is among the last 4,096
    asked about: a batch compares each entry with every earlier one that shares its
    words, and reading both texts again for each pair made a batch of 1,000 templated
    notes ("work note 17 on the quarterly budget") take 20 s."""
    words, tokens = word_set(text), _TOKEN.findall(text)
    return Said(words, _markers(tokens), frozenset({w.lower() for w in tokens}) | words)


_word_set = functools.lru_cache(maxsize=4096)(word_set)
"""``word_set``, kept for the last texts asked about: ``restates``' first test of a
stored candidate, before its markers are worth reading (``said``)."""


def restates(text: str, other: str) -> bool:
    """Whether ``text`` (written now) says what ``other`` (stored) says: more than
    ``DEDUP_OVERLAP`` of the smaller word set shared, no word of one swapped for a word
    of the other (``swapped``), no more of ``other`` left out than ``drops`` allows, and
    no negation, number, date or name in one that the other lacks. A name is matched in
    any case ("Tom" in one, "tom" in the other)."""
    mine = said(text)
    if not overlaps(mine.words, _word_set(other)):
        return False            # most candidates: their markers are never read
    theirs = said(other)
    if swapped(mine.words, theirs.words) or drops(mine.words, theirs.words):
        return False
    if ("¬" in mine.markers) != ("¬" in theirs.markers):
        return False
    return mine.markers - {"¬"} <= theirs.tokens and theirs.markers - {"¬"} <= mine.tokens


def overlaps(words: AbstractSet[str], others: AbstractSet[str]) -> bool:
    """Whether two word sets share more than ``DEDUP_OVERLAP`` of the smaller one: the
    first test of ``restates``, alone (a cheap filter over many candidates)."""
    if not words or not others:
        return False
    return len(words & others) / min(len(words), len(others)) > DEDUP_OVERLAP


def swapped(words: AbstractSet[str], others: AbstractSet[str]) -> bool:
    """Whether each of two word sets holds a word the other lacks, stopwords aside:
    one word in place of another ("allergic to shellfish" / "allergic to peanuts",
    "three days a week" / "four days a week") makes another fact, however much else
    the texts share."""
    return bool(words - others - STOPWORDS) and bool(others - words - STOPWORDS)


def drops(words: AbstractSet[str], others: AbstractSet[str]) -> bool:
    """Whether a text of ``words`` leaves out too much of a stored text of ``others`` to
    restate it (stopwords aside): more than one of its words, and ``DEDUP_OVERLAP`` or
    less of them held. "prefers coffee" does not restate "prefers jasmine tea over
    coffee"; "allergic to shellfish" restates "allergic to peanuts and shellfish" (and
    leaves it as it is: ``says_less``). Adding words drops nothing."""
    theirs = others - STOPWORDS
    dropped = len(theirs - words)
    return dropped > 1 and (len(theirs) - dropped) / len(theirs) <= DEDUP_OVERLAP


def says_less(text: str, other: str) -> bool:
    """Whether ``text`` only drops words of ``other`` (stopwords aside): merged into
    ``other``, it leaves ``other``'s fuller text ("Allergic to peanuts" restating
    "Allergic to peanuts since childhood")."""
    mine, theirs = said(text).words - STOPWORDS, said(other).words - STOPWORDS
    return mine < theirs


@functools.lru_cache(maxsize=256)
def prefix_size(size: int) -> int:
    """How many words of a set of ``size`` words, taken in any one order, hold a word of
    every set it ``overlaps`` with as the smaller (or equal) one: one more than the
    words it may lack. (``overlaps``' own comparison decides, so no rounding differs.)"""
    if size <= 0:
        return 0            # an empty set overlaps nothing
    shared = int(DEDUP_OVERLAP * size)
    while shared <= size and not shared / size > DEDUP_OVERLAP:
        shared += 1
    return size - shared + 1


def twin_of(text: str, category: str, context: str, entity: str | None,
            candidates: Iterable[Item]) -> Item | None:
    """The active item of the same category, context and entity that ``text``
    restates (an identical text first), or None."""
    same = [c for c in candidates if c.active
            and (c.category, c.context, c.entity) == (category, context, entity)]
    for candidate in same:
        if candidate.content == text:
            return candidate
    for candidate in same:
        if restates(text, candidate.content):
            return candidate
    return None


@functools.lru_cache(maxsize=4096)
def search_terms(text: str) -> tuple[str, ...]:
    """``text``'s keyword search terms (``query_terms``, all of them), computed once per
    text while it is among the last 4,096 asked about: a batch asks for each text's
    words to count them, to choose its rarest, and for its rarest marker."""
    return tuple(query_terms(text, max_terms=512))


def _by_rarity(text: str, counts: Mapping[str, int] | None) -> list[str]:
    """``text``'s search terms, rarest first by ``counts`` (longest first without, and
    among ties: longer words tend to be rarer)."""
    terms = sorted(search_terms(text), key=lambda w: (-len(w), w))
    if counts is not None:
        terms.sort(key=lambda w: counts.get(w, 0))  # stable: ties stay longest first
    return terms


def dedup_terms(text: str, counts: Mapping[str, int] | None = None) -> Sequence[str]:
    """Words a near-duplicate must contain two of (all, when there are fewer than three).

    An item holding more than 80% of this text's ``n`` words misses at most ``n // 5``
    of them, so it holds at least two of any ``n // 5 + 2``. With ``counts`` (rows
    holding each word, ``Store.term_counts``) the rarest are chosen, so the keyword
    lookup reads the fewest postings; without, the longest, as longer words tend to be
    rarer.
    """
    terms = _by_rarity(text, counts)
    return terms[: max(3, len(terms) // 5 + 2)]


def dedup_triples(text: str, counts: Mapping[str, int]) -> Sequence[str] | None:
    """For a ranked lookup, words a near-duplicate holds all three of one of their
    consecutive triples (keyword mode ``triples``); None for a text of fewer than six
    search terms, which keeps two-of (``dedup_terms``).

    A restatement lacks at most ``n // 5`` of the text's ``n`` words, as for
    ``dedup_terms``; with one triple more than that (and at least two), it holds every
    word of one. The text's rarest words are taken, three a triple, with a triple more
    where the words allow: a restatement lacking one word more, or a shorter stored
    text the new one holds whole, is still found. Rows holding all of three words are
    few even where each word is common, where two-of ranks every row holding two of
    them: at 100,000 items on SQLite a lookup of a text whose chosen words were all in
    more than 1,000 rows took 10.7 ms two-of and 4.9 triples, and found 463 of 463
    restatements missing or adding a word where two-of's ten candidates held 443
    (docs/retrieval.md, round sixteen)."""
    terms = _by_rarity(text, counts)
    lacking = max(1, len(terms) // 5)
    triples = min(len(terms) // 3, lacking + 2)
    return terms[: 3 * triples] if triples > lacking else None


def dedup_lookup(terms: Sequence[str], counts: Mapping[str, int], cutoff: int
                 ) -> tuple[Sequence[str], Literal["two", "or"]]:
    """How a store whose common words' postings are costly to read
    (``Store.common_postings_costly``) is asked for the items holding a
    near-duplicate's ``terms`` (``dedup_terms``, rarest first by ``counts``): two of
    them, or, when some are common (in more than ``cutoff`` rows,
    ``Store.term_counts``) and at least two are not, one of those that are not.

    Two-of reads every posting of the common words: at 100,000 items on PostgreSQL a
    lookup with one common word took 29 ms at the median (cold), one of the rarer
    words 17; with two or more, 86 ms. With one common word nothing is lost: a
    restatement misses at most ``n // 5`` of the text's words, so it holds one of any
    ``n // 5 + 1`` as surely as two of any ``n // 5 + 2``. With more, a restatement
    lacking every rare word chosen would be missed; at least two rare words are asked
    for, so that a restatement holding them ranks above the rows holding one.
    (Restatements missing a word, 800 in batches and 180 one at a time at 100,000
    items on PostgreSQL: as many merged as with two-of.)"""
    rare = [term for term in terms if counts.get(term, 0) <= cutoff]
    if rare_and_common(len(terms), len(rare)):
        return rare, "or"
    return terms, "two"


def rarest_marker(text: str, counts: Mapping[str, int]) -> tuple[int, str] | None:
    """Of ``text``'s markers that are also its search terms (a number, a date word, a
    name: one word each), the one the fewest rows hold by ``counts``, with that count;
    None when it has none. Every restatement of ``text`` holds it (``restates``)."""
    terms = search_terms(text)
    found = [(counts.get(marker, 0), marker) for marker in said(text).markers if marker in terms]
    return min(found) if found else None
