"""The village example (``examples/village``): the whole scene played once on the
scripted server over a SQLite file under ``tmp_path``, then checked (the verdict, who
recalled what, the beliefs, the printout); and once as ``python -m examples.village``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from examples.village.scene import (
    VIEWS,
    SceneReport,
    Village,
    open_village,
    play,
)
from examples.village.story import CAST, CHAPTERS, JUDGE, VILLAGERS, ScriptedVillage
from ledgermem import Event, InvalidInput, OpenAICompatibleLLM
from ledgermem.testing import ScriptedLLMServer, ScriptedRequest
from ledgermem.views import event_line

ROOT = Path(__file__).resolve().parents[1]
AGENTS = [c.agent_id for c in CAST]


@dataclass
class Played:
    village: Village
    report: SceneReport
    server: ScriptedLLMServer
    db: Path

    @property
    def ledger(self) -> list[Event]:
        return self.village.world.ledger_events()


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    db = tmp_path_factory.mktemp("village") / "village.db"
    with ScriptedLLMServer(default=ScriptedVillage()) as server:
        llm = OpenAICompatibleLLM("scripted-village", server.url, timeout=5, retries=0,
                                  validation_retries=0)
        try:
            with open_village(db, llm) as village:
                yield Played(village, play(village), server, db)
        finally:
            llm.close()
    assert server.errors == []


def private_to_others(ledger: list[Event], agent: str) -> list[Event]:
    """The events of other agents that only they may see."""
    return [e for e in ledger if e.agent_id not in (None, agent)
            and e.visibility == "private" and e.kind not in VIEWS.global_kinds]


def asked(request: ScriptedRequest) -> str:
    """The agent a chat request asks: its tag (``Turn 3: miller,``), or the agent a
    reflection request names."""
    messages = request.body["messages"]
    first, last = str(messages[0]["content"]), str(messages[-1]["content"])
    tagged = [a for a in AGENTS if last.startswith(("Turn ", "Final: ")) and f" {a}," in last]
    named = [a for a in AGENTS if f"agent {a!r}" in first]
    [agent] = tagged or named
    return agent


def test_every_turn_is_played_and_the_judge_finds_against_the_miller(
        played: Played) -> None:
    ledger = played.ledger
    kinds = [e.kind for e in ledger]
    assert kinds.count("world.observed") == len(CHAPTERS) == 12
    assert kinds.count("agent.spoke") == kinds.count("agent.thought") == 12 * 3
    assert kinds.count("clue.found") == 1
    rulings = [e for e in ledger if e.kind == "judge.verdict"]
    assert [r.payload["suspect"] for r in rulings] == ["unknown"] * 2 + ["miller"] * 10
    final = played.report.final.verdict
    assert ledger[-1] == final
    assert (final.kind, final.agent_id, final.visibility) == ("verdict.final", "judge",
                                                              "global")
    assert final.payload["suspect"] == "miller"
    assert final.payload["text"].startswith("finds against the miller: ")
    # every agent sees the verdict
    for agent in AGENTS:
        assert played.village.world.episodic(agent)[-1] == final
    # each chat request was answered from the script, in the expected number
    requests = played.server.chat_requests
    assert {r.status for r in requests} == {200}
    assert len(requests) == 12 * 3 + 12 + 1 + len(AGENTS) * 4  # lines, rulings, final, beliefs


def test_speech_and_the_world_are_global_thoughts_and_clues_private(played: Played) -> None:
    for event in played.ledger:
        if event.kind in ("agent.thought", "clue.found"):
            assert event.visibility == "private" and event.agent_id in AGENTS
        elif event.kind != "world.observed":
            assert event.visibility == "global", event


def test_no_agent_recalls_or_is_prompted_with_another_agents_private_events(
        played: Played) -> None:
    ledger = played.ledger
    hidden = {agent: private_to_others(ledger, agent) for agent in AGENTS}
    assert {a: len(h) for a, h in hidden.items()} == {
        "baker": 24 + 1, "miller": 24 + 1, "guard": 24, "judge": 36 + 1}
    recalls = [r for turn in played.report.turns for r in turn.recalls.values()]
    recalls.append(played.report.final.recall)
    assert len(recalls) == 12 * 4 + 1
    for recall in recalls:
        secret = {e.id for e in hidden[recall.agent_id]}
        for event in [*recall.episodic, *recall.salient]:
            assert event.id not in secret
            assert (event.agent_id == recall.agent_id or event.visibility == "global"
                    or event.kind in VIEWS.global_kinds)
    # what reached the model: no prompt for an agent shows another's thoughts or clues
    for request in played.server.chat_requests:
        agent = asked(request)
        for event in hidden[agent]:
            assert event.payload["text"] not in request.text, (agent, event)
    # and the guard's clue reached her own prompts
    clue = next(e for e in ledger if e.kind == "clue.found")
    assert any(clue.payload["text"] in r.text and "Turn 2: guard," in r.text
               for r in played.server.chat_requests)


def test_agents_reflect_every_third_turn_and_everyone_sees_the_beliefs(
        played: Played) -> None:
    world = played.village.world
    ledger = played.ledger
    turns = played.report.turns
    reflected = {t.number: sorted(b.agent_id or "" for b in t.reflections) for t in turns
                 if t.reflections}
    assert reflected == {n: sorted(AGENTS) for n in (3, 6, 9, 12)}
    for agent in AGENTS:
        made = [e for e in ledger if e.kind == "agent.reflected" and e.agent_id == agent]
        assert len(made) == 4
        assert all(e.visibility == "global" for e in made)
        # each later belief supersedes the one before: one belief held at the end
        assert [e.payload.get("supersedes") for e in made] == [None, *(e.id for e in
                                                                      made[:-1])]
        assert world.beliefs(agent) == [made[-1]]
        assert played.report.final.beliefs[agent] == [made[-1]]
        # a belief cites only events its agent saw, and every other agent sees it
        secret = {e.id for e in private_to_others(ledger, agent)}
        for belief in made:
            assert belief.payload["based_on"]
            assert not secret & set(belief.payload["based_on"])
            for other in AGENTS:
                assert world.episodic(other, as_of=belief.id)[-1] == belief
    assert "judge: The fire was an accident; the miller must make it good." in (
        played.report.final.text)


def test_the_printout_has_one_line_per_recalled_event(played: Played) -> None:
    turns = played.report.turns
    # turn 1: each agent sees the world's observation and what was said before it spoke
    first = {a: (len(r.episodic), len(r.salient)) for a, r in turns[0].recalls.items()}
    assert first == {"baker": (1, 1), "miller": (2, 2), "guard": (3, 3), "judge": (4, 3)}
    for turn in turns[1:]:
        assert {a: (len(r.episodic), len(r.salient)) for a, r in turn.recalls.items()} == {
            a: (VIEWS.episodic_n, VIEWS.salience_k) for a in AGENTS}
    for turn in turns:
        lines = turn.text.splitlines()
        recalled = [line for line in lines if line.startswith("    - ")]
        expected = [f"    {event_line(e)}" for r in turn.recalls.values()
                    for e in [*r.episodic, *r.salient]]
        assert recalled == expected
        assert len(recalled) == (19 if turn.number == 1 else 4 * 7)
        assert sum("recalls" in line for line in lines) == len(AGENTS)
        assert sum("thinks (private)" in line for line in lines) == len(VILLAGERS)
        assert sum(line.startswith("  judge rules: ") for line in lines) == 1
    assert played.report.text.count("\n━━ Turn ") == 11
    assert played.report.final.text.startswith("━━ The verdict ━━\njudge recalls")


def test_prompts_are_layered_from_the_views(played: Played) -> None:
    fifth = played.report.turns[4]
    [request] = [r for r in played.server.chat_requests
                 if r.body["messages"][-1]["content"] == "Turn 5: baker, your move."]
    prompt = request.body["messages"][0]["content"]
    headings = ["## Identity", "## Current scene", "## Your memory",
                "## Additional context", "## Output format"]
    assert [prompt.index(h) for h in headings] == sorted(prompt.index(h) for h in headings)
    assert VILLAGERS[0].identity in prompt and fifth.chapter.question in prompt
    for event in fifth.recalls["baker"].memory:
        assert event_line(event) in prompt
    assert "Your current beliefs:\n- Milo bears me a grudge" in prompt
    [ruling] = [r for r in played.server.chat_requests
                if r.body["messages"][-1]["content"] == "Turn 5: judge, your ruling."]
    assert JUDGE.identity in ruling.text and '"suspect"' in ruling.text


def test_a_store_that_holds_a_village_is_not_played_again(played: Played) -> None:
    with pytest.raises(InvalidInput, match="already holds a village"), \
            open_village(played.db, played.village.llm):
        pass


def test_python_m_examples_village_runs_on_the_scripted_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERMEM_LLM_")}
    done = subprocess.run([sys.executable, "-m", "examples.village"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "played by the scripted model of ledgermem.testing" in done.stdout
    assert "━━ Turn 12/12" in done.stdout
    assert "judge's final verdict: finds against the miller" in done.stdout
