"""The MCP server through the ``mcp`` SDK's own client: over stdio (``python -m ledgermem
mcp`` as a subprocess), over streamable HTTP (a real uvicorn on loopback, one user per
API key, and the ``ledgermem mcp --transport http`` command), and in process.

What is checked: the five tools are listed with the agent layer's input schemas and the
result models' output schemas; each call answers structured content that matches its
schema; a refused call is an MCP tool error with a readable message; whose memory a call
reaches comes from the binding (the configured user, the key's user), never from an
argument; a second user's key sees nothing of the first user's memory; a request
without a user's key is answered 401.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from ledgermem import Memory
from ledgermem.agent.tools import TOOL_NAMES, TOOLS
from ledgermem.aio import AsyncMemory, AsyncUserMemory
from ledgermem.mcp import RESULTS, bound_to, build_server, mcp_http_app
from ledgermem.server.keys import KeyRing
from ledgermem.testing import HashEmbedder

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # trio is not installed


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


def ok(result: CallToolResult, tool: str) -> dict[str, Any]:
    """The structured result of a call that succeeded, checked against the tool's result
    model; the text content is the same result as JSON (for clients that read text)."""
    assert not result.is_error, text_of(result)
    data = result.structured_content
    assert isinstance(data, dict)
    RESULTS[tool].model_validate(data)
    assert json.loads(text_of(result)) == data
    return data


def failed(result: CallToolResult) -> str:
    """The message of a call that was refused: an MCP tool error, readable text."""
    assert result.is_error
    assert result.structured_content is None
    message = text_of(result)
    assert "Traceback" not in message
    return message


def memory_for(memory: Memory, user: str) -> AsyncUserMemory:
    return AsyncMemory.from_sync(memory).for_user(user)


def contents(memory: Memory, user: str) -> list[str]:
    """The text of every active memory of ``user``, oldest first."""
    page = memory.for_user(user).all_knowledge(sort="created_at", order="asc")
    return [item.content for item in page["items"]]


def child_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a ``ledgermem`` subprocess: none of the runner's
    ``LEDGERMEM_*`` settings, and no configuration file but what a test writes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERMEM_")}
    return env | xdg(tmp_path)


def xdg(tmp_path: Path) -> dict[str, str]:
    """Config and data dirs of a ``ledgermem`` subprocess: the test's own."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data")}


def seeded(path: Path) -> dict[str, str]:
    """A store with one conversation turn for alice and one memory and turn for bob."""
    with Memory.open(path, embedder=HashEmbedder()) as memory:
        memory.for_user("alice").add_turn("user", "Let us plan the trip to Lisbon in May",
                                          session_id="alice:cli")
        bob = memory.for_user("bob")
        bob.add_turn("user", "My Lisbon plans are a secret", session_id="bob:cli")
        item = bob.remember("Bob is allergic to peanuts", "fact")
        memory.flush()
    return {"bob_item": item.id}


# the catalogue ----------------------------------------------------------------------
async def test_the_five_tools_have_the_agent_schemas_and_output_schemas(tmp_path: Path
                                                                          ) -> None:
    with Memory.open(tmp_path / "m.db", embedder=None) as memory:
        server = build_server(bound_to(memory_for(memory, "alice")))
        async with Client(server) as client:
            listed = (await client.list_tools()).tools
    assert [tool.name for tool in listed] == list(TOOL_NAMES)
    for tool in listed:
        assert tool.description == TOOLS[tool.name].description
        assert tool.input_schema == TOOLS[tool.name].parameters()
        assert tool.input_schema["additionalProperties"] is False
        # No tool can be told whose memory to use.
        assert not {"user", "user_id", "agent", "agent_id"} & set(
            tool.input_schema["properties"])
        assert tool.output_schema == RESULTS[tool.name].model_json_schema()
        assert tool.output_schema["type"] == "object"
    hints = {tool.name: tool.annotations for tool in listed}
    assert hints["recall"] is not None and hints["recall"].read_only_hint is True
    assert hints["forget"] is not None and hints["forget"].destructive_hint is True


async def test_long_term_memory_off_answers_every_call_with_a_tool_error(tmp_path: Path
                                                                        ) -> None:
    with Memory.open(tmp_path / "m.db", embedder=None) as memory:
        server = build_server(bound_to(memory_for(memory, "alice")), long_term=False)
        async with Client(server) as client:
            message = failed(await client.call_tool("remember", {"content": "tea"}))
            assert "long-term memory is off" in message
        assert contents(memory, "alice") == []


# stdio ------------------------------------------------------------------------------
def stdio_params(db: Path, *args: str) -> StdioServerParameters:
    # The SDK starts the server with a few safe variables only (HOME, PATH…) and these.
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "ledgermem", "--embedder", "hash:64", "mcp", "--db", str(db), *args],
        env=xdg(db.parent), cwd=str(ROOT))


async def test_stdio_serves_the_configured_user_and_each_tool_works(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    bob_item = seeded(db)["bob_item"]
    async with stdio_client(stdio_params(db, "--user", "alice")) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        listed = (await session.list_tools()).tools
        assert [tool.name for tool in listed] == list(TOOL_NAMES)
        assert all(tool.output_schema == RESULTS[tool.name].model_json_schema()
                   for tool in listed)

        added = ok(await session.call_tool("remember", {
            "content": "Alice prefers green tea", "category": "preference",
            "entity": "person:alice"}), "remember")
        assert (added["content"], added["category"], added["written"]) == (
            "Alice prefers green tea", "preference", "added")
        again = ok(await session.call_tool("remember", {
            "content": "Alice prefers green tea", "category": "preference",
            "entity": "person:alice"}), "remember")
        assert (again["id"], again["written"]) == (added["id"], "merged")

        found = ok(await session.call_tool("recall", {"query": "green tea"}), "recall")
        assert [hit["id"] for hit in found["results"]] == [added["id"]]

        changed = ok(await session.call_tool("update_memory", {
            "id": added["id"], "content": "Alice prefers jasmine tea"}), "update_memory")
        assert changed["content"] == "Alice prefers jasmine tea"

        said = ok(await session.call_tool("search_past_conversations",
                                          {"query": "Lisbon"}), "search_past_conversations")
        assert [turn["content"] for turn in said["turns"]] == [
            "Let us plan the trip to Lisbon in May"]          # alice's, not bob's
        assert said["turns"][0]["session_id"] == "alice:cli"

        gone = ok(await session.call_tool("forget", {"id": added["id"]}), "forget")
        assert gone == {"forgotten": added["id"]}
        assert ok(await session.call_tool("recall", {"query": "jasmine tea"}),
                  "recall") == {"results": []}

        # Refused calls: MCP tool errors with the agent layer's messages.
        assert "no memory" in failed(await session.call_tool("forget", {"id": added["id"]}))
        assert "missing required argument 'content'" in failed(
            await session.call_tool("remember", {}))
        assert "limit" in failed(await session.call_tool("recall", {"query": "tea",
                                                                    "limit": "5"}))
        # The scope is not an argument: naming another user is refused outright, and
        # another user's id is not found.
        assert "unknown argument 'user_id'" in failed(await session.call_tool(
            "remember", {"content": "Bob likes jazz", "user_id": "bob"}))
        assert "no memory" in failed(await session.call_tool("forget", {"id": bob_item}))
        assert "no memory" in failed(await session.call_tool(
            "update_memory", {"id": bob_item, "content": "Bob eats peanuts"}))

    with Memory.open(db, embedder=HashEmbedder()) as memory:
        assert contents(memory, "bob") == ["Bob is allergic to peanuts"]     # untouched
        assert contents(memory, "alice") == []                               # forgotten


async def test_stdio_reads_the_configuration_file_given_to_the_command(tmp_path: Path
                                                                       ) -> None:
    config = tmp_path / "conf" / "ledgermem.yaml"
    config.parent.mkdir()
    config.write_text("database:\n  url: memory.db\nmemory:\n  enabled: false\n",
                      encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ledgermem", "--embedder", "hash:64", "mcp", "--config", str(config),
              "--user", "alice"],
        env=xdg(tmp_path), cwd=str(ROOT))
    async with Client(params) as client:
        message = failed(await client.call_tool("remember", {"content": "Alice likes figs"}))
    assert "long-term memory is off" in message              # memory.enabled: false
    with Memory.open(config.parent / "memory.db", embedder=HashEmbedder()) as memory:
        assert contents(memory, "alice") == []               # database.url, relative


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--user", " "], {}, "error: --user must be non-empty text"),
    (["--user", ""], {}, "error: --user must be non-empty text"),  # once served 'local'
])
def test_stdio_refuses_a_bad_user_before_serving(tmp_path: Path, args: list[str],
                                                 env: dict[str, str], says: str) -> None:
    db = tmp_path / "m.db"
    done = subprocess.run(
        [sys.executable, "-m", "ledgermem", "mcp", "--db", str(db), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL,
        env=child_env(tmp_path) | env)
    assert done.returncode == 2
    assert done.stderr.startswith(says)
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not db.exists()


def test_http_takes_no_user_option(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ledgermem", "mcp", "--db", str(tmp_path / "m.db"),
         "--transport", "http", "--user", "alice"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL,
        env=child_env(tmp_path))
    assert done.returncode == 2
    assert "API key says whose memory" in done.stderr


# streamable HTTP --------------------------------------------------------------------
@dataclass
class Served:
    url: str
    memory: Memory
    keys: KeyRing
    alice: str
    bob: str


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """``mcp_http_app`` under a real uvicorn on a loopback port, with keys for alice
    and bob."""
    memory = Memory.open(tmp_path / "m.db", embedder=HashEmbedder())
    keys = KeyRing(memory.store)
    alice, _ = keys.create("alice")
    bob, _ = keys.create("bob")
    with running(mcp_http_app(memory, keys)) as url:
        yield Served(url, memory, keys, alice, bob)
    memory.close()


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped before it started"
            thread.join(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


@contextlib.asynccontextmanager
async def connected(url: str, key: str, **options: Any) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
    async with http, Client(streamable_http_client(url, http_client=http),
                            **options) as client:
        yield client


async def test_http_calls_each_tool_as_the_keys_user(served: Served) -> None:
    served.memory.for_user("alice").add_turn("user", "Book the Lisbon hotel for May",
                                             session_id="alice:web")
    async with connected(served.url, served.alice) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == list(TOOL_NAMES)
        added = ok(await client.call_tool("remember", {"content": "Alice prefers green tea"}),
                   "remember")
        found = ok(await client.call_tool("recall", {"query": "green tea"}), "recall")
        assert [hit["id"] for hit in found["results"]] == [added["id"]]
        text = "Alice aime le thé vert 🍵, «surtout» le matin"
        assert ok(await client.call_tool("remember", {"content": text}),
                  "remember")["content"] == text
        changed = ok(await client.call_tool("update_memory", {
            "id": added["id"], "confidence": 0.9, "category": "preference"}), "update_memory")
        assert (changed["confidence"], changed["category"]) == (0.9, "preference")
        said = ok(await client.call_tool("search_past_conversations",
                                         {"query": "hotel"}), "search_past_conversations")
        assert [turn["session_id"] for turn in said["turns"]] == ["alice:web"]
        assert ok(await client.call_tool("forget", {"id": added["id"]}), "forget") == {
            "forgotten": added["id"]}
        assert "invalid arguments for recall" in failed(
            await client.call_tool("recall", {"query": "tea", "top_k": 3}))
    assert contents(served.memory, "alice") == [text]     # the tea one was forgotten
    assert contents(served.memory, "bob") == []


async def test_http_second_users_key_sees_nothing_of_the_first(served: Served) -> None:
    served.memory.for_user("alice").add_turn("user", "My Lisbon trip is a surprise",
                                             session_id="alice:web")
    async with connected(served.url, served.alice) as client:
        secret = ok(await client.call_tool("remember", {
            "content": "Alice keeps her savings at Lisbon Bank", "sensitive": True}),
            "remember")
    async with connected(served.url, served.bob) as client:
        assert ok(await client.call_tool("recall", {"query": "Lisbon savings bank"}),
                  "recall") == {"results": []}
        assert ok(await client.call_tool("search_past_conversations",
                                         {"query": "Lisbon trip surprise"}),
                  "search_past_conversations") == {"turns": []}
        assert ok(await client.call_tool("search_past_conversations",
                                         {"time_from": "2000-01-01"}),
                  "search_past_conversations") == {"turns": []}
        assert "no memory" in failed(await client.call_tool(
            "update_memory", {"id": secret["id"], "content": "Alice is broke"}))
        assert "no memory" in failed(await client.call_tool("forget", {"id": secret["id"]}))
        own = ok(await client.call_tool("remember", {"content": "Bob likes jazz"}),
                 "remember")
    assert contents(served.memory, "alice") == ["Alice keeps her savings at Lisbon Bank"]
    assert contents(served.memory, "bob") == ["Bob likes jazz"]
    async with connected(served.url, served.alice) as client:   # and the other way round
        found = ok(await client.call_tool("recall", {"query": "Bob likes jazz"}), "recall")
        assert own["id"] not in [hit["id"] for hit in found["results"]]
        assert "no memory" in failed(await client.call_tool("forget", {"id": own["id"]}))


async def test_http_refuses_requests_without_a_users_key(served: Served) -> None:
    admin = served.keys.ensure_admin()
    assert admin is not None
    revoked, info = served.keys.create("alice", label="old laptop")
    served.keys.revoke(info.key_id)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        for authorization in (None, "Bearer", f"Basic {served.alice}", "Bearer lm_nokey",
                              f"Bearer {admin}", f"Bearer {revoked}",
                              f"Bearer {served.alice}x"):
            headers = accept | ({"Authorization": authorization} if authorization else {})
            answer = await http.post(served.url, json=listing, headers=headers)
            assert answer.status_code == 401, authorization
            assert answer.headers["www-authenticate"] == "Bearer"
            error = answer.json()["error"]              # the REST API's error shape
            assert error["code"] == "unauthorized"
            assert "API key" in error["message"]
        assert (await http.post(served.url, json=listing, headers=accept | {
            "X-API-Key": f"{served.alice}x"})).status_code == 401
        for headers in ({"Authorization": f"Bearer {served.bob}"},
                        {"X-API-Key": served.bob}):
            answer = await http.post(served.url, json=listing, headers=accept | headers)
            assert answer.status_code == 200
            assert [tool["name"] for tool in answer.json()["result"]["tools"]] == list(
                TOOL_NAMES)


async def test_http_handshake_era_client_is_bound_to_its_key_too(served: Served) -> None:
    async with connected(served.url, served.bob, mode="legacy") as client:
        ok(await client.call_tool("remember", {"content": "Bob likes jazz"}), "remember")
    async with connected(served.url, served.alice, mode="legacy") as client:
        assert ok(await client.call_tool("recall", {"query": "jazz"}), "recall") == {
            "results": []}
    assert contents(served.memory, "bob") == ["Bob likes jazz"]
    assert contents(served.memory, "alice") == []


async def test_http_key_bound_to_an_agent_writes_as_that_agent(served: Served) -> None:
    planner, _ = served.keys.create("alice", agent="planner")
    async with connected(served.url, planner) as client:
        added = ok(await client.call_tool("remember", {"content": "Alice flies on May 3"}),
                   "remember")
    item = served.memory.for_user("alice").get(added["id"])
    assert (item.user_id, item.agent_id) == ("alice", "planner")


# the command -------------------------------------------------------------------------
async def test_mcp_command_serves_http_with_the_databases_keys(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with Memory.open(db, embedder=HashEmbedder()) as memory:
        alice, _ = KeyRing(memory.store).create("alice")
    port = free_port()
    env = child_env(tmp_path)
    command = [sys.executable, "-m", "ledgermem", "--db", str(db), "mcp", "--transport",
               "http", "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        await wait_until_listening(process, port)
        async with connected(url, alice) as client:
            added = ok(await client.call_tool("remember", {"content": "Alice likes figs"}),
                       "remember")
        async with httpx2.AsyncClient() as http:
            answer = await http.post(url, json={"jsonrpc": "2.0", "id": 1,
                                                "method": "tools/list"})
            assert answer.status_code == 401
    finally:
        process.terminate()
        out, err = process.communicate(timeout=60)
    assert out == ""
    assert "Traceback" not in err
    assert f"http://127.0.0.1:{port}/mcp" in err
    with Memory.open(db, embedder=HashEmbedder()) as memory:
        assert memory.for_user("alice").get(added["id"]).content == "Alice likes figs"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_until_listening(process: subprocess.Popen[str], port: int) -> None:
    import anyio

    for _ in range(1200):  # the process imports the SDK and opens the store first
        assert process.poll() is None, process.communicate()[1]
        with contextlib.suppress(OSError):
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.aclose()
            return
        await anyio.sleep(0.05)
    raise AssertionError("ledgermem mcp --transport http did not start listening")
