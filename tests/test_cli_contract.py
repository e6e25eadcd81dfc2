"""The CLI's contract where an audit found it broken: bad input exits 2 with one
``error:`` line, nothing on disk is lost by a failed command (an export's target), no
option is silently ignored or silently replaced by a default (an empty ``--db``, the
knowledge filters of ``recall --conversations``), and a bad line of a file is named.
Real SQLite files under ``tmp_path``; the network is faked only at httpx's edge."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledgermem import InvalidInput
from ledgermem.cli.stores import _output_file
from ledgermem.providers.embedders import embedder_from_name
from ledgermem.store.sql import SORTABLE
from tests.support import assert_one_line
from tests.test_cli_errors import cli


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user data dir of the test's own, so a fallback to the default store is seen
    (and never touches the real one)."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    return home


def files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


# export's output file -----------------------------------------------------------------
def test_a_failed_export_leaves_the_target_as_it_was(seeded_db: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    keep, new = out / "keep.jsonl", out / "new.jsonl"
    keep.write_text("precious\n")
    keep.chmod(0o600)
    for target in (keep, new):
        message = assert_one_line(cli("--db", seeded_db, "export", "--user", "nobody", "-o",
                                      str(target), code=3))
        assert "no ledger for user 'nobody'" in message
    assert keep.read_text() == "precious\n"
    assert files(out) == {"keep.jsonl"}                 # no empty new file, no temporary
    cli("--db", seeded_db, "export", "-o", str(keep), code=0)  # a success replaces it
    assert json.loads(keep.read_text().splitlines()[0])["format"] == "ledgermem-export"
    assert files(out) == {"keep.jsonl"} and stat.S_IMODE(keep.stat().st_mode) == 0o600


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_leaves_the_target_as_it_was(
        tmp_path: Path, interruption: type[BaseException]) -> None:
    keep = tmp_path / "keep.jsonl"
    keep.write_text("precious\n")
    for target in (keep, tmp_path / "new.jsonl"):
        with pytest.raises(interruption), _output_file(str(target)) as out:
            out.write("half an export")
            raise interruption()
    assert keep.read_text() == "precious\n"
    assert files(tmp_path) == {"keep.jsonl"}


@pytest.mark.parametrize(("output", "says"), [
    ("/nonexistent/x.jsonl", "no folder /nonexistent to write /nonexistent/x.jsonl in"),
    ("", "'' names no file to write"),
])
def test_export_to_a_path_it_cannot_write_exits_2(seeded_db: str, output: str, says: str) -> None:
    message = assert_one_line(cli("--db", seeded_db, "export", "-o", output, code=2))
    assert message == f"error: {says}"


# an empty --db ------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "env", "says"), [
    (["--db", ""], {}, "empty database path in --db"),
    (["--db", "  "], {}, "empty database path in --db"),
    ([], {"LEDGERMEM_DB": " "}, "empty database path in LEDGERMEM_DB"),
])
def test_an_empty_database_path_exits_2_and_never_uses_the_default(
        data_dir: Path, args: list[str], env: dict[str, str], says: str) -> None:
    for command in (["remember", "hi"], ["list"], ["doctor"]):
        result = cli(*args, "--embedder", "hash", *command, env=env, code=2)
        assert says in assert_one_line(result)
    assert not data_dir.exists()


def test_the_db_option_wins_over_an_empty_variable(seeded_db: str) -> None:
    result = cli("--db", seeded_db, "--json", "stats", env={"LEDGERMEM_DB": ""}, code=0)
    assert json.loads(result.stdout)["items"] == 1


def test_an_empty_database_variable_counts_as_unset(tmp_path: Path) -> None:
    """As every ``LEDGERMEM_*`` variable: the default database, in the user data dir."""
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "LEDGERMEM_DB": ""}
    done = subprocess.run([sys.executable, "-m", "ledgermem", "--embedder", "hash",
                           "remember", "hi"], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (home / "data" / "ledgermem" / "memory.db").is_file()


# recall --conversations ---------------------------------------------------------------
@pytest.mark.parametrize(("filters", "named"), [
    (["--category", "reminder", "--entity", "person:nobody", "--context", "nowhere"],
     "--category, --context and --entity"),
    (["--entity", "person:nobody"], "--entity"),
    (["--context", ""], "--context"),
])
def test_knowledge_filters_with_conversations_exit_2(seeded_db: str, filters: list[str],
                                                     named: str) -> None:
    message = assert_one_line(cli("--db", seeded_db, "recall", "tea", "--conversations", *filters,
                           code=2))
    assert message.startswith(f"error: {named} cannot be combined with --conversations")


def test_conversations_without_filters_still_searches(seeded_db: str) -> None:
    cli("--db", seeded_db, "--embedder", "hash", "add-turn", "tea at five", code=0)
    hits = json.loads(cli("--db", seeded_db, "--json", "recall", "tea", "--conversations",
                          code=0).stdout)
    assert [hit["turn"]["content"] for hit in hits] == ["tea at five"]


# list --sort --------------------------------------------------------------------------
def test_sort_lists_the_sortable_fields(seeded_db: str) -> None:
    message = assert_one_line(cli("--db", seeded_db, "list", "--sort", "content", code=2))
    assert all(repr(field) in message for field in SORTABLE), message
    assert "|".join(sorted(SORTABLE)) in cli("list", "--help", code=0).stdout
    page = json.loads(cli("--db", seeded_db, "--json", "list", "--sort", "confidence",
                          code=0).stdout)
    assert page["total"] == 1


# --embedder openai: -------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["openai:", "openai: "])
def test_an_openai_embedder_without_a_model_exits_2_before_any_request(
        seeded_db: str, spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[httpx.Request] = []

    def send(_: httpx.Client, request: httpx.Request, **__: Any) -> httpx.Response:
        sent.append(request)
        raise httpx.ConnectError("no network in tests", request=request)

    monkeypatch.setattr(httpx.Client, "send", send)
    for args in (["--embedder", spec, "recall", "tea"], ["reembed", "--embedder", spec]):
        message = assert_one_line(cli("--db", seeded_db, *args, code=2))
        assert message.startswith(f"error: {spec!r} names no model after the colon"), message
        assert "openai:text-embedding-3-small" in message
    with pytest.raises(InvalidInput, match="names no model after the colon"):
        embedder_from_name(spec)
    assert sent == []


# add-turns ----------------------------------------------------------------------------
@pytest.mark.parametrize(("lines", "says"), [
    (['{"role": "user", "content": "a"}', "", '{"role": "bogus", "content": "c"}'],
     "line 3: unknown role 'bogus'"),
    (['{"role": "user", "content": "a"}', '{"role": "user", "content": "b", "at": "soon"}',
      '{"role": "bogus", "content": "c"}'],
     "line 2: cannot read a date from 'soon'"),
    (['{"role": "user", "content": "a"}', '{"role": "user", "content": "b", "extra": 1}'],
     "line 2: unknown field 'extra' (known: at, content, metadata, name, role)"),
])
def test_add_turns_names_the_bad_line_and_stores_nothing(seeded_db: str, tmp_path: Path,
                                                         lines: list[str], says: str) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines) + "\n")
    message = assert_one_line(cli("--db", seeded_db, "--embedder", "hash", "add-turns", str(path),
                           code=2))
    assert message.startswith(f"error: {path}, {says}"), message
    assert message.endswith("; nothing was stored")
    assert json.loads(cli("--db", seeded_db, "--json", "stats", code=0).stdout)["turns"] == 0
