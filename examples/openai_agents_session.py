"""An OpenAI Agents SDK agent whose conversation is a ledgermem session: it survives a
restart, the model sees a window of it, and an idle (or reset) session is distilled
into long-term memory that the agent reaches through ledgermem's memory tools.

    pip install 'ledgermem[openai-agents]'
    python examples/openai_agents_session.py --db /tmp/agents.db          # offline demo
    python examples/openai_agents_session.py --db agents.db --user alice \\
        --base-url http://localhost:11434/v1 --model llama3.1          # chat on stdin

Any OpenAI-compatible ``/chat/completions`` endpoint works (Ollama, vLLM, llama.cpp,
OpenAI…); tracing is off, so nothing leaves the machine but the model calls. In the
chat, ``/reset`` consolidates the session and starts a new one. The offline demo says
something, "restarts" (reopens the database), and asks about it, on a scripted model.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from openai import AsyncOpenAI

from ledgermem import Memory
from ledgermem.adapters.openai_agents import LedgermemSession, memory_tools
from ledgermem.testing import ScriptedLLMServer

OFFLINE = RunConfig(tracing_disabled=True)
CHANNEL = "example"


def make_agent(memory: Memory, user: str, base_url: str, model: str, api_key: str
               ) -> Agent[Any]:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    return Agent(name="assistant", instructions="You are a helpful assistant. Be brief.",
                 tools=[*memory_tools(memory.for_user(user))],  # Agent takes a list[Tool]
                 model=OpenAIChatCompletionsModel(model=model, openai_client=client))


async def ask(memory: Memory, agent: Agent[Any], user: str, text: str) -> str:
    session = LedgermemSession(memory, user=user, channel=CHANNEL)
    result = await Runner.run(agent, text, session=session, run_config=OFFLINE)
    return str(result.final_output)


def scripted_reply(body: dict[str, Any]) -> str:
    """The offline model: recalls the first thing the user said in the history."""
    said = [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]
    return f"Earlier you said: {said[0]}" if len(said) > 1 else "Noted."


def demo(path: str | None, embedder: Any) -> int:
    with ScriptedLLMServer(default=scripted_reply) as server:
        for text in ("I'm vegetarian.", "What did I tell you?"):
            with Memory.open(path, embedder=embedder) as memory:  # a new process, each time
                agent = make_agent(memory, "demo", server.url, "scripted", "none")
                print(f"you> {text}\nassistant> "
                      f"{asyncio.run(ask(memory, agent, 'demo', text))}")
            print("(restarted)")
    return 0


async def converse(memory: Memory, agent: Agent[Any], user: str) -> int:
    session = LedgermemSession(memory, user=user, channel=CHANNEL)
    for line in sys.stdin:
        text = line.strip()
        if text == "/reset":
            await session.clear_session()
            print("(session consolidated and cleared)", flush=True)
        elif text:
            result = await Runner.run(agent, text, session=session, run_config=OFFLINE)
            print(result.final_output, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", default=None, help="database (default: the user data dir)")
    parser.add_argument("--user", default="local")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: offline "
                        "demo on a scripted model)")
    parser.add_argument("--model", default="llama3.1")
    parser.add_argument("--api-key", default="unused")
    parser.add_argument("--keyword-only", action="store_true", help="no embedding model")
    args = parser.parse_args(argv)
    embedder = None if args.keyword_only else "default"
    if args.base_url is None:
        return demo(args.db, embedder)
    with Memory.open(args.db, embedder=embedder) as memory:
        agent = make_agent(memory, args.user, args.base_url, args.model, args.api_key)
        return asyncio.run(converse(memory, agent, args.user))


if __name__ == "__main__":
    sys.exit(main())
