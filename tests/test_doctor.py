"""``ledgermem doctor`` and ``status --probe``: one small extraction against the
configured endpoint (the scripted server in each of its server profiles), what the
report says, and the exit codes (0 ok or no LLM, 2 misconfigured, 1 a model that gives
nothing usable)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledgermem import Memory
from ledgermem.cli import main
from ledgermem.doctor import PROBE_TURN, probe_llm
from ledgermem.testing import Reply, ScriptedLLMServer
from tests.pipeline.conftest import make_llm

GOOD = {"operations": [{"op": "ADD", "content": "Is allergic to penicillin", "sensitive": True},
                       {"op": "ADD", "content": "Sister Ana is a nurse in Porto"}]}
NO_LLM = {"LEDGERMEM_LLM_BASE_URL": "", "LEDGERMEM_LLM_MODEL": "", "LEDGERMEM_CONFIG": "",
          "LEDGERMEM_EMBEDDER": ""}


def doctor(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "d.db"), "--json", "doctor",
                                       *args], env={**NO_LLM, **env})
    out = result.stdout
    return result.exit_code, json.loads(out) if out.strip() else {}, result.stderr


def llm_env(server: ScriptedLLMServer) -> dict[str, str]:
    return {"LEDGERMEM_LLM_BASE_URL": server.url, "LEDGERMEM_LLM_MODEL": "small-local"}


def test_without_an_llm_it_says_so_and_what_still_works(tmp_path: Path) -> None:
    code, report, err = doctor(tmp_path, {})
    assert code == 0, err
    assert (report["verdict"], report["llm"]["configured"]) == ("no llm", False)
    assert "remember, search and conversations work" in report["llm"]["problem"]
    assert report["embedder"] == "minilm"   # DEFAULT_EMBEDDER
    assert not (tmp_path / "d.db").exists()  # doctor never creates a database


def test_a_server_that_refuses_json_schema_is_reported_with_the_mode_that_works(
        tmp_path: Path) -> None:
    with ScriptedLLMServer(Reply(GOOD, model="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
                           profile="llama-cpp-python") as server:
        code, report, err = doctor(tmp_path, llm_env(server))
        [refused, asked] = server.chat_requests
    assert code == 0, err
    probe = report["llm"]
    assert (probe["reachable"], probe["model"], probe["served_model"]) == (
        True, "small-local", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    assert probe["structured_output"] == "json_object"
    assert [mode.split(":")[0] for mode in probe["refused_modes"]] == ["json_schema"]
    assert (probe["operations"], probe["passed_guards"]) == (2, 2)
    assert probe["extraction_ms"] > 0
    assert (refused.status, asked.status) == (500, 200)
    assert PROBE_TURN in asked.text  # a real extraction prompt, as the pipeline sends it


def test_the_embedding_model_the_database_records_is_reported(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "d.db", embedder="hash") as memory:
        memory.for_user("local").remember("Likes tea")
        memory.flush()
    code, report, _ = doctor(tmp_path, {})
    assert code == 0
    assert (report["embedder"], report["embedder_from"]) == (
        "hash:64", "the model the database records")
    code, report, _ = doctor(tmp_path, {"LEDGERMEM_EMBEDDER": "wordllama"})
    assert report["embedder"] == "wordllama"


@pytest.mark.parametrize(("env", "says"), [
    ({"LEDGERMEM_LLM_BASE_URL": "http://127.0.0.1:9/v1", "LEDGERMEM_LLM_MODEL": "m"},
     "cannot reach http://127.0.0.1:9/v1"),
    ({"LEDGERMEM_LLM_BASE_URL": "http://127.0.0.1:9/v1"}, "set both LEDGERMEM_LLM_BASE_URL"),
    ({"LEDGERMEM_LLM_BASE_URL": "localhost:11434", "LEDGERMEM_LLM_MODEL": "m"},
     "must start with http://"),
])
def test_a_misconfiguration_is_exit_code_2_with_one_clear_line(
        tmp_path: Path, env: dict[str, str], says: str) -> None:
    code, report, err = doctor(tmp_path, env)
    assert code == 2
    assert report["verdict"] == "misconfigured" and says in report["llm"]["problem"]
    [line] = err.strip().splitlines()
    assert line.startswith("error: ") and says in line and "Traceback" not in err


@pytest.mark.parametrize(("status", "says"), [(401, "refused the API key"),
                                              (404, "no model 'small-local'")])
def test_a_key_or_model_the_server_refuses_is_misconfigured(
        tmp_path: Path, server: ScriptedLLMServer, status: int, says: str) -> None:
    server.reply(status)
    code, report, err = doctor(tmp_path, llm_env(server))
    assert code == 2 and says in report["llm"]["problem"] and says in err
    assert len(server.chat_requests) == 1  # one call, no retries


def test_a_model_that_answers_nothing_usable_is_exit_code_1(
        tmp_path: Path, server: ScriptedLLMServer) -> None:
    server.reply({"operations": [{"op": "ADD", "content": "..."},
                                 {"op": "ADD", "content": "I'll remember that"}]})
    code, report, _ = doctor(tmp_path, llm_env(server))
    assert code == 1 and report["verdict"] == "degraded"
    assert (report["llm"]["operations"], report["llm"]["passed_guards"]) == (2, 0)
    server.reply("I am sorry, I cannot help with that.")
    code, report, _ = doctor(tmp_path, llm_env(server))
    assert code == 1 and "not with usable JSON" in report["llm"]["problem"]


def test_the_table_is_readable(tmp_path: Path) -> None:
    with ScriptedLLMServer(GOOD, profile="lm-studio") as server:
        result = CliRunner().invoke(main, ["--db", str(tmp_path / "d.db"), "doctor"],
                                    env={**NO_LLM, **llm_env(server)})
    assert result.exit_code == 0, result.output
    for shown in ("reachable", "yes", "json_schema", "2 new facts pass the guards",
                  "embedding model", "verdict", "ok"):
        assert shown in result.stdout


def test_status_probe_adds_the_probe_to_the_status(tmp_path: Path) -> None:
    Memory.open(tmp_path / "d.db", embedder="hash").close()
    with ScriptedLLMServer(GOOD, profile="strict-422") as server:
        result = CliRunner().invoke(main, ["--db", str(tmp_path / "d.db"), "--embedder",
                                           "hash", "--json", "status", "--probe"],
                                    env={**NO_LLM, **llm_env(server)})
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["mode"] == "llm+embedder"
    assert (status["probe"]["structured_output"], status["probe"]["verdict"]) == (
        "json_object", "ok")
    plain = CliRunner().invoke(main, ["--db", str(tmp_path / "d.db"), "--embedder", "hash",
                                      "--json", "status"], env=NO_LLM)
    assert plain.exit_code == 0 and "probe" not in json.loads(plain.stdout)


def test_probe_llm_reports_without_raising(server: ScriptedLLMServer) -> None:
    server.reply(503, 503)
    llm = make_llm(server)
    probe = probe_llm(llm)
    assert (probe.verdict, probe.reachable) == ("misconfigured", True)
    assert "HTTP 503" in str(probe.problem)
    llm.close()
