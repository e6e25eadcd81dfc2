"""Guards on what a model asks memory to change: deterministic, no I/O, no model.

A prompt can tell a model what to keep; a weak one does not listen. These checks run on
every operation extraction (and every fact consolidation) would apply, and a failing
one is skipped and logged, never applied:

- **information**: the content says something: not a placeholder (``...``, ``N/A``,
  ``<fact>``, empty quotes), not a copy of the prompt's instructions or examples, not
  only a copy of the operation's ``reason`` (unless it is the user's own words);
- **assistant**: a statement that only restates what the assistant said or did (its
  words come from an assistant turn, some of them from no user turn, or it names the
  assistant) is dropped;
- **grounding**: the content's words are supported by a user turn of the batch (at
  least ``grounding`` of them; for an UPDATE, of the words the old version lacks), and
  the ids of the supporting turns are the change's provenance (``turn_ids``). The
  words that only say what a number measures, an age or a span ("years", "old",
  "aged", "months"), are supported by a user turn that states that number itself
  (``_measures``): "Is thirty-four years old" by "I am 34" or "I'm 34 years old",
  never by "I have 34 cats", "I am 40" or "my son is 34 months old";
- **why**: an UPDATE that drops most of what it replaces must give a reason; a DELETE
  must name an item the user's turns speak of.

Words are compared by a light stem (``moved``/``move``, ``allergic``/``allergy``), after
leaving out function words, the verbs that frame a fact in the third person (``lives``,
``works``, ``prefers``…) and dates and numbers (which a model resolves, so they may
rightly differ from what was said). The guards catch invention and copying; they do
not judge truth: a fact with its meaning inverted but its words said passes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

__all__ = ["Checked", "GuardOptions", "Said", "check_delete", "check_fact", "check_update",
           "content_words", "informative", "placeholder", "unquoted"]

PLACEHOLDERS = frozenset({
    "", "n/a", "na", "none", "null", "nil", "unknown", "tbd", "todo", "fact", "facts",
    "content", "text", "string", "value", "example", "placeholder", "same", "no change",
    "nothing", "etc", "reason", "new content", "updated content", "the fact",
    "full new content", "memory", "item", "sentence", "information", "info",
})
"""Texts (lower-cased, punctuation stripped) that stand for a value instead of being one."""

_TEMPLATE = re.compile(r"^\s*[<{\[(]\s*[\w\s.:|/-]{0,40}[>}\])]\s*$")
"""``<fact>``, ``{content}``, ``[fact]``: a template slot left unfilled."""

_FUNCTION = frozenset("""
a about above after again against all also am an and any are aren as at be because been
before being below between both but by can cannot could couldn d did didn do does doesn
doing don down during each either else etc even ever every few for from further get gets
got had hadn has hasn have haven having he her here hers herself him himself his how i
if in into is isn it its itself just ll m ma me might mine more most must mustn my myself
need needn neither no nor not now o of off often on once one only or other our ours
ourselves out over own per please quite rather re really s same shall shan she should
shouldn so some such t than that the their theirs them themselves then there these they
this those through to too under until up upon us ve very was wasn we were weren what when
where whether which while who whom whose why will with within without won would wouldn y
yes yet you your yours yourself yourselves
""".split())
"""Function words."""

_DATES = frozenset("""
today tomorrow yesterday tonight morning evening night afternoon week weeks month months
year years day days last next ago since soon later recently time times am pm utc
monday tuesday wednesday thursday friday saturday sunday
january february march april may june july august september october november december
jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
"""Dates and times written as words."""

_STOP = _FUNCTION | _DATES | frozenset("""
user users assistant said says say saying told tells tell mention mentioned mentions
state stated states noted note notes currently still actually already
lives live living lived works work working has likes like liked prefers prefer preferred
loves love enjoys enjoy wants want plans plan planning owns own uses use called named
name is thing things someone something
two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
hundred thousand million first second third
""".split())
"""Words that carry no evidence either way: function words, the verbs that frame a
fact in the third person, dates, times and numbers written as words (a model resolves
those: "thirty-four" for "34")."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SUFFIXES = (("ies", "i"), ("ied", "i"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""),
             ("e", ""), ("y", "i"))
_ASSISTANT = re.compile(r"^\W*(?:the\s+|an?\s+)?(?:ai\s+)?(?:assistant|chatbot)\b",
                        re.IGNORECASE)
"""A statement whose subject is the assistant ("The assistant suggested…"); a fact
that only names one ("Works as a teaching assistant") is the user's."""


@dataclass(frozen=True)
class GuardOptions:
    """How strict the guards are.

    Attributes:
        grounding: the share of a fact's content words a user turn of the batch must
            support (0 turns the grounding check off).
        assistant_actions: drop statements that only restate the assistant's turns.
    """

    grounding: float = 0.5
    assistant_actions: bool = True


@dataclass(frozen=True)
class Said:
    """What the guards compare with: the batch's turns and the prompt's instructions.

    Attributes:
        turns: ``(turn id, role, text)`` in order.
        instructions: the system prompt the model was given (its examples included).
    """

    turns: Sequence[tuple[str, str, str]]
    instructions: str = ""

    def by(self, role: Literal["user", "assistant"]) -> list[tuple[str, frozenset[str]]]:
        """The stems of every word of each turn of ``role``, by turn id."""
        return [(turn_id, _stems(text)) for turn_id, who, text in self.turns if who == role]


@dataclass(frozen=True)
class Checked:
    """A guard's verdict: ``problem`` is None when the change may be applied.

    ``turn_ids`` are the user turns that support it (its provenance) and ``reason`` the
    reason to record (the model's, or None when it gave no real one).
    """

    problem: str | None
    turn_ids: tuple[str, ...] = ()
    reason: str | None = None


# words -------------------------------------------------------------------------------
def _tokens(text: str) -> list[str]:
    """Lower-case words; a run of Chinese or Japanese characters (written without
    spaces, so one "word" may be a whole clause) as its overlapping pairs of characters,
    so that "住在北京" is found in "我住在北京，在一家银行工作"."""
    out: list[str] = []
    for word in _WORD.findall(text):
        for part in _CJK.split(word.lower()):
            if not part:
                continue
            if _CJK.fullmatch(part) and len(part) > 2:
                out.extend(part[n:n + 2] for n in range(len(part) - 1))
            else:
                out.append(part)
    return out


_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")
"""A run of kana or CJK ideographs (captured, so ``split`` keeps it)."""


@lru_cache(maxsize=512)
def _stems(text: str) -> frozenset[str]:
    """The stems of every word of a turn (cached: one batch is checked once per
    operation)."""
    return frozenset(_stem(w) for w in _tokens(text))


def _stem(word: str) -> str:
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


def content_words(text: str) -> list[str]:
    """The stems of the words of ``text`` that carry evidence, in order, once each."""
    out: dict[str, None] = {}
    for word in _tokens(text):
        if word in _STOP or word.isdigit() or len(word) < 2:
            continue
        if any(ch.isdigit() for ch in word) and not any(ch.isalpha() for ch in word):
            continue
        out.setdefault(_stem(word), None)
    return list(out)


def _match(stem: str, stems: frozenset[str]) -> bool:
    """Whether ``stem`` is one of ``stems``, or shares a long prefix with one (so
    ``allergic`` meets ``allergy`` and ``vegetarian`` meets ``vegetariano``)."""
    if stem in stems:
        return True
    if len(stem) < 5:
        return False
    for other in stems:
        if len(other) >= 5 and other[:5] == stem[:5]:
            common = 5
            limit = min(len(stem), len(other))
            while common < limit and stem[common] == other[common]:
                common += 1
            if common >= min(len(stem), len(other)) - 2:
                return True
    return False


def _support(words: Sequence[str], turns: Sequence[tuple[str, frozenset[str]]]
             ) -> tuple[set[str], tuple[str, ...]]:
    """The words some turn supports, and the ids of the turns that support any."""
    found: set[str] = set()
    ids: list[str] = []
    for turn_id, stems in turns:
        hits = {w for w in words if _match(w, stems)}
        if hits:
            found |= hits
            ids.append(turn_id)
    return found, tuple(ids)


# numbers and what they measure --------------------------------------------------------
# A model writes an age the user gave as a sentence: "I am 34" becomes "Is thirty-four
# years old". Numbers carry no evidence either way (``content_words``), but "old"
# does, and no user turn said it. The rule: a word that only says what a number
# measures (``_UNITS``: an age, a span of time) is said by a user turn that states
# that same number as a measure of its own: bare ("I am 34", "I'm 34, and…", "34
# last month") or with units that agree ("34 years old", "aged 34", "34yo"). A
# number that counts something ("34 cats", "34 of us") measures nothing, so it
# grounds no unit; nor does another number, a span that disagrees ("34 months" for
# "34 years"), or a span with no age word for an age ("lived here 10 years" for
# "Is 10 years old"). The unit words ride on the number: every other word of the
# fact needs a turn of its own.
_SPANS = {"year": ("year", "years", "yr", "yrs", "yo"), "month": ("month", "months"),
          "week": ("week", "weeks"), "day": ("day", "days")}
_AGE = frozenset({"old", "aged", "age", "yo"})
"""Words that make a number an age ("yo": years old)."""
_UNITS: dict[str, str | None] = {
    **dict.fromkeys(_AGE), **{word: span for span, words in _SPANS.items() for word in words}}
"""Words that only say what a number measures, and the span of time each names (None:
any span)."""

_LOOSE = (_FUNCTION - {"of"}) | (_DATES - set(_UNITS) - {"time", "times"})
"""Words after which a number still stands alone ("I am 34 and…", "34 last month"):
function words and dates. "of" introduces what is counted ("34 of us"), and
"times" counts occurrences."""

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMERAL = re.compile(rf"\b(?:({'|'.join(_TENS)})(?:[\s-]+({'|'.join(_ONES[1:10])}))?"
                      rf"|({'|'.join(_ONES)}))\b")
"""A number from zero to ninety-nine written as words ("thirty-four", "thirty four")."""
_MEASURE_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+|[.,;:!?()]")
"""Numbers, words (letters only: "34yo" is "34" and "yo") and the punctuation that
ends a clause."""


def _numerals(match: re.Match[str]) -> str:
    tens, ones, alone = match.groups()
    if alone is not None:
        return str(_ONES.index(alone))
    return str(20 + 10 * _TENS.index(tens) + (_ONES.index(ones) if ones else 0))


class _Measure(NamedTuple):
    """What one mention of a number measures: the spans its units name, whether one
    makes it an age, and the stems of its unit words (none: a bare number)."""

    spans: frozenset[str]
    age: bool
    words: frozenset[str]

    def fits(self, fact: _Measure) -> bool:
        """Whether a user's mention (``self``) states what ``fact``'s mention says."""
        if not self.words:
            return True
        if self.spans and fact.spans and not self.spans & fact.spans:
            return False
        return self.age or not fact.age


def _measure(units: Sequence[str]) -> _Measure:
    return _Measure(frozenset(span for u in units if (span := _UNITS[u]) is not None),
                    any(u in _AGE for u in units), frozenset(_stem(u) for u in units))


@lru_cache(maxsize=512)
def _measures(text: str, *, user: bool = True) -> dict[str, tuple[_Measure, ...]]:
    """Each number ``text`` states (written as digits or words), with what each mention
    of it measures. Of a user's turn (``user``), only the mentions that measure
    something: bare, or with units, and nothing counted after them; of a fact, only
    those with units (the words to ground)."""
    lowered = _NUMERAL.sub(_numerals, text.lower().replace("y/o", "yo"))
    tokens = _MEASURE_TOKEN.findall(lowered)
    found: dict[str, list[_Measure]] = {}
    for at, token in enumerate(tokens):
        if not token[0].isdigit():
            continue
        before, end = at, at + 1
        while before > 0 and tokens[before - 1] in _UNITS:
            before -= 1
        while end < len(tokens) and tokens[end] in _UNITS:
            end += 1
        units = tokens[before:at] + tokens[at + 1:end]
        after = tokens[end] if end < len(tokens) else None
        counted = after is not None and after[0].isalnum() and after not in _LOOSE
        if (user and not counted) or (not user and units):
            number = token.lstrip("0") or "0"
            found.setdefault(number, []).append(_measure(units))
    return {number: tuple(mentions) for number, mentions in found.items()}


def _units_said(content: str, text: str) -> frozenset[str]:
    """The stems of ``content``'s unit words that the user turn ``text`` says, by
    stating the number they measure (see above)."""
    wanted = _measures(content, user=False)
    if not wanted:
        return frozenset()
    stated = _measures(text)
    return frozenset(word for number, mentions in wanted.items() for fact in mentions
                     if any(mention.fits(fact) for mention in stated.get(number, ()))
                     for word in fact.words)


def _user_turns(content: str, said: Said) -> list[tuple[str, frozenset[str]]]:
    """``said.by("user")``, each turn's stems with the unit words of ``content`` it
    says (``_units_said``)."""
    if not _measures(content, user=False):
        return said.by("user")
    return [(turn_id, _stems(text) | _units_said(content, text))
            for turn_id, who, text in said.turns if who == "user"]


@lru_cache(maxsize=64)
def _flat(text: str) -> str:
    return " ".join(_tokens(text))


def placeholder(text: str | None) -> bool:
    """Whether ``text`` stands for a value instead of being one: empty, punctuation
    alone (``...``), a placeholder word (``N/A``), a template slot (``<fact>``)."""
    if text is None:
        return True
    plain = text.strip().strip("\"'`.,;:!?*- \u2026").lower()
    return (not _tokens(text) or bool(_TEMPLATE.match(text)) or plain in PLACEHOLDERS
            or _flat(text) in PLACEHOLDERS)


def informative(text: str | None) -> bool:
    """Whether ``text`` says anything: not a ``placeholder``, and holding at least one
    word that carries evidence."""
    return not placeholder(text) and bool(content_words(text or ""))


# checks ------------------------------------------------------------------------------
def _information(content: str, reason: str | None, said: Said,
                 user: Sequence[tuple[str, frozenset[str]]]) -> str | None:
    """Why ``content`` carries no information, or None."""
    shown = content.strip()[:60]
    if not informative(content):
        return f"content {shown!r} is a placeholder, not a fact"
    words = content_words(content)
    spoken, _ = _support(words, user)
    all_said = len(spoken) == len(words)
    flat = _flat(content)
    if len(words) >= 2 and f" {flat} " in f" {_flat(said.instructions)} " and not all_said:
        return f"content {shown!r} copies the instructions"
    if reason is not None and _flat(reason) == flat and not all_said:
        return f"content {shown!r} only repeats the reason"
    return None


def _assistant_only(words: Sequence[str], said: Said,
                    user: Sequence[tuple[str, frozenset[str]]], content: str) -> bool:
    """Whether a statement only restates the assistant's turns."""
    if _ASSISTANT.search(content):
        return True
    assistant = said.by("assistant")
    if not assistant or not words:
        return False
    by_assistant, _ = _support(words, assistant)
    by_user, _ = _support(words, user)
    share_assistant = len(by_assistant) / len(words)
    return (bool(by_assistant - by_user) and share_assistant >= 0.8
            and share_assistant > len(by_user) / len(words))


def _reason(reason: str | None, content: str | None) -> str | None:
    """The model's reason to record: None when it is a placeholder or a copy of the
    content (a reason that says nothing is not kept as if it did)."""
    if reason is None or placeholder(reason):
        return None
    return None if content is not None and _flat(reason) == _flat(content) else reason.strip()


def check_fact(content: str | None, reason: str | None, said: Said,
               options: GuardOptions = GuardOptions()) -> Checked:
    """Check a new fact (an ADD, or an item consolidation distils)."""
    first = _first_checks(content, reason, said, options)
    if isinstance(first, Checked):
        return first
    content, user, words = first
    return _grounded(content, words, user, options, reason)


def _first_checks(content: str | None, reason: str | None, said: Said, options: GuardOptions
                  ) -> Checked | tuple[str, Sequence[tuple[str, frozenset[str]]], list[str]]:
    """What every new version must pass (content, information, not the assistant's own
    doing): a refusal, or the content with the user's turns and its words."""
    if content is None or not content.strip():
        return Checked("no content")
    user = _user_turns(content, said)
    problem = _information(content, reason, said, user)
    if problem:
        return Checked(problem)
    words = content_words(content)
    if options.assistant_actions and _assistant_only(words, said, user, content):
        return Checked(f"{content.strip()[:60]!r} restates what the assistant said or did")
    return content, user, words


def _grounded(content: str, words: Sequence[str], user: Sequence[tuple[str, frozenset[str]]],
              options: GuardOptions, reason: str | None) -> Checked:
    """The verdict on ``words`` (the new ones of ``content``) against the user's turns."""
    found, ids = _support(words, user)
    if options.grounding > 0 and (not found or len(found) < options.grounding * len(words)):
        missing = [w for w in words if w not in found]
        return Checked(f"{content.strip()[:60]!r} is not grounded in what the user said "
                       f"({len(found)} of {len(words)} words; none of {missing[:5]})")
    return Checked(None, ids, _reason(reason, content))


def check_update(content: str | None, reason: str | None, old: str, said: Said,
                 options: GuardOptions = GuardOptions()) -> Checked:
    """Check an UPDATE of the item whose content is ``old``.

    The words the new version adds must be grounded in the user's turns (those it keeps
    from ``old`` need not be), at least one of its words must come from a user turn,
    and a version that drops more than half of ``old``'s words must say why.
    """
    first = _first_checks(content, reason, said, options)
    if isinstance(first, Checked):
        return first
    content, user, words = first
    before = frozenset(content_words(old))
    added = [w for w in words if not _match(w, before)]
    lost = [w for w in before if not _match(w, frozenset(words))]
    why = _reason(reason, content)
    if before and len(lost) > len(before) / 2 and not informative(why):
        return Checked(f"replaces {old[:60]!r} with {content.strip()[:60]!r} and drops "
                       f"{len(lost)} of its {len(before)} words without saying why")
    if added:
        verdict = _grounded(content, added, user, options, reason)
        if verdict.problem:
            return verdict
    found, ids = _support(words, user)
    if options.grounding > 0 and not found:
        return Checked(f"{content.strip()[:60]!r} is not grounded in what the user said "
                       "(no word of it comes from a user turn)")
    return Checked(None, ids, why)


def check_delete(old: str, reason: str | None, said: Said,
                 options: GuardOptions = GuardOptions()) -> Checked:
    """Check a DELETE of the item whose content is ``old``: the user's turns must speak
    of it (one of its words, at least)."""
    found, ids = _support(content_words(old), said.by("user"))
    if options.grounding > 0 and not found:
        return Checked(f"deletes {old[:60]!r}, which no user turn of the batch speaks of")
    return Checked(None, ids, _reason(reason, None))


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
"""A quoted text in a guard's problem (``repr``'s single or double quotes)."""


def unquoted(problem: str) -> str:
    """``problem`` with each text it quotes replaced by ``<sensitive text>``: how the
    refusal of a sensitive fact or item is logged and kept in the ledger."""
    return _QUOTED.sub("<sensitive text>", problem)
