"""Turning user text into safe keyword terms.

User text never reaches a full-text engine raw: it is split into word tokens, each of
which a backend quotes as a literal. Query syntax in the text (quotes, ``*``, ``NEAR``,
``AND``, ``-``, parentheses, control characters) is thus only ever a word or nothing.
"""

from __future__ import annotations

import re

__all__ = ["STOPWORDS", "query_terms", "word_set"]

_WORD = re.compile(r"\w+", re.UNICODE)

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)


def query_terms(text: str, *, max_terms: int = 32) -> list[str]:
    """Distinct lower-case word tokens of ``text``, stopwords dropped when others remain.

    >>> query_terms('What does "Sarah" like? NEAR(tea*) -coffee')
    ['sarah', 'like', 'near', 'tea', 'coffee']
    """
    words = _lower_words(text)
    seen: dict[str, None] = {}
    for word in words:
        if word not in STOPWORDS:
            seen.setdefault(word, None)
    if not seen:
        for word in words:
            seen.setdefault(word, None)
    return list(seen)[:max_terms]


def word_set(text: str) -> frozenset[str]:
    """Lower-case word tokens of ``text`` (for overlap measures)."""
    return frozenset(_lower_words(text))


def _lower_words(text: str) -> list[str]:
    """``text``'s word tokens, each lower-cased. An ASCII text is lower-cased whole
    first, which splits it the same way; elsewhere lower-casing can change where a
    word ends ("İ" becomes "i" and a combining dot), so each token is lowered alone."""
    if text.isascii():
        return _WORD.findall(text.lower())
    return [w.lower() for w in _WORD.findall(text)]
