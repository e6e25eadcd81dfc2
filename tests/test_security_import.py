"""``ledgermem import`` given a damaged or crafted export: an event no write would have
stored (a NUL in a user id, a time without its offset, a payload its kind does not
have…) is refused with exit 2 and one line naming its line, and nothing is stored (a
database the import made is removed again). An export is a file someone hands over:
kept, such an event would fail every later read of that user's memory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledgermem import Memory
from ledgermem.cli import main

Change = Callable[[dict[str, Any]], None]


def run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), "--embedder", "none", "--json", *args])


def export_of_one_memory(tmp_path: Path) -> list[dict[str, Any]]:
    source = tmp_path / "source.db"
    with Memory.open(source, embedder=None) as memory:
        memory.for_user("ann").remember("Ann prefers green tea", confidence=0.9)
    done = run(source, "export", "-o", str(tmp_path / "good.jsonl"))
    assert done.exit_code == 0, done.output
    return [json.loads(line) for line in (tmp_path / "good.jsonl").read_text().splitlines()]


def crafted(tmp_path: Path, change: Change) -> Path:
    header, event, *rest = export_of_one_memory(tmp_path)
    assert event["kind"] == "memory.added"
    change(event)
    path = tmp_path / "crafted.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in (header, event, *rest)))
    return path


def _set(key: str, value: Any) -> Change:
    return lambda event: event.__setitem__(key, value)


def _drop_item_fields(event: dict[str, Any]) -> None:
    event["payload"]["item"] = {"content": "Ann prefers green tea"}


@pytest.mark.parametrize(("change", "said"), [
    (_set("user_id", "ann\x00"), "user_id cannot contain NUL"),
    (_set("user_id", " "), "user_id must be non-empty text"),
    (_set("agent_id", "x" * 5000), "agent_id is 5,000 characters"),
    (_set("session_id", "s\x00"), "session_id cannot contain NUL"),
    (_set("ts", "not a time"), "is not an ISO 8601 time with a UTC offset"),
    (_set("ts", "2026-06-01T12:00:00"), "is not an ISO 8601 time with a UTC offset"),
    (_set("kind", "Memory Added; DROP"), "is not an event kind"),
    (_set("visibility", "public"), "is not private or global"),
    (_set("id", ""), "an event's id must be non-empty text"),
    (_drop_item_fields, "an event's payload does not fit its kind"),
])
def test_an_event_no_write_would_store_is_refused(tmp_path: Path, change: Change,
                                                  said: str) -> None:
    db = tmp_path / "new.db"
    result = run(db, "import", str(crafted(tmp_path, change)))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: line 2: ") and said in result.stderr
    assert result.stderr.count("\n") == 1 and "please report it" not in result.stderr
    assert not db.exists()   # the database the import made is gone again


def test_a_sound_export_still_imports(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    assert run(db, "import", str(crafted(tmp_path, lambda event: None))).exit_code == 0
    with Memory.open(db, embedder=None) as memory:
        [item] = memory.for_user("ann").all_knowledge()["items"]
    assert (item.content, item.confidence) == ("Ann prefers green tea", 0.9)


def test_a_payload_value_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    def wrong_type(event: dict[str, Any]) -> None:
        event["payload"]["item"]["confidence"] = "high"

    db = tmp_path / "new.db"
    result = run(db, "import", str(crafted(tmp_path, wrong_type)))
    assert result.exit_code == 2, result.output
    assert not db.exists()
