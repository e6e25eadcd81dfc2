"""Grounding of ages and spans: "Is thirty-four years old" from "I am 34".

The unit words of a number ("years", "old", "months", "aged") count as said by a user
turn that states the same number bare ("I am 34", "I'm 34, and…") or with units of its
own that agree ("34 years old", "aged 34"). A number that counts something else ("34
cats"), a different number, a span that disagrees ("34 months") or a span that is no
age ("lived here 10 years") grounds nothing. (A word the turn says itself is grounded as
ever: the guards do not check numbers, which a model may resolve.)
"""

from __future__ import annotations

import pytest

from ledgermem import Memory, UserMemory
from ledgermem.pipeline.guards import Said, check_fact, check_update
from ledgermem.testing import ScriptedLLMServer
from tests.pipeline.scripts import LONG, add, ops, said


def user(*texts: str) -> Said:
    """User turns as the guards see them: ids t1, t2… in order."""
    return Said([(f"t{n}", "user", text) for n, text in enumerate(texts, start=1)])


@pytest.mark.parametrize("turn", [
    "I am 34", "I'm 34", "I'm 34.", "I am 34 and I live in Lisbon", "34 years old, and tired",
    "I'm thirty-four", "I am thirty four now", "I'm 34yo", "I was aged 34 then",
    "I turned 34 last month",
])
@pytest.mark.parametrize("fact", [
    "Is 34 years old", "Is thirty-four years old", "Is a 34-year-old", "Is aged 34",
])
def test_an_age_is_grounded_by_the_number_the_user_said(turn: str, fact: str) -> None:
    verdict = check_fact(fact, None, user(turn))
    assert (verdict.problem, verdict.turn_ids) == (None, ("t1",)), (fact, turn)


@pytest.mark.parametrize(("fact", "turn"), [
    ("Is 34 years old", "I have 34 cats"),          # the number counts something else
    ("Is 34 years old", "There are 34 of us"),
    ("Is 40 years old", "I am 34"),                 # another number
    ("Is forty years old", "I'm 34"),
    ("Is 34 years old", "Our baby is 34 months"),   # a span that disagrees
    ("Is 10 years old", "I have lived here 10 years"),  # a span, not an age
    ("Is 34 years old", "Nice to meet you"),
])
def test_an_age_the_user_did_not_state_is_not_grounded(fact: str, turn: str) -> None:
    assert "not grounded" in str(check_fact(fact, None, user(turn)).problem), (fact, turn)


def test_only_the_turn_that_states_the_number_grounds_its_units() -> None:
    chat = user("I have 34 cats", "I live in Lisbon", "I am 34")
    assert check_fact("Is 34 years old", None, chat).turn_ids == ("t3",)
    # the assistant repeating it in full does not make it the assistant's own statement
    echoed = Said([("t1", "user", "I'm 34"), ("t2", "assistant", "So you are 34 years old!")])
    assert check_fact("Is 34 years old", None, echoed).turn_ids == ("t1",)
    # the units only ride on the number: other words still need a turn of their own
    assert "not grounded" in str(check_fact("Is 34 years old and sails a red boat in Cascais",
                                            None, user("I am 34")).problem)


def test_an_update_to_a_new_age_is_grounded_by_the_new_number() -> None:
    assert check_update("Is 35 years old", "birthday", "Is 34 years old",
                        user("I turned 35 today")).problem is None
    assert "not grounded" in str(check_update(
        "Is 36 months old", "birthday", "Likes jazz", user("I turned 35 today")).problem)


def test_extraction_keeps_the_age_the_user_said_and_skips_one_they_did_not(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer) -> None:
    server.reply(ops(add("Is thirty-four years old", reason="said"),
                     add("Is 40 years old", reason="guessed")))
    ids = said(alice, f"I am 34 {LONG}", "Happy to help!")
    mem.flush()
    [item] = alice.all_knowledge()["items"]
    assert (item.content, item.metadata["turn_ids"]) == ("Is thirty-four years old", ids[:1])
    [done] = mem.store.events("alice", kinds=["turns.extracted"])
    [problem] = done.payload["problems"]
    assert "'Is 40 years old' is not grounded" in problem
