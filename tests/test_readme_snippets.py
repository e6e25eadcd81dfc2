"""The code examples of the README and docs/ work as written.

Every ```python block runs in a fresh interpreter, in a temporary directory that is also
its HOME (so the default store, the user data dir and a bootstrap scan are that
directory's), with no ``LEDGERMEM_*`` or ``XDG_*`` setting, no LLM and the bundled
embedder. It must exit 0, and where the prose says what a block finds, it finds it.
A block is left out only by a marker on the line before its fence, which a reader sees
as well:

    <!-- not run: REASON -->      it needs what is not here (an LLM endpoint, a server),
                                  or it is a fragment of the reader's own program
    <!-- continues: HEADING -->   it runs after the first block under that heading

A Python block with neither runs. The measurement records (benchmarks.md, retrieval.md)
are not examples. The README's LLM example runs against a scripted LLM on loopback, its REST
example with curl against a real ``ledgermem serve``, and its MCP client configuration
through the ``mcp`` SDK's stdio client.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledgermem.testing import ScriptedLLMServer
from tests.server_support import free_port, serve_env, start_server

ROOT = Path(__file__).resolve().parent.parent
NOT_EXAMPLES = {"docs/benchmarks.md", "docs/retrieval.md"}
LANGUAGES = {"python", "bash", "json", "sql", ""}
"""Fence info strings the docs may use: a Python block cannot hide under another."""
MARKER = re.compile(r"<!--\s*(not run|continues):\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    """The line of the opening fence (1-based)."""
    lang: str
    code: str
    heading: str
    """The nearest heading above the block."""
    comment: str | None
    """The HTML comment on the line before the fence, if any."""

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def marker(self) -> tuple[str, str] | None:
        found = MARKER.fullmatch(self.comment) if self.comment else None
        return (found.group(1), found.group(2)) if found else None


def doc_files() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", *(p for p in docs if p.relative_to(ROOT).as_posix()
                                  not in NOT_EXAMPLES)]


def blocks_of(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    heading, i = "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        fence = re.match(r"(`{3,})(.*)$", line)
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == fence.group(1))
        before = lines[i - 1].strip() if i else ""
        yield Block(path.relative_to(ROOT).as_posix(), i + 1, fence.group(2).strip(),
                    "\n".join(lines[i + 1:end]) + "\n", heading,
                    before if before.startswith("<!--") else None)
        i = end + 1


BLOCKS = [block for path in doc_files() for block in blocks_of(path)]
PYTHON = [block for block in BLOCKS if block.lang == "python"]


def first_python_block(path: str, heading: str) -> Block:
    found = [b for b in PYTHON if b.path == path and b.heading == heading]
    assert found, f"{path} has no python block under {heading!r}"
    return found[0]


def json_values(text: str) -> list[Any]:
    """The JSON values printed one after another (curl adds no newline)."""
    decoder, values, at = json.JSONDecoder(), list[Any](), 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def sandbox(tmp_path: Path) -> dict[str, str]:
    """The environment of a block: ``tmp_path`` as HOME, nothing of this machine's
    ledgermem settings or XDG dirs, this interpreter's scripts first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERMEM_", "XDG_"))}
    env["HOME"] = str(tmp_path)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=sandbox(cwd),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


# What the prose around a block says it prints, by (file, heading) ----------------------
def ten_lines(out: str, cwd: Path) -> None:
    lines = out.splitlines()
    assert "Prefers green tea over coffee" in lines[0]
    assert "'vector_rank': 1" in lines[0]      # found by the embedder too, not words alone
    assert "memory.added" in lines[-1]          # the history line
    assert (cwd / "memory.db").exists()


def async_api(out: str, cwd: Path) -> None:
    assert out.strip() == "['Prefers green tea over coffee']"


def views(out: str, cwd: Path) -> None:
    baker = out.splitlines()[0]                 # the baker sees the world and itself
    assert "The bakery burned down" in baker and "smelled of smoke" in baker
    assert "I was home all night" not in baker  # the miller's words are the miller's
    assert out.splitlines()[-1] == "[] []"      # no belief yet; nothing before today


def agent_layer(out: str, cwd: Path) -> None:
    recalled = json.loads(out.splitlines()[-1])
    assert recalled["results"][0]["content"] == "Prefers green tea over coffee"


def review_queue(out: str, cwd: Path) -> None:
    assert (cwd / "memory.db").exists()


CHECKS: dict[tuple[str, str], Callable[[str, Path], None]] = {
    ("README.md", "Ten lines"): ten_lines,
    ("README.md", "Async"): async_api,
    ("README.md", "Views over the ledger (many agents)"): views,
    ("README.md", "Prompt blocks and memory tools (agent layer)"): agent_layer,
    ("docs/bootstrap.md", "The review queue in Python"): review_queue,
}


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_every_python_block_runs_or_says_why_not(block: Block, tmp_path: Path) -> None:
    code = block.code
    if block.marker and block.marker[0] == "not run":
        pytest.skip(f"{block.id} not run: {block.marker[1]}")
    if block.marker and block.marker[0] == "continues":
        code = first_python_block(block.path, block.marker[1]).code + "\n" + code
    out = run_python(code, tmp_path)
    check = CHECKS.get((block.path, block.heading))
    if check is not None:
        check(out, tmp_path)


def test_the_markers_are_what_they_seem() -> None:
    """No Python block under another name; a marker says why, or names a block that
    runs; a comment before a fence is a marker; the checks name blocks that exist."""
    assert len(PYTHON) >= 12 and {b.path for b in PYTHON} >= {"README.md",
                                                             "docs/bootstrap.md"}
    for block in BLOCKS:
        assert block.lang in LANGUAGES, f"{block.id}: fence ```{block.lang}"
        if block.comment is None:
            continue
        assert block.marker is not None, f"{block.id}: not a marker: {block.comment}"
        assert block.lang == "python", f"{block.id}: a marker on a {block.lang} block"
        kind, what = block.marker
        assert what, f"{block.id}: '{kind}:' needs a reason or a heading"
        if kind == "continues":
            first = first_python_block(block.path, what)
            assert first.marker is None, f"{block.id} continues {first.id}, which is not run"
    for path, heading in CHECKS:
        marker = first_python_block(path, heading).marker
        assert marker is None or marker[0] == "continues", (path, heading, marker)


def test_the_llm_example_learns_from_a_scripted_llm(tmp_path: Path) -> None:
    """The README's LLM example against an OpenAI-compatible server on loopback in
    place of Ollama: the facts come back extracted, with their source and history."""
    block = first_python_block("README.md", "Learning from conversations (with an LLM)")
    assert block.marker == ("not run", "needs an LLM endpoint (here Ollama's)")
    assert "http://localhost:11434/v1" in block.code
    moved = "Moved from Lisbon to Porto last month"
    job = "Starting a new job at the port authority on Monday"
    with ScriptedLLMServer({"operations": [{"op": "ADD", "content": moved},
                                           {"op": "ADD", "content": job}]},
                           default={"relation": "neutral", "reason": "two facts"}) as llm:
        out = run_python(block.code.replace("http://localhost:11434/v1", llm.url), tmp_path)
    lines = out.splitlines()
    assert sorted(line.split(" llm_extract 0.4 ")[0] for line in lines[:2]) == [moved, job]
    assert all("memory.added" in line for line in lines[:2])
    maintained = lines[2]
    assert maintained.startswith("{'decay'") and "'failed': 1" not in maintained


@pytest.mark.skipif(shutil.which("curl") is None, reason="the REST examples use curl")
def test_the_rest_examples_answer_as_written(tmp_path: Path) -> None:
    """The README's curl lines, then docs/server.md's batch, against ``ledgermem serve``
    (on a free port instead of 8765; the key it printed instead of ``lm_…``)."""
    rest = next(b for b in BLOCKS if b.path == "README.md" and b.heading == "REST API")
    batch = next(b for b in BLOCKS if b.path == "docs/server.md"
                 and b.heading == "Batch writes" and b.lang == "bash")
    port = free_port()
    served = start_server(["serve", "--port", str(port)], serve_env(tmp_path))
    try:
        script = (rest.code.replace("KEY=lm_…", f"KEY={served.user_key}")
                  + "echo\n" + batch.code).replace("127.0.0.1:8765", f"127.0.0.1:{port}")
        done = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True,
                              timeout=60, env=sandbox(tmp_path))
    finally:
        assert served.stop()[0] == 0
    assert done.returncode == 0, done.stderr
    added, found, batched = json_values(done.stdout)
    assert added["content"] == "Prefers green tea over coffee" and added["written"] == "added"
    assert [hit["item"]["id"] for hit in found] == [added["id"]]
    assert [(i["content"], i["written"]) for i in batched["items"]] == [
        ("Prefers green tea over coffee", "merged"), ("Allergic to peanuts", "added")]


_MCP_CLIENT = """
import asyncio, json, sys

from mcp import Client, StdioServerParameters

server = json.loads(sys.argv[1])


async def main() -> None:
    async with Client(StdioServerParameters(**server)) as client:
        print([tool.name for tool in (await client.list_tools()).tools])
        added = await client.call_tool("remember", {"content": "Alice prefers green tea"})
        print(added.structured_content["written"])


asyncio.run(main())
"""


def test_the_mcp_client_configuration_starts_the_five_tools(tmp_path: Path) -> None:
    """The README's ``mcpServers`` entry, started as an MCP client starts it (the
    database in ``tmp_path`` instead of /home/alice)."""
    config = next(b for b in BLOCKS if b.path == "README.md" and b.lang == "json")
    server = json.loads(config.code)["mcpServers"]["memory"]
    args = server["args"]
    args[args.index("--db") + 1] = str(tmp_path / "memory.db")
    server["env"] = sandbox(tmp_path)
    done = subprocess.run([sys.executable, "-c", _MCP_CLIENT, json.dumps(server)],
                          cwd=tmp_path, env=sandbox(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['remember', 'recall', 'update_memory', 'forget', 'search_past_conversations']",
        "added"]
    assert (tmp_path / "memory.db").exists()
