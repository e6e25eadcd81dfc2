"""What a user sees when a command fails: one line on stderr and an exit code from the
error tree (2 bad input, 3 not found, 1 anything else), never a traceback; reading
commands never create a database; and every command is documented in the README."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from ledgermem.cli import main
from tests.support import assert_one_line

README = Path(__file__).parent.parent / "README.md"


def cli(*args: str, code: int, input: str | None = None,
        env: dict[str, str] | None = None) -> Result:
    """``ledgermem ARGS`` in process, which must exit with ``code``."""
    result = CliRunner().invoke(main, list(args), input=input, env=env)
    assert result.exit_code == code, result.output
    return result


def test_undecodable_arguments_exit_2(seeded_db: str) -> None:
    """Bytes that are not UTF-8 in argv reach Python as lone surrogates."""
    for args in (["remember", "caf\udce9"], ["--user", "\udcff", "list"],
                 ["recall", "tea", "--entity", "person:\udcff"]):
        message = assert_one_line(cli("--db", seeded_db, *args, code=2))
        assert "not valid UTF-8" in message


def test_undecodable_arguments_exit_2_in_a_real_process(seeded_db: str) -> None:
    done = subprocess.run([sys.executable, "-m", "ledgermem", "--db", seeded_db, "remember",
                           b"caf\xe9 au lait"], capture_output=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.decode().strip().startswith("error: argument 4")
    assert b"Traceback" not in done.stderr and done.stdout == b""


@pytest.mark.parametrize("args", [
    ["prune", "--days", "1000000000"],
    ["prune", "--days", "-1"],
    ["list", "--offset", str(10**20)],
    ["list", "--limit", "0"],
    ["upcoming", "--days", "1e12"],
    ["recall", "tea", "--top-k", str(10**20)],
    ["reembed", "--embedder", "hash:0"],
    ["reembed", "--embedder", "hash:abc"],
    ["reembed", "--embedder", "no-such-model"],
    ["update", "nope"],
    ["forget-user"],
    ["no-such-command"],
])
def test_bad_input_exits_2_with_one_line(seeded_db: str, args: list[str]) -> None:
    assert_one_line(cli("--db", seeded_db, *args, code=2))


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--user", "", "stats"], {}, "user_id must be a non-empty string"),
    (["mcp", "--user", ""], {}, "--user must be non-empty text, not ''"),
    (["--user", "", "mcp"], {}, "--user must be non-empty text, not ''"),
])
def test_an_empty_user_exits_2_and_never_serves_local(seeded_db: str, args: list[str],
                                                      env: dict[str, str], says: str) -> None:
    # Regression: `mcp --user ""` served the default user 'local'. (An empty
    # LEDGERMEM_USER counts as unset, as every LEDGERMEM_* variable does.)
    result = CliRunner().invoke(main, ["--db", seeded_db, *args], env=env)
    assert result.exit_code == 2, result.output
    assert says in assert_one_line(result)


def test_the_user_option_wins_over_an_empty_variable(seeded_db: str) -> None:
    result = CliRunner().invoke(main, ["--db", seeded_db, "--user", "local", "--json", "stats"],
                                env={"LEDGERMEM_USER": ""})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["items"] == 1


@pytest.mark.parametrize(("content", "says"), [
    (None, "does not exist"),
    ("{not json", "is not JSON"),
    ('{"a": 1}', "not an array"),
    ("[1, 2]", "entry 0 is not a JSON object"),
    ('[{"sample_id": "x"}]', "'conversation' must be an object"),
    ('[{"conversation": {"session_1": [{"text": "hi"}]}}]', "'dia_id' must be text"),
    ('[{"conversation": {"session_1_date_time": "soon", "session_1": []}}]',
     "not a LoCoMo date"),
    ('[{"conversation": {}, "qa": [{"category": "x"}]}]', "category must be a number"),
])
def test_a_bad_locomo_file_exits_2(tmp_path: Path, content: str | None, says: str) -> None:
    data = tmp_path / "locomo.json"
    if content is not None:
        data.write_bytes(content.encode())
    message = assert_one_line(cli("bench", "locomo", "--data", str(data), "--mode",
                                  "keyword", "--json", code=2))
    assert says in message


@pytest.mark.parametrize(("content", "says"), [
    (b"\xff\xfe[]", "not UTF-8"),
    (b'[{"question_id": "q1", "question": "what?"}]', "'question_date' must be text"),
    (b'[{"question_id": "q1", "question": "what?", "question_date": "2023/05/30 (Tue) '
     b'23:40", "haystack_session_ids": ["a"], "haystack_dates": [], '
     b'"haystack_sessions": []}]', "as long as each other"),
])
def test_a_bad_longmemeval_file_exits_2(tmp_path: Path, content: bytes, says: str) -> None:
    data = tmp_path / "longmemeval.json"
    data.write_bytes(content)
    message = assert_one_line(cli("bench", "longmemeval", "--data", str(data), "--mode",
                                  "keyword", "--json", code=2))
    assert says in message


def test_not_found_exits_3_and_other_errors_1(seeded_db: str) -> None:
    assert "no memory" in assert_one_line(cli("--db", seeded_db, "get", "nope", code=3))
    assert "unsupported database URL" in assert_one_line(
        cli("--db", "mysql://host/db", "list", code=1))
    # The store records no model yet: this records hash:64, then another is refused.
    cli("--db", seeded_db, "--embedder", "hash", "recall", "tea", code=0)
    message = assert_one_line(cli("--db", seeded_db, "--embedder", "hash:32", "recall", "tea",
                                  code=1))
    assert "holds vectors of hash:64" in message


def test_an_unexpected_error_is_one_line_too(seeded_db: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    from ledgermem import user_memory

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(user_memory.UserMemory, "stats", broken)
    message = assert_one_line(cli("--db", seeded_db, "stats", code=1))
    assert message.startswith("error: unexpected RuntimeError: boom second line")
    monkeypatch.setenv("LEDGERMEM_DEBUG", "1")
    assert isinstance(CliRunner().invoke(main, ["--db", seeded_db, "stats"]).exception,
                      RuntimeError)


def test_what_the_library_logs_is_one_line_too(seeded_db: str, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    """E.g. a background worker's failure: logged with its exception, shown without the
    traceback, and the handler is gone once the command ends."""
    from ledgermem import user_memory

    def logs(*_: object, **__: object) -> dict[str, int]:
        try:
            raise RuntimeError("model went away")
        except RuntimeError:
            logging.getLogger("ledgermem.embedding").exception("ledgermem-embed failed")
        return {"items": 1}

    handlers = list(logging.getLogger("ledgermem").handlers)
    monkeypatch.setattr(user_memory.UserMemory, "stats", logs)
    result = cli("--db", seeded_db, "--json", "stats", code=0)
    assert result.stderr == "error: ledgermem-embed failed (RuntimeError: model went away)\n"
    assert json.loads(result.stdout) == {"items": 1}
    assert logging.getLogger("ledgermem").handlers == handlers


@pytest.mark.parametrize("args", [
    ["list"], ["recall", "tea"], ["stats"], ["status"], ["get", "x"], ["history", "x"],
    ["forget", "x"], ["restore", "x"], ["upcoming"], ["forget-user", "--yes"],
    ["prune"], ["rebuild"], ["export"], ["reembed", "--embedder", "hash"],
    ["update", "x", "--content", "y"],
])
def test_reading_a_missing_database_never_creates_it(tmp_path: Path, args: list[str]
                                                     ) -> None:
    missing = tmp_path / "typo" / "nothing.db"
    message = assert_one_line(cli("--db", str(missing), *args, code=2))
    assert message == f"error: no database at {missing}"
    assert not missing.parent.exists()


def test_migrate_from_a_missing_database_creates_nothing(seeded_db: str, tmp_path: Path) -> None:
    missing, target = tmp_path / "nothing.db", tmp_path / "copy.db"
    message = assert_one_line(cli("migrate", str(missing), str(target), code=2))
    assert message == f"error: no database at {missing}"
    assert not missing.exists() and not target.exists()
    assert json.loads(cli("--json", "migrate", seeded_db, str(target), code=0).stdout)["users"] == 1


def test_writing_commands_create_the_database(tmp_path: Path) -> None:
    for number, args in enumerate((["remember", "tea"], ["add-turn", "hello"])):
        path = tmp_path / f"new-{number}" / "m.db"
        cli("--db", str(path), "--embedder", "hash", *args, code=0)
        assert path.is_file()


# documentation ------------------------------------------------------------------------
def _readme_cli_block() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"^## CLI\n+```\n(.*?)^```", text, re.S | re.M)
    assert found, "the README has no CLI block"
    return found.group(1)


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    names = []
    for name, command in sorted(group.commands.items()):
        names.append(prefix + name)
        if isinstance(command, click.Group):
            names += _commands(command, f"{prefix}{name} ")
    return names


@pytest.mark.parametrize("command", _commands(main))
def test_every_command_is_documented_in_the_readme(command: str) -> None:
    block = _readme_cli_block()
    assert re.search(rf"(^|[\s|(])({re.escape(command)})(\s|$|\))", block, re.M), (
        f"`ledgermem {command}` is missing from the README's CLI block")


def test_every_global_option_is_documented_in_the_readme() -> None:
    block = _readme_cli_block()
    for param in main.params:
        for option in param.opts:
            if option.startswith("--") and option not in ("--help", "--version"):
                assert option in block, f"{option} is missing from the README's CLI block"
