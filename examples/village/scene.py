"""The scene: each turn the world shows something, the villagers recall and speak, those
due reflect, and the judge rules.

Everything happens in one user's ledger (the world ``village``); each agent's memory is
a view over it, computed fresh when the agent acts:

- ``world.observed`` (what everyone sees) and ``agent.spoke`` (said aloud in the square,
  recorded ``global``) reach every agent;
- ``agent.thought`` and ``clue.found`` stay private to the agent that had them;
- ``agent.reflected`` beliefs and the judge's ``judge.verdict`` / ``verdict.final`` are
  global.

Before acting, an agent recalls its ``episodic`` view (the last few events it sees) and
its ``salient`` view for the judge's question of the turn; both go into its prompt
(``views.build_context``) and into the report. The functions return what they print, so
a test can check it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from ledgermem import LLM, Event, InvalidInput, Memory, UserMemory, ViewConfig
from ledgermem.views import build_context, event_line

from .story import CAST, CHAPTERS, JUDGE, QUESTION, VILLAGERS, Chapter, Character

__all__ = ["SESSION", "START", "VIEWS", "WORLD", "Final", "Line", "Recall", "SceneClock",
           "SceneReport", "TurnReport", "Verdict", "Village", "final_verdict", "open_village",
           "play", "play_turn", "recall"]

WORLD = "village"
"""The user whose ledger is the village: one world, one user."""

SESSION = "village:bakery-fire"
"""The session every event of the scene is recorded under."""

VIEWS = ViewConfig(episodic_n=4, salience_k=3, reflect_every=16)
"""Short views, so the printout stays readable; a reflection every 20 events seen
(about every three turns)."""

START = datetime(2026, 6, 2, 7, 0, tzinfo=UTC)
"""Story time of turn 1; each turn is an hour later."""

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class Line(BaseModel):
    """What a villager answers each turn."""

    thought: Text = Field(description="What you privately think; nobody else hears it.")
    speech: Text = Field(description="What you say aloud in the square; everyone hears it.")


class Verdict(BaseModel):
    """What the judge answers each turn, and at the end."""

    suspect: Text = Field(description='Who burned the bakery: "baker", "miller", "guard", '
                                      'or "unknown".')
    reasoning: Text = Field(description="Why, in one or two sentences.")


LINE_FORMAT = ('Answer in JSON with two keys: "thought" (what you privately think, one '
               'sentence; nobody hears it) and "speech" (what you say aloud in the square, '
               "one or two sentences; everyone hears it). Stay in character.")
VERDICT_FORMAT = ('Answer in JSON with two keys: "suspect" (one of "baker", "miller", '
                  '"guard", or "unknown" while the evidence names no one) and "reasoning" '
                  "(one or two sentences citing the evidence).")


class SceneClock:
    """Story time for the ledger: ``start_turn`` sets the hour, and each reading is one
    second later than the last, so every event has its own time."""

    def __init__(self, start: datetime = START) -> None:
        self.start = start
        self._now = start
        self._lock = threading.Lock()

    def start_turn(self, number: int) -> datetime:
        """Move to the start of turn ``number`` (never backwards)."""
        with self._lock:
            self._now = max(self._now, self.start + timedelta(hours=number - 1))
            return self._now

    def __call__(self) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=1)
            return self._now


@dataclass(frozen=True)
class Village:
    """The scene's world: the ledger handle, the model, the story clock."""

    world: UserMemory
    llm: LLM
    clock: SceneClock


@contextmanager
def open_village(db: str | Path, llm: LLM) -> Iterator[Village]:
    """The village in the SQLite file (or store URL) ``db``, played with ``llm``.

    Raises:
        InvalidInput: the store already holds a village (start from a new file).
    """
    clock = SceneClock()
    with Memory.open(db, embedder=None, llm=llm, views=VIEWS, clock=clock) as memory:
        world = memory.for_user(WORLD, session_id=SESSION)
        if world.ledger_events(limit=1):
            raise InvalidInput(f"{db} already holds a village; play in a new database")
        yield Village(world, llm, clock)


@dataclass(frozen=True)
class Recall:
    """What one agent recalled before acting: its two views of the ledger."""

    agent_id: str
    query: str
    episodic: list[Event]
    salient: list[Event]

    @property
    def memory(self) -> list[Event]:
        """Both views, each event once, in time order: the prompt's memory layer."""
        merged = {e.id: e for e in [*self.episodic, *self.salient]}
        return sorted(merged.values(), key=lambda e: e.ts)

    def render(self) -> list[str]:
        """The printed recall: a heading and one line per event, for each view."""
        return [f"{self.agent_id} recalls",
                f"  episodic (last {VIEWS.episodic_n}):",
                *(f"    {event_line(e)}" for e in self.episodic),
                f"  salient for {self.query!r} (top {VIEWS.salience_k}):",
                *(f"    {event_line(e)}" for e in self.salient)]


@dataclass
class TurnReport:
    """One turn: what was recorded, what each agent recalled, and the printout."""

    number: int
    chapter: Chapter
    observed: Event
    clue: Event | None = None
    recalls: dict[str, Recall] = field(default_factory=dict)
    thoughts: dict[str, Event] = field(default_factory=dict)
    speeches: dict[str, Event] = field(default_factory=dict)
    reflections: list[Event] = field(default_factory=list)
    verdict: Event | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The turn as printed."""
        return "\n".join(self.lines)


@dataclass
class Final:
    """The end: the judge's last recall and verdict, and every agent's beliefs."""

    recall: Recall
    verdict: Event
    beliefs: dict[str, list[Event]]
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The end as printed."""
        return "\n".join(self.lines)


@dataclass
class SceneReport:
    """The whole scene."""

    turns: list[TurnReport]
    final: Final

    @property
    def text(self) -> str:
        """The whole scene as printed."""
        return "\n\n".join([*(t.text for t in self.turns), self.final.text])


def recall(village: Village, agent_id: str, query: str) -> Recall:
    """``agent_id``'s episodic and salient views of the ledger, now."""
    world = village.world
    return Recall(agent_id, query, world.episodic(agent_id),
                  world.salient(agent_id, query))


def play_turn(village: Village, number: int, chapter: Chapter, *,
              total: int = len(CHAPTERS)) -> TurnReport:
    """Play turn ``number``: the world, each villager, reflections, the judge's ruling."""
    world = village.world
    moment = village.clock.start_turn(number)
    observed = world.record("world.observed", {"text": chapter.observation})
    report = TurnReport(number, chapter, observed)
    out = report.lines
    out += [f"━━ Turn {number}/{total} · {moment:%H:%M} · {chapter.title} ━━",
            f"world: {chapter.observation}", f"the judge asks: {chapter.question}"]
    if chapter.clue is not None:
        finder, text = chapter.clue
        report.clue = world.record("clue.found", {"text": text}, agent_id=finder)
        out.append(f"{finder} finds (private): {text}")
    scene = _scene(moment, number, total, chapter)
    for villager in VILLAGERS:
        remembered = recall(village, villager.agent_id, chapter.question)
        line = village.llm.complete(
            _messages(village, villager, scene, remembered, LINE_FORMAT,
                      f"Turn {number}: {villager.agent_id}, your move."),
            Line, purpose="village.line")
        report.recalls[villager.agent_id] = remembered
        report.thoughts[villager.agent_id] = world.record(
            "agent.thought", {"text": line.thought}, agent_id=villager.agent_id)
        report.speeches[villager.agent_id] = world.record(
            "agent.spoke", {"text": line.speech}, agent_id=villager.agent_id,
            visibility="global")
        out += ["", *remembered.render(),
                f"  {villager.agent_id} thinks (private): {line.thought}",
                f"  {villager.agent_id} says (heard by all): {line.speech}"]
    for character in CAST:
        belief = world.reflect(character.agent_id)
        if belief is not None:
            report.reflections.append(belief)
            out += ["", _belief_line(belief)]
    remembered = recall(village, JUDGE.agent_id, chapter.question)
    ruling = village.llm.complete(
        _messages(village, JUDGE, scene, remembered, VERDICT_FORMAT,
                  f"Turn {number}: {JUDGE.agent_id}, your ruling."),
        Verdict, purpose="village.verdict")
    report.recalls[JUDGE.agent_id] = remembered
    report.verdict = _rule(village, "judge.verdict", ruling)
    out += ["", *remembered.render(), f"  judge rules: {report.verdict.payload['text']}"]
    return report


def final_verdict(village: Village, *, after: int = len(CHAPTERS)) -> Final:
    """The judge's final verdict (``verdict.final``, global) once turn ``after`` is
    played, and every agent's beliefs."""
    world = village.world
    moment = village.clock.start_turn(after + 1)
    scene = (f"{moment:%H:%M}. The hearing is over; the whole village waits in the "
             f"square. Give your final verdict: {QUESTION}")
    remembered = recall(village, JUDGE.agent_id, QUESTION)
    ruling = village.llm.complete(
        _messages(village, JUDGE, scene, remembered, VERDICT_FORMAT,
                  f"Final: {JUDGE.agent_id}, your verdict."),
        Verdict, purpose="village.verdict")
    verdict = _rule(village, "verdict.final", ruling)
    held = {c.agent_id: world.beliefs(c.agent_id) for c in CAST}
    lines = ["━━ The verdict ━━", *remembered.render(),
             f"  judge's final verdict: {verdict.payload['text']}", "",
             "beliefs (agent.reflected, seen by everyone):"]
    for character in CAST:
        beliefs = held[character.agent_id]
        lines += [f"  {character.agent_id}: {b.payload['belief']}" for b in beliefs]
        if not beliefs:
            lines.append(f"  {character.agent_id}: (none yet)")
    return Final(remembered, verdict, held, lines)


def play(village: Village, *, turns: int = len(CHAPTERS),
         echo: Callable[[str], None] | None = None) -> SceneReport:
    """Play the first ``turns`` turns and the final verdict; ``echo`` gets each turn's
    text as soon as it is played (``print`` to watch)."""
    if not 1 <= turns <= len(CHAPTERS):
        raise InvalidInput(f"turns must be from 1 to {len(CHAPTERS)}, not {turns}")
    played: list[TurnReport] = []
    for number, chapter in enumerate(CHAPTERS[:turns], start=1):
        played.append(play_turn(village, number, chapter, total=turns))
        if echo is not None:
            echo(played[-1].text + "\n")
    final = final_verdict(village, after=turns)
    if echo is not None:
        echo(final.text)
    return SceneReport(played, final)


def _scene(moment: datetime, number: int, total: int, chapter: Chapter) -> str:
    return (f"{moment:%H:%M}, the day after the fire (turn {number} of {total}). "
            f"{chapter.observation}\nThe judge asks the square: {chapter.question}")


def _messages(village: Village, who: Character, scene: str, remembered: Recall,
              output_format: str, tag: str) -> list[dict[str, str]]:
    """A system prompt of layers (identity, scene, memory, beliefs, output format) and
    a short user message whose tag says who is to answer, and for which turn."""
    beliefs = village.world.beliefs(who.agent_id)
    extra = None
    if beliefs:
        extra = "Your current beliefs:\n" + "\n".join(
            f"- {b.payload['belief']}" for b in beliefs)
    context = build_context(identity=who.identity, scene=scene, memory=remembered.memory,
                            extra=extra, output_format=output_format)
    return [{"role": "system", "content": context}, {"role": "user", "content": tag}]


def _rule(village: Village, kind: str, ruling: Verdict) -> Event:
    suspect = _suspect(ruling.suspect)
    named = "finds against" if kind == "verdict.final" else "suspects"
    text = (f"{named} the {suspect}: {ruling.reasoning}" if suspect != "unknown"
            else f"names no one yet: {ruling.reasoning}")
    return village.world.record(kind, {"text": text, "suspect": suspect,
                                       "reasoning": ruling.reasoning},
                                agent_id=JUDGE.agent_id, visibility="global")


def _suspect(answer: str) -> str:
    """A villager's id from the model's answer ("Milo the miller" → ``miller``), or
    ``unknown``."""
    said = answer.lower()
    for villager in VILLAGERS:
        first_name = villager.name.split()[0].lower()
        if villager.agent_id in said or first_name in said:
            return villager.agent_id
    return "unknown"


def _belief_line(belief: Event) -> str:
    cited = len(belief.payload.get("based_on", []))
    replaces = "; replaces its earlier belief" if "supersedes" in belief.payload else ""
    return (f"{belief.agent_id} reflects (global): {belief.payload['belief']} "
            f"[cites {cited} event{'s' if cited != 1 else ''} it saw{replaces}]")
