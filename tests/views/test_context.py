"""The context builder: layer order, optional layers, the last three visitor artifacts."""

from __future__ import annotations

from ledgermem.views import build_context, episodic, event_line
from tests.views.ledger import ev

MEMORY = [
    ev(1, "world.observed", "The bakery burned down"),
    ev(2, "agent.spoke", "I was at the mill\nall night", agent="miller"),
]


def test_every_layer_in_order_under_its_heading() -> None:
    prompt = build_context(identity="You are the miller.", scene="Dawn, the square.",
                           memory=MEMORY, visitor_artifacts=["a note"],
                           extra="It is market day.", output_format="Answer in JSON.")
    assert prompt == (
        "## Identity\nYou are the miller.\n\n"
        "## Current scene\nDawn, the square.\n\n"
        "## Your memory\n"
        "- 2026-06-01 12:01:00 world.observed: The bakery burned down\n"
        "- 2026-06-01 12:02:00 agent.spoke (miller): I was at the mill all night\n\n"
        "## Visitor\na note\n\n"
        "## Additional context\nIt is market day.\n\n"
        "## Output format\nAnswer in JSON.")


def test_the_order_holds_whatever_order_the_arguments_come_in() -> None:
    prompt = build_context(output_format="JSON", extra="X", visitor_artifacts=["V"],
                           memory=MEMORY, scene="S", identity="I")
    headings = [line for line in prompt.splitlines() if line.startswith("## ")]
    assert headings == ["## Identity", "## Current scene", "## Your memory", "## Visitor",
                        "## Additional context", "## Output format"]


def test_layers_left_out_or_blank_are_omitted_with_their_heading() -> None:
    assert build_context() == ""
    assert build_context(identity="  ", scene="", memory=[], visitor_artifacts=[" "]) == ""
    assert build_context(scene="Night.", output_format="One word.") == (
        "## Current scene\nNight.\n\n## Output format\nOne word.")
    only_memory = build_context(memory=episodic(MEMORY, "baker"))
    assert only_memory == ("## Your memory\n"
                           "- 2026-06-01 12:01:00 world.observed: The bakery burned down")


def test_only_the_last_three_visitor_artifacts_are_shown() -> None:
    prompt = build_context(visitor_artifacts=["first", "second", "third", "fourth", "fifth"])
    assert prompt == "## Visitor\nthird\n\nfourth\n\nfifth"


def test_an_event_line_is_one_line_with_long_text_cut() -> None:
    line = event_line(ev(3, "clue.found", "word " * 200, agent="judge"), max_chars=20)
    assert line == "- 2026-06-01 12:03:00 clue.found (judge): word word word word…"
    assert event_line(ev(3, "x", "hi"), with_id=True) == "- [e3] 2026-06-01 12:03:00 x: hi"
