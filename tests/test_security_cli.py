"""What the ``ledgermem`` command prints of stored text: exactly the text. Memories,
turns and proposals are written by agents, tools, LLM extraction and imports, so a
stored string may hold terminal escape sequences (``ESC ]0;…`` retitles a terminal,
``ESC ]52;…`` writes its clipboard, ``ESC [2J`` wipes it) or rich markup (``[/]``,
``[link=…]…[/link]`` draws a hyperlink whose target is hidden). None of it may reach
the terminal as anything but visible characters, and none of it may fail a command.

Hostile input on the command line itself (FTS5 syntax, LIKE wildcards, NUL, lone
surrogates, very long text) gets exit 2 and one line, and stores nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledgermem import Finding, Item, Memory
from ledgermem.cli import main
from tests.server_support import ROOT

ESCAPES = ("\x1b]0;PWNED\x07", "\x1b]52;c;cm0gLXJmIH4K\x07", "\x1b[2J", "\x9b31m", "\r\x08")
HOSTILE = [
    "closing [/] tag with nothing open",
    "[link=https://evil.example/login]Verify your bank account[/link]",
    "[bold red]urgent[/bold red] and :warning: as typed",
    "escapes " + " ".join(ESCAPES) + " end",
]
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\x08")


def run(db: Path, *args: str, user: str = "ann") -> Result:
    # Wide enough that no table folds a line in the middle of what a test looks for.
    return CliRunner(env={"COLUMNS": "1000"}).invoke(
        main, ["--db", str(db), "--user", user, "--embedder", "none", *args])


def seeded(db: Path) -> dict[str, str]:
    """Hostile text stored as an agent would store it (through the library)."""
    ids: dict[str, str] = {}
    with Memory.open(db, embedder=None) as memory:
        ann = memory.for_user("ann")
        for n, text in enumerate(HOSTILE):
            item = ann.remember(f"hostile {n}: {text}", entity=f"tag:{text}",
                                context=text, metadata={text: text}, due_at="in 2 days")
            ids[text] = ann.revise(item.id, f"hostile {n} revised: {text}").id
        ann.add_turns([{"role": "user", "content": text} for text in HOSTILE],
                      session_id="[/] session \x1b[2J")
        ann.propose([Finding(f"proposed: {text}", why=text) for text in HOSTILE])
    return ids


def assert_shown_as_text(result: Result, *, literal: bool = True) -> None:
    assert result.exit_code == 0, result.output
    for control in RAW_CONTROLS:
        assert control not in result.output, repr(result.output)
    assert "␛" in result.output   # ESC drawn as a symbol
    if literal:   # markup printed as typed, not interpreted
        assert "[link=https://evil.example/login]" in result.output
        assert "closing [/] tag" in result.output
        assert "[bold red]urgent[/bold red]" in result.output


def test_stored_markup_and_escapes_are_printed_as_text(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ids = seeded(db)
    item = ids[HOSTILE[3]]
    for args in (["list"], ["list", "--all"], ["recall", "hostile"], ["upcoming"],
                 ["recall", "hostile", "--all"]):
        assert_shown_as_text(run(db, *args))
    for args in (["get", item], ["show", item], ["history", item]):
        result = run(db, *args)
        assert_shown_as_text(result, literal=False)
        assert "revised" in result.output
    for text in HOSTILE[:3]:
        assert_shown_as_text_alone(run(db, "get", ids[text]), text)


def assert_shown_as_text_alone(result: Result, text: str) -> None:
    assert result.exit_code == 0, result.output
    assert text.split(" ")[0] in result.output


def test_commands_that_echo_what_they_stored_print_it_as_text(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    for text in HOSTILE:
        assert_shown_as_text_alone(run(db, "remember", text, "--context", text), text)
    stored = [item.content for item in _all(db)]
    assert sorted(stored) == sorted(HOSTILE)   # stored once each, as given
    item = _all(db)[0]
    result = run(db, "update", item.id, "--content", HOSTILE[0])
    assert result.exit_code == 0 and "closing [/] tag" in result.output
    result = run(db, "add-turn", "hello", "--session", "[/] s\x1b]0;x\x07")
    assert result.exit_code == 0 and "[/] s␛]0;x␇" in result.output


def _all(db: Path) -> list[Item]:
    with Memory.open(db, embedder=None) as memory:
        return list(memory.for_user("ann").all_knowledge()["items"])


def test_json_output_escapes_every_control_character(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    seeded(db)
    result = run(db, "--json", "list")
    assert result.exit_code == 0
    for control in RAW_CONTROLS:
        assert control not in result.output
    contents = {item["content"] for item in json.loads(result.output)["items"]}
    assert f"hostile 3 revised: {HOSTILE[3]}" in contents   # the same text, escaped


def test_a_real_terminal_gets_no_escape_sequence_from_a_memory(tmp_path: Path) -> None:
    """As a subprocess with colours forced on (as on a terminal): rich's own styling
    escapes are there, none of the memory's."""
    db = tmp_path / "m.db"
    seeded(db)
    done = subprocess.run(
        [sys.executable, "-m", "ledgermem", "--db", str(db), "--user", "ann",
         "--embedder", "none", "list"], cwd=ROOT, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "FORCE_COLOR": "1", "COLUMNS": "200",
             "HOME": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\x1b[" in done.stdout                        # rich styles the table
    for sequence in ESCAPES:
        assert sequence not in done.stdout
    assert "\x1b]8;" not in done.stdout                  # no hyperlink from [link=…]
    assert "\x1b]0;" not in done.stdout and "\x1b]52;" not in done.stdout


def test_the_review_queue_survives_markup_in_a_proposal(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    seeded(db)
    result = run(db, "review", "list")
    assert result.exit_code == 0, result.output
    for control in RAW_CONTROLS:
        assert control not in result.output


def test_the_review_queue_prints_a_proposals_markup_as_text(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    seeded(db)
    result = run(db, "review", "list")
    assert "[link=https://evil.example/login]" in result.output


@pytest.mark.parametrize("args", [
    ["recall", '" OR 1=1 --'], ["recall", "NEAR(a b, 2)"], ["recall", "content:secret"],
    ["recall", "^first * AND OR NOT"], ["recall", "scope:u616c696365"],
    ["list", "--entity", "person:%"], ["list", "--context", "%"], ["list", "--context", "_"],
])
def test_query_syntax_is_only_ever_words(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "m.db"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("alice").remember("Alice's secret first NEAR content")
        memory.for_user("ann").remember("Ann likes tea", entity="person:ann",
                                        context="home")
    result = run(db, "--json", *args)
    assert result.exit_code == 0, result.output
    assert "Alice" not in result.output
    found = json.loads(result.output)
    assert (found["items"] if isinstance(found, dict) else found) == []


@pytest.mark.parametrize("args", [
    ["remember", "nul \x00 inside"], ["remember", "x", "--entity", "%"],
    ["remember", "x", "--due", "'; DROP TABLE events; --"], ["remember", "x", "--context", " "],
    ["recall", "x" * 20_000], ["get", "y" * 2_000], ["list", "--sort", "content"],
    ["list", "--limit", "0"], ["list", "--offset", "-1"],
    ["remember", "lone \udc80 surrogate"],
])
def test_bad_input_is_one_line_exit_2_and_stores_nothing(tmp_path: Path,
                                                        args: list[str]) -> None:
    db = tmp_path / "m.db"
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("ann").remember("Ann likes tea")
    result = run(db, "--json", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert [item.content for item in _all(db)] == ["Ann likes tea"]
