"""The story: who is in the village, what happens each turn, and the scripted answers.

The bakery burned at midnight. The miller did it, by accident: he crept into the
baker's storeroom to take back six sacks of flour she had not paid for, and his lantern
fell into the spilled flour. He says he was at the mill all night. The guard saw a
light behind the bakery on her round and, the next morning, finds the lantern in the
ashes. The judge hears what is said in the square and rules each turn.

With a real model the characters' identities below are all it knows of the plot; with
the scripted server, ``ScriptedVillage`` answers in their place from ``LINES``,
``RULINGS``, ``FINAL`` and ``BELIEFS``, so every run is the same.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["BELIEFS", "CAST", "CHAPTERS", "CITED", "FINAL", "JUDGE", "LINES", "QUESTION", "RULINGS",
           "VILLAGERS", "Chapter", "Character", "ScriptedVillage"]

QUESTION = "Who burned the bakery?"
"""The mystery the judge must solve."""


@dataclass(frozen=True)
class Character:
    """One agent of the scene: its id in the ledger, its name, and who it is (the
    identity layer of its prompts, secrets included)."""

    agent_id: str
    name: str
    identity: str


@dataclass(frozen=True)
class Chapter:
    """One turn of the story.

    Attributes:
        title: a heading for the turn.
        observation: what everyone sees (a global ``world.observed`` event).
        question: what the judge asks the square; each agent recalls by it (salience).
        clue: ``(agent_id, text)``: something only that agent finds (a private
            ``clue.found`` event), or None.
    """

    title: str
    observation: str
    question: str
    clue: tuple[str, str] | None = None


VILLAGERS = (
    Character("baker", "Bertha the baker",
              "You are Bertha, the village baker. You slept above your shop and woke to "
              "smoke at midnight; you escaped barefoot. You owe Milo the miller for six "
              "sacks of flour, which you promised to pay after the harvest fair. You did "
              "not start the fire and want the truth."),
    Character("miller", "Milo the miller",
              "You are Milo, the village miller. Your secret: at midnight you crept into "
              "the baker's storeroom to take back six sacks of flour she owed you for; "
              "your brass lantern, stamped with the mill's millwheel, fell into spilled "
              "flour and the storeroom caught fire. You fled with the sacks. You claim you "
              "were grinding at the mill all night. Keep your secret unless the evidence "
              "leaves you no way out; then confess that it was an accident."),
    Character("guard", "Greta the guard",
              "You are Greta, the village guard. On your midnight round you saw a light "
              "moving behind the bakery, then lost it; you raised the alarm when the fire "
              "took hold. You are careful: you report what you saw and found, no more."),
)
"""The villagers, in the order they speak each turn."""

JUDGE = Character(
    "judge", "Judge Hale",
    "You are Judge Hale. You must find out who burned the bakery. You hear everything "
    "said in the village square and see what everyone sees, but not what villagers "
    "privately think or find. Rule only on the evidence; name no one without it.")

CAST = (*VILLAGERS, JUDGE)
"""Every agent: the villagers, then the judge."""

CHAPTERS = (
    Chapter("Ashes at dawn",
            "At dawn the bakery lies in ashes; the fire began in the flour storeroom "
            "around midnight.",
            "Where was everyone at midnight?"),
    Chapter("The square fills",
            "The village gathers in the square; the smell of burnt flour hangs in the air.",
            "Who carries a lantern at night?",
            clue=("guard", "In the storeroom ashes I found a dented brass lantern stamped "
                           "with a millwheel.")),
    Chapter("The lantern",
            "Before the whole square the guard lays a dented brass lantern, stamped with a "
            "millwheel, at the judge's feet.",
            "Whose lantern was in the ashes?"),
    Chapter("A white trail",
            "A trail of spilled flour runs from the bakery's back door toward the mill road.",
            "Where does the flour trail lead?"),
    Chapter("The half-burned ledger",
            "The baker's ledger, half burned, shows a debt: 'Milo, six sacks, unpaid'.",
            "Who was owed money by the baker?"),
    Chapter("A dark mill",
            "Neighbours say the mill's lamp was dark and its wheel still all night.",
            "Was the mill working that night?"),
    Chapter("Six sacks",
            "Six flour sacks with scorched corners are found behind the mill.",
            "Whose sacks are behind the mill?"),
    Chapter("A burned sleeve",
            "The miller's coat, hung by his door, has fresh burn holes in one sleeve.",
            "How did the miller's sleeve get burned?"),
    Chapter("The baker's sister",
            "The baker's sister says the baker slept above the shop and fled the smoke "
            "barefoot.",
            "Could the baker have set her own shop alight?"),
    Chapter("The night log",
            "The guard's night log is read aloud: 'Midnight: a light moving behind the "
            "bakery, then gone.'",
            "Whose light was behind the bakery at midnight?"),
    Chapter("A new lantern",
            "The smith says he sold the miller a new brass lantern this morning.",
            "Why did the miller need a new lantern?"),
    Chapter("The ruling",
            "The judge calls the whole village to the square to hear the ruling.",
            QUESTION),
)
"""The turns, in order."""

# The scripted model's answers ------------------------------------------------------
LINES: dict[str, tuple[tuple[str, str], ...]] = {
    "baker": (
        ("My whole life was in that oven. Someone did this.",
         "I was asleep upstairs and woke to smoke. I barely got out."),
        ("Milo has been cold to me since I fell behind on the flour bill.",
         "Only the guard and the miller walk about with lanterns after dark."),
        ("A millwheel stamp. That is Milo's mark.",
         "That lantern has a millwheel on it. Everyone knows whose mark that is."),
        ("The trail runs to the mill. I dare not say it too loudly.",
         "Flour does not walk. Someone carried my sacks out of the back door."),
        ("He wanted his sacks back, and I could not pay.",
         "Yes, I owe Milo for six sacks. I told him I would pay after the harvest fair."),
        ("So he lied about grinding all night.",
         "If the mill was dark, where was Milo at midnight?"),
        ("Those are my sacks. He took them back himself.",
         "Those six sacks were in my storeroom last night."),
        ("The burned sleeve: he was there when it caught.",
         "A burned sleeve on the night of a fire is no coincidence."),
        ("Thank heaven for my sister.",
         "My sister saw me run out barefoot. I would never burn my own bread."),
        ("The light the guard saw was his.",
         "A light behind my bakery at midnight. Who else but a man fetching sacks?"),
        ("He replaced the lantern he lost in my storeroom.",
         "Why buy a new lantern, Milo, unless the old one lay in my ashes?"),
        ("Let the judge see it plainly.",
         "I ask only for the truth, and for enough to rebuild."),
    ),
    "miller": (
        ("The lantern. I dropped it when the sacks slid. No one saw me.",
         "I was at the mill all night, grinding for the fair."),
        ("Greta walks the night round. Did she see my light?",
         "Plenty of folk carry lanterns. It proves nothing."),
        ("She found my lantern.",
         "Anyone could take a lantern from my yard; I leave them by the gate."),
        ("The sacks leaked on the road. Fool that I am.",
         "Flour blows everywhere in this village. The mill road is always white."),
        ("Now they know she owed me.",
         "She owes me for six sacks, it is true, but I am a patient man."),
        ("The lamp was dark because I was at the bakery.",
         "I grind in the dark to save oil. The neighbours are mistaken."),
        ("I should have hidden those sacks better.",
         "Those sacks are mine by right; I found them by the road this morning."),
        ("The sleeve caught when I beat at the flames.",
         "I singed my sleeve at my own hearth last week."),
        ("She did not do it. I know who did.",
         "Nobody says Bertha started it. It could have been a spark from her oven."),
        ("Greta saw my light. It is over.",
         "A light in the dark could be anyone's."),
        ("I cannot hide it any longer.",
         "I went to take back my sacks. The lantern fell and the flour caught. "
         "I never meant it."),
        ("Let it be done.",
         "I will pay for a new bakery if the judge allows it."),
    ),
    "guard": (
        ("I saw a light behind the bakery on my round. I should have gone closer.",
         "I was on the night round. The fire was out of hand when I raised the alarm."),
        ("A lantern with a millwheel, in the ashes. I keep it for the judge.",
         "I have something for the judge. Let no one touch the ashes."),
        ("The miller flinched when I showed it.",
         "I found it this morning in the storeroom ashes, where the fire began."),
        ("The flour trail fits the lantern.",
         "The flour trail starts at the storeroom door, where the lantern lay."),
        ("A debt is a motive.",
         "An unpaid debt gives a man a reason to fetch his goods at night."),
        ("The miller's story is falling apart.",
         "I passed the mill at eleven. No wheel turned, no lamp burned."),
        ("Those are the baker's missing sacks.",
         "The baker counted six sacks in her store yesterday. Six sit behind the mill."),
        ("Burns from beating out a fire.",
         "Those are fresh burns, not a week old."),
        ("The baker is clear.",
         "I saw the baker in the square in her nightgown. She did not set the fire."),
        ("My log will settle it.",
         "My log says a light moved behind the bakery at midnight, then went out."),
        ("He confessed before the whole village.",
         "The miller has said it himself: the lantern fell and the flour caught."),
        ("Justice, with mercy for an accident.",
         "I ask the judge to weigh that it was an accident."),
    ),
}
"""Each villager's ``(thought, speech)`` per turn."""

RULINGS = (
    ("unknown", "The fire began in the storeroom at midnight; I have no suspect yet."),
    ("unknown", "Lanterns at night narrow it to those who walk late, but that is no proof."),
    ("miller", "A lantern with the mill's mark lay where the fire began."),
    ("miller", "A flour trail leads from the storeroom toward the mill."),
    ("miller", "The miller was owed six sacks: a reason to enter the storeroom."),
    ("miller", "The miller's story fails: the mill was dark and still."),
    ("miller", "The baker's missing sacks were found behind the mill."),
    ("miller", "The miller's sleeve has fresh burns."),
    ("miller", "The baker is cleared by her sister and the guard."),
    ("miller", "The guard's log puts a light behind the bakery at midnight."),
    ("miller", "The miller has confessed to dropping his lantern."),
    ("miller", "Every clue points to the miller, and he has confessed."),
)
"""The judge's ``(suspect, reasoning)`` per turn."""

FINAL = ("miller", "The miller burned the bakery by accident while taking back six sacks "
                   "he was owed. He shall rebuild it, and the debt is cancelled.")
"""The judge's final verdict."""

BELIEFS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "baker": (
        ("Milo bears me a grudge over the flour I owe him.", ("miller", "lantern", "mill")),
        ("The miller took my sacks back by night, and his lantern started the fire.",
         ("sacks", "flour", "trail", "lantern")),
        ("The miller's own lies are undoing him; the village now sees what I see.",
         ("sleeve", "dark", "sacks")),
        ("The miller has confessed; what matters now is rebuilding.",
         ("confess", "lantern fell", "rebuild")),
    ),
    "miller": (
        ("The guard and the baker both look toward the mill.", ("lantern", "mill")),
        ("The village is turning against me, clue by clue.", ("sacks", "trail", "debt")),
        ("No story will hold against what the village has found.",
         ("sleeve", "log", "light")),
        ("Owning up to the accident is the only way left.", ("accident", "confess")),
    ),
    "guard": (
        ("The lantern from the ashes belongs to the mill.", ("lantern", "millwheel")),
        ("The miller was at the bakery at midnight and lied about the mill.",
         ("mill", "trail", "dark", "lamp")),
        ("The baker is innocent; the evidence points only at the miller.",
         ("baker", "sacks", "sleeve")),
        ("It was the miller's lantern, but an accident, not arson.",
         ("accident", "confess", "lantern fell")),
    ),
    "judge": (
        ("Whoever carried a lantern into the storeroom at midnight started the fire.",
         ("lantern", "storeroom", "midnight")),
        ("The miller had motive and means, and his alibi has failed.",
         ("owed", "sacks", "dark", "mill")),
        ("The miller caused the fire while taking back his sacks.",
         ("sleeve", "log", "light", "confess")),
        ("The fire was an accident; the miller must make it good.",
         ("accident", "confess", "rebuild")),
    ),
}
"""Each agent's successive beliefs, with words that pick the events it cites. After
the first, each belief supersedes the agent's current one."""

# The scripted model -----------------------------------------------------------------
CITED = 5
"""A scripted belief cites at most this many events: the newest that match its words."""

_TAG = re.compile(r"^Turn (\d+): (\w+),")
_EVENT = re.compile(r"^- \[([^\]]+)\] (.*)$")


class ScriptedVillage:
    """The scripted model's side of the scene: answers each chat request from the story.

    Give it to ``ScriptedLLMServer(default=ScriptedVillage())``. A villager's line and a
    ruling are found by the tag of the request's last message (``Turn 3: miller,`` /
    ``Final: judge,``); a reflection (the ``Belief`` schema) by the agent the request
    names: it cites the newest events shown whose text has one of the belief's words,
    and supersedes the agent's current belief. Anything else is answered HTTP 422, so the
    scene fails loudly.
    """

    def __init__(self) -> None:
        self.reflections: Counter[str] = Counter()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any] | int:
        messages = body.get("messages") or []
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
        last = str(messages[-1].get("content", "")) if messages else ""
        if schema == "Belief":
            return self._belief(messages)
        if last.startswith("Final: judge,"):
            suspect, reasoning = FINAL
            return {"suspect": suspect, "reasoning": reasoning}
        tag = _TAG.match(last)
        if tag is None:
            return 422
        turn, agent = int(tag[1]), tag[2]
        if not 1 <= turn <= len(CHAPTERS):
            return 422
        if schema == "Verdict" and agent == JUDGE.agent_id:
            suspect, reasoning = RULINGS[turn - 1]
            return {"suspect": suspect, "reasoning": reasoning}
        if schema == "Line" and agent in LINES:
            thought, speech = LINES[agent][turn - 1]
            return {"thought": thought, "speech": speech}
        return 422

    def _belief(self, messages: list[dict[str, Any]]) -> dict[str, Any] | int:
        system = str(messages[0].get("content", ""))
        agent = next((c.agent_id for c in CAST if repr(c.agent_id) in system), None)
        if agent is None or len(messages) < 2:
            return 422
        script = BELIEFS[agent]
        belief, words = script[min(self.reflections[agent], len(script) - 1)]
        self.reflections[agent] += 1
        held, seen = _sections(str(messages[1].get("content", "")))
        cited = [i for i, text in seen if any(w in text.lower() for w in words)]
        return {"belief": belief, "based_on": (cited or [i for i, _ in seen])[-CITED:],
                "supersedes": held[-1][0] if held else None}


def _sections(prompt: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The ``(id, line)`` pairs of a reflection request: current beliefs, events seen."""
    held: list[tuple[str, str]] = []
    seen: list[tuple[str, str]] = []
    target = held
    for line in prompt.splitlines():
        if line.startswith("Events seen"):
            target = seen
        found = _EVENT.match(line)
        if found:
            target.append((found[1], found[2]))
    return held, seen
