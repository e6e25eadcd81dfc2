"""``ledgermem chat`` end to end through click's runner, against the scripted server: a
conversation with memory tool calls, slash commands that never reach the model, no
endpoint (the hint, slash commands still run), and a server that cannot be reached
(one line, no traceback); ``chat_turn``'s bound on tool rounds; and the OpenAI SDK
example (``examples/agent.py``) against the scripted server and an unreachable one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from ledgermem import Memory
from ledgermem.agent.chat import MAX_TOOL_ROUNDS, ChatError, chat_turn
from ledgermem.agent.sessions import Sessions
from ledgermem.agent.wrapper import MemoryAgent
from ledgermem.cli import main
from ledgermem.testing import Reply, ScriptedLLMServer

ROOT = Path(__file__).parent.parent.parent


@pytest.fixture(autouse=True)
def no_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No config file and no LLM from the machine running the tests."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("LEDGERMEM_CONFIG", "LEDGERMEM_LLM_BASE_URL", "LEDGERMEM_LLM_MODEL",
                 "LEDGERMEM_LLM_API_KEY", "LEDGERMEM_USERS_FILE", "LEDGERMEM_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def chat(db: str, lines: str, monkeypatch: pytest.MonkeyPatch,
         base_url: str | None = None) -> Result:
    if base_url is not None:
        monkeypatch.setenv("LEDGERMEM_LLM_BASE_URL", base_url)
        monkeypatch.setenv("LEDGERMEM_LLM_MODEL", "scripted")
        monkeypatch.setenv("LEDGERMEM_LLM_API_KEY", "sk-test")
    result = CliRunner().invoke(
        main, ["--db", db, "--user", "ann", "--embedder", "hash", "chat",
               "--channel", "term"], input=lines)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result


def flat(text: str) -> str:
    return " ".join(text.split())


def stored(db: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The session's turns (role, content) and the user's memories."""
    with Memory.open(db, embedder=None) as memory:
        with Sessions(memory) as sessions:
            turns = [(t.role, t.content) for t in sessions.history("ann", "term")]
        items = [i.content for i in memory.for_user("ann").all_knowledge()["items"]]
    return turns, items


def test_a_conversation_with_memory_tools_and_slash_commands(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedLLMServer(
            Reply(tool_calls=[{"name": "remember",
                               "arguments": {"content": "Ann is vegetarian"}}]),
            "Noted: you are vegetarian.",
            Reply(tool_calls=[{"name": "recall", "arguments": {"query": "vegetarian"}}]),
            "You told me you are vegetarian.") as server:
        result = chat(db, "I am vegetarian\nWhat do I eat?\n/memory\n/exit\n",
                      monkeypatch, server.url)
        requests = server.chat_requests
    out = flat(result.output)
    assert "Noted: you are vegetarian." in out
    assert "You told me you are vegetarian." in out
    assert "memory: added: Ann is vegetarian" in out
    assert "memory: recalled 1 item(s)" in out
    assert "What I remember about you (1):" in out  # /memory, answered here

    assert len(requests) == 4, "the slash command never reaches the model"
    said = [m["content"] for r in requests for m in r.body["messages"] if m["role"] == "user"]
    assert not any(text.rstrip().endswith("/memory") for text in said)
    assert requests[0].headers.get("Authorization") == "Bearer sk-test"
    first = requests[0].body
    assert first["model"] == "scripted"
    assert {t["function"]["name"] for t in first["tools"]} >= {"remember", "recall"}
    assert first["messages"][0]["role"] == "system"
    # the recall ran against the store, and its result went back to the model
    answer = requests[3].body["messages"]
    assert answer[-2]["tool_calls"][0]["function"]["name"] == "recall"
    assert answer[-1]["role"] == "tool"
    hits = json.loads(answer[-1]["content"])["results"]
    assert [h["content"] for h in hits] == ["Ann is vegetarian"]
    # the window: the first turn and its reply came with the second question
    contents = [m.get("content") for m in requests[2].body["messages"]]
    assert "I am vegetarian" in contents and "Noted: you are vegetarian." in contents

    turns, items = stored(db)
    assert turns == [("user", "I am vegetarian"),
                     ("assistant", "Noted: you are vegetarian."),
                     ("user", "What do I eat?"),
                     ("assistant", "You told me you are vegetarian.")]
    assert items == ["Ann is vegetarian"]


def test_without_an_endpoint_it_says_how_to_configure_one_and_runs_slash_commands(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = chat(db, "hello there\n/remember I like green tea\n/memory\n", monkeypatch)
    out = flat(result.output)
    assert "No model endpoint is configured" in out
    assert "LEDGERMEM_LLM_BASE_URL" in out and "LEDGERMEM_LLM_MODEL" in out
    assert out.count("No model endpoint is configured") == 2  # at start, and for the line
    assert 'Remembered: "I like green tea"' in out
    assert "- I like green tea" in out
    turns, items = stored(db)
    assert turns == [] and items == ["I like green tea"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_an_unreachable_server_is_one_line_and_the_chat_goes_on(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    result = chat(db, "hello\n/remember I like tea\n/exit\n", monkeypatch, url)
    lines = [line for line in result.output.splitlines() if "error:" in line]
    assert len(lines) == 1 and "cannot reach the model server" in lines[0]
    assert 'Remembered: "I like tea"' in flat(result.output)
    assert stored(db) == ([], ["I like tea"])


def test_a_server_error_is_one_line(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedLLMServer(500) as server:
        result = chat(db, "hello\n", monkeypatch, server.url)
    assert "answered HTTP 500" in flat(result.output)
    assert stored(db)[0] == []


def test_tool_rounds_are_bounded(tmp_path: Path) -> None:
    loop = Reply(tool_calls=[{"name": "recall", "arguments": {"query": "tea"}}])
    with ScriptedLLMServer(*[loop] * MAX_TOOL_ROUNDS, "Done.") as server, \
            Memory.open(tmp_path / "m.db", embedder=None) as memory, \
            MemoryAgent(memory, user="ann", channel="term") as agent, \
            httpx.Client(base_url=server.url) as client:
        turn = chat_turn(client, agent, "tea?", model="m")
        requests = server.chat_requests
        assert turn.reply == "Done." and len(turn.tools) == MAX_TOOL_ROUNDS
        assert "tool_choice" not in requests[0].body
        assert requests[-1].body["tool_choice"] == "none"
        server.reply(*[loop] * (MAX_TOOL_ROUNDS + 1))  # still no answer when told to
        with pytest.raises(ChatError, match="no answer"):
            chat_turn(client, agent, "again?", model="m")


def test_the_openai_sdk_example_runs_against_the_scripted_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("openai")
    import io

    from examples.agent import main as example

    with ScriptedLLMServer(
            Reply(tool_calls=[{"name": "remember",
                               "arguments": {"content": "Ann flies to Lisbon on Friday"}}]),
            "Have a good flight!") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setattr("sys.stdin", io.StringIO("I fly to Lisbon on Friday\n/memory\n"))
        assert example(["--model", "scripted", "--db", str(tmp_path / "ex.db"),
                        "--user", "ann", "--channel", "term", "--keyword-only"]) == 0
        requests = server.chat_requests
    out = capsys.readouterr().out
    assert "Have a good flight!" in out and "Ann flies to Lisbon on Friday" in out
    assert len(requests) == 2 and requests[1].body["messages"][-1]["role"] == "tool"
    with Memory.open(tmp_path / "ex.db", embedder=None) as memory, Sessions(memory) as s:
        assert [t.content for t in s.history("ann", "term")] == [
            "I fly to Lisbon on Friday", "Have a good flight!"]


def test_the_openai_sdk_example_reports_an_unreachable_server_and_goes_on(
        tmp_path: Path) -> None:
    # Regression: openai.APIConnectionError ended the process with a traceback.
    pytest.importorskip("openai")
    db = tmp_path / "ex.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERMEM_", "OPENAI_"))}
    env |= {"OPENAI_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1",
            "OPENAI_API_KEY": "sk-test", "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "examples/agent.py", "--model", "m", "--db", str(db), "--user",
         "ann", "--channel", "term", "--keyword-only"],
        input="/remember I like tea\nhello\n/memory\n", capture_output=True, text=True,
        cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: no answer from the model at "
                                                     "http://127.0.0.1:"), done.stderr
    assert errors[0].endswith("the line was not stored")
    out = flat(done.stdout)
    assert 'Remembered: "I like tea"' in out and "- I like tea" in out  # it went on
    assert stored(str(db)) == ([], ["I like tea"])
