"""Extraction against weak local models: the guards on each operation, ids read
leniently, and the answers a real small model gave (Qwen2.5-Coder-0.5B behind
llama-cpp-python, ``../shared/data/real-llm``) played as scripted replies.

The figures in docs/llm-servers.md ("What the guards cost and stop") are the ones
``test_what_the_guards_cost_on_good_answers`` and ``…_stop_on_the_recorded_answers``
pin: change a guard and those tests say what it changed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermem import ExtractionOptions, Memory, SQLiteStore, UserMemory
from ledgermem.pipeline.consolidate import consolidate_session
from ledgermem.pipeline.extraction import target_of
from ledgermem.pipeline.guards import (
    GuardOptions,
    Said,
    check_delete,
    check_fact,
    check_update,
    content_words,
    informative,
)
from ledgermem.pipeline.prompts import extraction_messages
from ledgermem.testing import HashEmbedder, Reply, ScriptedLLMServer
from ledgermem.types import Item, Scope, Turn
from tests.pipeline.conftest import make_llm
from tests.pipeline.scripts import LONG, ops
from tests.support import FakeClock

INSTRUCTIONS = extraction_messages([], {}, instructions=None, now="2026-11-23T17:30:00+00:00"
                                   )[0]["content"]


def said(*turns: tuple[str, str]) -> Said:
    """Turns as the guards see them: ids t1, t2… in order."""
    return Said([(f"t{n}", role, text) for n, (role, text) in enumerate(turns, start=1)],
                INSTRUCTIONS)


def user(text: str) -> tuple[str, str]:
    return ("user", text)


def assistant(text: str) -> tuple[str, str]:
    return ("assistant", text)


# the guards, one by one ---------------------------------------------------------------
ALLERGY = said(user("Also I'm allergic to penicillin, please keep that in mind."),
               assistant("Noted, you are allergic to penicillin."))


@pytest.mark.parametrize("content", [
    "...", "…", "", "   ", '""', "''", "N/A", "n/a", "none", "null", "<fact>", "{content}",
    "[fact]", "TBD", "Is ...", "The user ...", "content",
])
def test_placeholders_are_never_stored(content: str) -> None:
    verdict = check_fact(content, "because", ALLERGY)
    assert verdict.problem is not None
    assert "placeholder" in verdict.problem or verdict.problem == "no content"


def test_a_fact_the_user_stated_passes_with_its_turn_as_provenance() -> None:
    verdict = check_fact("Is allergic to penicillin", "health", ALLERGY)
    assert (verdict.problem, verdict.turn_ids, verdict.reason) == (None, ("t1",), "health")


def test_a_copy_of_the_instructions_or_of_the_reason_is_refused() -> None:
    chat = said(user("I moved to Porto last year and I love it " + LONG))
    assert "copies the instructions" in str(
        check_fact("Prefers green tea over coffee", None, chat).problem)
    assert "only repeats the reason" in str(
        check_fact("Shared news about the city", "Shared news about the city", chat).problem)
    # the user's own words are kept even when the reason copies them (the reason is not)
    words = "I moved to Porto last year and I love it"
    verdict = check_fact(words, words, chat)
    assert (verdict.problem, verdict.reason) == (None, None)


def test_what_the_assistant_did_is_not_a_fact_about_the_user() -> None:
    chat = said(user("Can you take a screenshot of my desktop and create a task called "
                     "weekly review for Friday? Also I'm allergic to penicillin."),
                assistant("A screenshot was captured and the task 'weekly review' was "
                          "created for Friday."))
    for content in ("A screenshot was captured and the task 'weekly review' was created "
                    "for Friday.", "The assistant created a weekly review task"):
        assert "restates what the assistant" in str(check_fact(content, None, chat).problem)
    assert check_fact("Is allergic to penicillin", None, chat).problem is None
    assert check_fact("Wants a weekly review task on Fridays", None, chat).problem is None


def test_chinese_and_japanese_facts_are_grounded_by_their_characters() -> None:
    """Written without spaces, a clause is one "word": its pairs of characters count."""
    chinese = said(user("我住在北京，在一家银行工作。"))
    assert check_fact("住在北京", None, chinese).problem is None
    assert check_fact("在银行工作", None, chinese).problem is None
    assert "not grounded" in str(check_fact("喜欢上海的咖啡", None, chinese).problem)
    japanese = said(user("私は東京に住んでいます"))
    assert check_fact("東京に住んでいます", None, japanese).problem is None
    assert "not grounded" in str(check_fact("大阪で働いています", None, japanese).problem)


def test_numbers_written_as_words_count_as_numbers() -> None:
    chat = said(user("My daughter is 45 and my son is 12"))
    assert check_fact("Daughter turned forty-five", None, chat).problem is None
    assert check_fact("Son is twelve", None, chat).problem is None


def test_a_fact_that_names_an_assistant_is_still_the_users() -> None:
    """Only a statement whose subject is the assistant is its doing."""
    chat = said(user("I work as a teaching assistant at the local primary school, my wife "
                     "is a dental assistant, and I'm building a chatbot for work."))
    for content in ("Works as a teaching assistant at the local primary school",
                    "Wife is a dental assistant", "Is building a chatbot for work"):
        assert check_fact(content, None, chat).problem is None, content
    assert "restates what the assistant" in str(
        check_fact("The AI assistant suggested a chatbot for work", None, chat).problem)


def test_words_nobody_said_are_not_grounded() -> None:
    chat = said(user("I play the cello in an amateur orchestra"),
                assistant("Lovely! Do you also play the violin?"))
    assert check_fact("Plays the cello", None, chat).turn_ids == ("t1",)
    assert "not grounded" in str(check_fact("Plays the violin in Berlin", None, chat).problem)
    assert "not grounded" in str(check_fact("Takes insulin every morning", None, chat).problem)
    # switched off, only the other checks remain
    loose = GuardOptions(grounding=0)
    assert check_fact("Takes insulin every morning", None, chat, loose).problem is None


def test_dates_and_numbers_a_model_resolves_do_not_count_against_it() -> None:
    chat = said(user("I moved from Lisbon to Porto last month, and I start at the port "
                     "authority on Monday"))
    for content in ("Moved from Lisbon to Porto in October 2026",
                    "Starts a job at the port authority on 2026-11-30"):
        assert check_fact(content, None, chat).problem is None, content


def test_an_update_must_be_grounded_and_say_why_it_drops_what_it_replaces() -> None:
    old = "Starts a new job at the port authority on Monday"
    chat = said(user("Actually I changed my mind: I will not take the port authority job, "
                     "I'm staying at the hospital where I work as a pharmacist now."))
    good = check_update("Works as a pharmacist at a hospital", "declined the port job",
                        old, chat)
    assert (good.problem, good.turn_ids) == (None, ("t1",))
    assert "without saying why" in str(
        check_update("Works as a pharmacist at a hospital", "...", old, chat).problem)
    # keeping most of the old words refines it; no reason needed
    refined = check_update("Will not take the new job at the port authority", None, old, chat)
    assert refined.problem is None
    # a paraphrase the user never said is the guards' price: "declined" was not said
    assert "not grounded" in str(check_update("Declined the new job at the port authority",
                                              None, old, chat).problem)
    assert "placeholder" in str(check_update("...", "...", old, chat).problem)
    assert "not grounded" in str(check_update("Works as a nurse in Lisbon", "new job",
                                              old, chat).problem)


def test_a_delete_must_name_something_the_user_spoke_of() -> None:
    chat = said(user("Sadly we had to find a new home for Miso the cat"))
    assert check_delete("Has a cat called Miso", None, chat).turn_ids == ("t1",)
    assert "no user turn" in str(check_delete("Plays the cello", "gone", chat).problem)


def test_content_words_leave_out_framing_dates_and_function_words() -> None:
    assert content_words("She lives in Porto since Monday 3 March 2026 with her cats") == [
        "porto", "cat"]
    assert not informative("The user said so.") and informative("Allergic to penicillin")


# ids given as something else -------------------------------------------------------
def item(n: int, content: str, created: str) -> Item:
    return Item(id=f"real-{n}", user_id="u", category="fact", content=content,
                source="user", confidence=0.8, created_at=created, updated_at=created)


SHOWN = {"1": item(1, "Lives in Porto", "2026-11-20T10:00:00+00:00"),
         "2": item(2, "Sister Ana is a nurse", "2026-11-21T09:30:00+00:00"),
         "3": item(3, "Works at a bakery", "2026-11-21T09:30:00+00:00")}


@pytest.mark.parametrize(("given", "expected"), [
    ("1", "real-1"), ("[2]", "real-2"), ("#2", "real-2"), ("item 3", "real-3"),
    ("id: 3", "real-3"), ("ID 1.", "real-1"),
    ("[2] (fact; recorded 2026-11-21 09:30) Sister Ana is a nurse", "real-2"),
    ("2026-11-20 10:00", "real-1"), ("2026-11-20", "real-1"),
    ("sister ana is a nurse", "real-2"),
    ("2026-11-21 09:30", None),  # two items were recorded then: which one?
    ("1 or 2", None), ("the one about Porto", None), ("7", None), ("real-1", None),
    ("", None), (None, None),
])
def test_ids_are_read_leniently_only_where_they_cannot_be_misread(
        given: str | None, expected: str | None) -> None:
    found = target_of(given, SHOWN)
    assert (found.id if found else None) == expected


# the recorded answers, played back ---------------------------------------------------
TURN_1 = ("I moved from Lisbon to Porto last month, and I'm starting a new job at the port "
          "authority on Monday. My sister Ana is a nurse.")
REPLY_1 = "Congratulations on the new job! I'll remember that."
TURN_2 = ("Actually I changed my mind: I will not take the port authority job, I'm staying "
          "at the hospital where I work as a pharmacist now.")
TURN_3 = ("Can you take a screenshot of my desktop and create a task called weekly review "
          "for Friday? Also I'm allergic to penicillin, please keep that in mind.")
REPLY_3 = "A screenshot was captured and the task 'weekly review' was created for Friday."
SCREENSHOT = REPLY_3

Batch = tuple[tuple[tuple[str, str], ...], dict[str, Any]]
RECORDED: list[Batch] = [  # what the model answered to each batch, in the shapes it used
    ((user(TURN_1), assistant(REPLY_1)),
     ops({"op": "ADD", "content": TURN_1, "category": "fact", "entity": None,
          "context": None, "due_at": None, "sensitive": False, "reason": TURN_1},
         {"op": "UPDATE", "id": "1", "content": REPLY_1, "reason": TURN_1})),
    ((user(TURN_2),), ops({"op": "UPDATE", "id": "1", "content": "...", "reason": "..."})),
    ((user(TURN_3), assistant(REPLY_3)),
     ops({"op": "ADD", "content": SCREENSHOT, "category": "fact", "entity": None,
          "context": None, "due_at": None, "sensitive": False, "reason": "..."},
         {"op": "UPDATE", "id": "2", "content": SCREENSHOT, "reason": "..."})),
]


@pytest.fixture
def weak_server() -> Iterator[ScriptedLLMServer]:
    """llama-cpp-python as recorded: HTTP 500 on json_schema."""
    with ScriptedLLMServer(profile="llama-cpp-python") as scripted:
        yield scripted
        assert scripted.errors == []


def open_memory(path: Path, server: ScriptedLLMServer, clock: FakeClock) -> Memory:
    llm = make_llm(server, retries=3, validation_retries=1)  # retries a refusal must not spend
    return Memory(SQLiteStore(path), embedder=HashEmbedder(), llm=llm, clock=clock,
                  extraction=ExtractionOptions(claim_seconds=5, min_words=5))


def play(alice: UserMemory, memory: Memory, turns: tuple[tuple[str, str], ...]) -> list[str]:
    ids = [t.id for t in alice.add_turns([{"role": r, "content": c} for r, c in turns],
                                         infer=True)]
    memory.flush()
    return ids


def test_the_recorded_answers_store_no_junk_and_keep_what_the_user_said(
        tmp_path: Path, weak_server: ScriptedLLMServer, clock: FakeClock) -> None:
    with open_memory(tmp_path / "weak.db", weak_server, clock) as memory:
        alice = memory.for_user("alice", session_id="alice:chat")
        batches = []
        for turns, answer in RECORDED:
            weak_server.reply(answer)
            batches.append(play(alice, memory, turns))
            clock.advance(minutes=1)
        everything = alice.all_knowledge(include_superseded=True, limit=None)["items"]
        done = [e.payload for e in memory.store.events("alice", kinds=["turns.extracted"])]
        status = alice.status()
        structured = memory.llm.structured_output  # type: ignore[union-attr]
        history = [e.kind for e in alice.history(everything[0].id)]
    # json_mode auto: refused once (HTTP 500, not retried), JSON mode from then on
    statuses = [(r.status, r.body["response_format"]["type"])
                for r in weak_server.chat_requests]
    assert statuses == [(500, "json_schema")] + [(200, "json_object")] * 3
    assert structured == "json_object"
    # the one thing stored is what the user said, and nothing ever replaced it
    [kept] = everything
    assert (kept.content, kept.active, kept.superseded_by) == (TURN_1, True, None)
    assert kept.metadata["turn_ids"] == batches[0][:1]  # grounded in the user's turn
    assert kept.content not in (REPLY_1, SCREENSHOT, "...")
    assert status["extraction"] == {"pending": 0, "done": 5, "skipped": 0, "failed": 0}
    # every refusal is listed with the batch, and counted
    assert [(d["added"], d["updated"], d["rejected"]) for d in done] == [
        (1, 0, 1), (0, 0, 1), (0, 0, 2)]
    problems = [" | ".join(d["problems"]) for d in done]
    assert "'1' was not among the items shown" in problems[0]
    assert "placeholder" in problems[1]
    assert "restates what the assistant said or did" in problems[2]
    assert "'2' was not among the items shown" in problems[2]
    assert history == ["memory.added"]


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "real-llm" / \
    "small-model-extraction.json"


def recorded_turns(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The turns an extraction request showed, read back from its prompt."""
    prompt = request["messages"][-1]["content"].split("New conversation turns:\n", 1)[1]
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^\[[^\]]+\] (user|assistant): (.*)$", prompt, re.MULTILINE)]


@pytest.mark.skipif(not SHARED.is_file(), reason="the recorded exchanges are not beside the "
                                                 "repository")
def test_the_recording_itself_replayed_byte_for_byte(tmp_path: Path, clock: FakeClock) -> None:
    data = json.loads(SHARED.read_text(encoding="utf-8"))
    rejection = data["json_schema_rejection"]
    replies = [Reply(status=rejection["status"], error=rejection["body"])] + [
        exchange["response"]["choices"][0]["message"]["content"]
        for exchange in data["exchanges"]]
    with ScriptedLLMServer(*replies) as server, \
            open_memory(tmp_path / "replay.db", server, clock) as memory:
        alice = memory.for_user("alice", session_id="alice:chat")
        for exchange in data["exchanges"]:
            play(alice, memory, tuple(recorded_turns(exchange["request"])))
        items = alice.all_knowledge(include_superseded=True, limit=None)["items"]
        assert server.remaining == 0 and len(server.chat_requests) == 4
    assert [(i.content, i.active) for i in items] == [(TURN_1, True)]


# what the guards cost and stop --------------------------------------------------------
MOVE = ("I moved to Lisbon last month for a new job at a design studio called Atelier Sul, "
        "and I love the city so far")
BAKERY = "Works at a bakery in Porto"
JAPAN = tuple((("user", "assistant")[n % 2], f"old message {n} about the trip to Japan in "
               "April") for n in range(6))
VEGETARIAN = (user("I'm vegetarian"), assistant("Noted!"), user("My sister is called Nora"),
              assistant("Nice name!"))

GOOD: list[tuple[str, str | None, str | None, str | None, tuple[tuple[str, str], ...]]] = [
    # (operation, content, reason, old content, turns): the distinct answers the scripted
    # tests give (tests/pipeline, tests/agent), as the guards saw them
    ("ADD", "Recorded batch4", None, None,
     (user("Note batch4 for the record " + LONG), assistant("Noted batch4."))),
    ("ADD", "Recorded batch1", None, None, (user("Note batch1 " + LONG),)),
    ("ADD", "Lives in Lisbon", "user said so", None,
     (user(MOVE), assistant("Congratulations on the move!"))),
    ("ADD", "Dentist appointment on Friday at 10:00", None, None,
     (user(MOVE), assistant("Congratulations on the move!"))),
    ("ADD", "Takes insulin every morning", None, None,
     (user(MOVE), assistant("Congratulations on the move!"))),
    ("UPDATE", "Works at Atelier Sul in Lisbon", "new job", BAKERY,
     (user(MOVE + " so I no longer work at the bakery in Porto"),)),
    ("UPDATE", "Works at Atelier Sul in Lisbon", "changed jobs", BAKERY,
     (user(MOVE + " and left the bakery"),)),
    ("DELETE", None, "the cat was rehomed", "Has a cat called Miso who loves tuna",
     (user("Sadly we had to find a new home for Miso the cat, the tuna-loving one " + LONG),)),
    ("ADD", "Lives in Lisbon", None, None, (user(MOVE),)),
    ("ADD", "Plays the cello on weekends", None, None,
     (user("On weekends I play the cello with an amateur orchestra " + LONG),)),
    ("ADD", "Has a physiotherapy appointment for a knee injury", None, None,
     (user("Tomorrow I am seeing Dr. Patel about the knee I hurt while running, the "
           "appointment is at nine in the morning"),)),
    ("UPDATE", "Works at a design studio in Lisbon", None, BAKERY, (user(MOVE),)),
    ("ADD", "Is learning Portuguese", None, None,
     (user("These days I spend most evenings learning Portuguese " + LONG),)),
    ("ADD", "Paints watercolours", None, None,
     (user("These days I spend most evenings painting watercolours " + LONG),)),
    ("DELETE", None, "finished", "Restores an old bicycle",
     (user("I finished restoring the bicycle and I am still training for the marathon, "
           "and I started painting watercolours " + LONG),)),
    ("ADD", "Paints watercolours", None, None,
     (user("I finished restoring the bicycle and I am still training for the marathon, "
           "and I started painting watercolours " + LONG),)),
    ("DELETE", None, None, "Restores an old bicycle",
     (user("I finished restoring the bicycle and gave up on the marathon " + LONG),)),
    ("DELETE", None, None, "Is training for a marathon in the spring",
     (user("I finished restoring the bicycle and gave up on the marathon " + LONG),)),
    ("ADD", "Plays the cello", None, None,
     (user("I play the cello in an amateur orchestra " + LONG),)),
    ("ADD", "Is planning a trip to Japan", None, None,
     tuple(user(f"Planning the Japan trip, part {n}") for n in range(5))),
    ("ADD", "Is planning a trip to Japan in April", None, None, JAPAN),
    ("ADD", "Prefers window seats on long flights", None, None, JAPAN),
    ("ADD", "Has a greyhound called Pixel", None, None,
     (user("I just adopted a greyhound called Pixel from the shelter " + LONG),)),
    ("ADD", "Is vegetarian", None, None, VEGETARIAN[:2]),
    ("ADD", "Plays chess", None, None, (user("Still here"), assistant("reply to Still here"))),
    ("ADD", "Has a sister called Nora", None, None, VEGETARIAN),
    ("ADD", "Lives in Lyon", None, None, (user("I moved to Lyon"), assistant("Welcome to Lyon!"))),
    # what a good model answers to the recorded batches
    ("ADD", "Moved from Lisbon to Porto last month", None, None,
     (user(TURN_1), assistant(REPLY_1))),
    ("ADD", "Starts a new job at the port authority on Monday", None, None,
     (user(TURN_1), assistant(REPLY_1))),
    ("ADD", "Sister Ana is a nurse", None, None, (user(TURN_1), assistant(REPLY_1))),
    ("UPDATE", "Stays at the hospital as a pharmacist; declined the port authority job",
     "changed their mind about the new job", "Starts a new job at the port authority on "
     "Monday", (user(TURN_2),)),
    ("ADD", "Is allergic to penicillin", "health", None, (user(TURN_3), assistant(REPLY_3))),
    ("ADD", "Wants a weekly review task every Friday", None, None,
     (user(TURN_3), assistant(REPLY_3))),
]

BAD = [  # the recorded answers, each judged as if its id had been shown (old: TURN_1)
    ("ADD", TURN_1, TURN_1, None, (user(TURN_1), assistant(REPLY_1))),
    ("UPDATE", REPLY_1, TURN_1, TURN_1, (user(TURN_1), assistant(REPLY_1))),
    ("UPDATE", "...", "...", TURN_1, (user(TURN_2),)),
    ("ADD", SCREENSHOT, "...", None, (user(TURN_3), assistant(REPLY_3))),
    ("UPDATE", SCREENSHOT, "...", TURN_1, (user(TURN_3), assistant(REPLY_3))),
]


def judge(cases: list[Any]) -> Counter[str]:
    """How many cases pass, and how many each guard stops."""
    outcomes: Counter[str] = Counter()
    for op, content, reason, old, turns in cases:
        chat = said(*turns)
        if op == "ADD":
            verdict = check_fact(content, reason, chat)
        elif op == "UPDATE":
            verdict = check_update(content, reason, old, chat)
        else:
            verdict = check_delete(old, reason, chat)
        problem = verdict.problem or ""
        outcomes["passed" if not problem else "placeholder" if "placeholder" in problem
                 else "assistant" if "assistant" in problem
                 else "without a reason" if "without saying why" in problem
                 else "not grounded" if "grounded" in problem else problem] += 1
    return outcomes


def test_what_the_guards_cost_on_good_answers() -> None:
    scripted, written = GOOD[:27], GOOD[27:]
    assert judge(scripted) == {"passed": 22, "not grounded": 4, "without a reason": 1}
    assert judge(written) == {"passed": 6}


def test_what_the_guards_stop_on_the_recorded_answers() -> None:
    assert judge(BAD) == {"passed": 1, "assistant": 3, "placeholder": 1}


def test_a_turn_of_another_role_grounds_nothing() -> None:
    chat = Said([("t1", "tool", "penicillin allergy found in the record"),
                 ("t2", "user", "What did the record say?")])
    assert "not grounded" in str(check_fact("Is allergic to penicillin", None, chat).problem)


def test_guards_apply_to_consolidated_facts_too(tmp_path: Path, server: ScriptedLLMServer,
                                                clock: FakeClock) -> None:
    llm = make_llm(server)
    with Memory(SQLiteStore(tmp_path / "c.db"), embedder=HashEmbedder(), llm=llm,
                clock=clock) as memory:
        alice = memory.for_user("alice")
        alice.add_turns([{"role": "user", "content": TURN_3},
                         {"role": "assistant", "content": REPLY_3}], session_id="s1")
        server.reply({"items": [{"content": SCREENSHOT}, {"content": "..."},
                                {"content": "Is allergic to penicillin", "sensitive": True}]})
        result = consolidate_session(memory.parts, Scope("alice"), "s1", llm)
        items = [i.content for i in alice.all_knowledge()["items"]]
        [mark] = memory.store.events("alice", kinds=["turn.consolidated"])
    assert items == ["Is allergic to penicillin"]
    assert result["extracted_items"] == 1
    assert (mark.payload["items"], mark.payload["skipped"]) == (1, 2)
    llm.close()


def test_the_guards_see_turns_as_the_pipeline_stores_them() -> None:
    turn = Turn(id="x1", user_id="u", session_id="s", role="user", content=TURN_3,
                ts="2026-11-23T17:31:00+00:00")
    chat = Said([(turn.id, turn.role, turn.content)], INSTRUCTIONS)
    assert check_fact("Is allergic to penicillin", None, chat).turn_ids == ("x1",)


def test_a_refused_change_of_a_sensitive_item_quotes_none_of_its_text(
        tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Its problem is logged and kept in the ledger: no word of the item, or of what
    would have replaced it, is in either."""
    with ScriptedLLMServer() as server, open_memory(tmp_path / "m.db", server,
                                                    clock) as memory:
        alice = memory.for_user("alice", session_id="alice:chat")
        alice.remember("Takes insulin every morning", sensitive=True)
        server.reply(ops({"op": "UPDATE", "id": "1", "content": "Runs marathons",
                          "reason": "..."}))
        with caplog.at_level("WARNING", logger="ledgermem.extraction"):
            play(alice, memory, (user("I started running marathons with my brother "
                                      "this spring, it is a lot of fun"),))
        [done] = [e.payload for e in memory.store.events("alice", kinds=["turns.extracted"])]
    [problem] = done["problems"]
    assert "drops" in problem and "<sensitive text>" in problem
    for shown in (problem, caplog.text):
        assert "insulin" not in shown and "marathons" not in shown
