"""A Google ADK agent whose sessions and memory are ledgermem, on any OpenAI-compatible
endpoint (Ollama, vLLM, llama.cpp, OpenAI…), or offline on a scripted model.

    pip install 'ledgermem[adk]'
    python examples/adk_agent.py --db /tmp/adk.db                  # offline demo
    python examples/adk_agent.py --db adk.db --user alice \\
        --base-url http://localhost:11434/v1 --model llama3.1       # chat on stdin

Each line you type is one turn of the current ADK session; ``/new`` hands the session
to long-term memory (distilled when ledgermem has an LLM, verbatim otherwise) and starts
another one, where ADK's ``preload_memory`` tool puts what earlier sessions said in
front of the model. The offline demo plays two sessions on a scripted model and prints
what the model was shown the second time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.integrations.openai import OpenAILlm
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import preload_memory_tool as preload_memory
from google.genai import types

from ledgermem import Memory
from ledgermem.adapters.adk import adk_services
from ledgermem.testing import ScriptedLLMServer

APP = "adk_example"
DEMO = [["I'm vegetarian, and I live in Lisbon.", "Book me a table for Friday."],
        ["What should a vegetarian like me cook tonight?"]]


class Chat:
    """One user's conversation with the agent, session after session."""

    def __init__(self, memory: Memory, model: OpenAILlm, user: str) -> None:
        self.sessions, self.memories = adk_services(memory)
        agent = LlmAgent(name="assistant", model=model, tools=[preload_memory],
                         instruction="You are a helpful assistant. Be brief.")
        self.runner = Runner(agent=agent, app_name=APP, session_service=self.sessions,
                             memory_service=self.memories)
        self.user = user
        self.session_id: str | None = None

    async def say(self, text: str) -> str:
        if self.session_id is None:
            session = await self.sessions.create_session(app_name=APP, user_id=self.user)
            self.session_id = session.id
        reply = ""
        async for event in self.runner.run_async(
                user_id=self.user, session_id=self.session_id,
                new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            if event.content and event.content.parts:
                reply = "".join(p.text or "" for p in event.content.parts) or reply
        return reply

    async def new_session(self) -> None:
        """Hand the current session to long-term memory; the next line starts another."""
        if self.session_id is not None:
            session = await self.sessions.get_session(app_name=APP, user_id=self.user,
                                                      session_id=self.session_id)
            if session is not None:
                await self.memories.add_session_to_memory(session)
        self.session_id = None


def scripted_reply(body: dict[str, Any]) -> str:
    """The offline model: says what the preloaded memory told it, if anything."""
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "<PAST_CONVERSATIONS>" not in text:
        return "Noted."
    past = text.split("<PAST_CONVERSATIONS>")[1].split("</PAST_CONVERSATIONS>")[0]
    said = [line.split(": ", 1)[1] for line in past.splitlines() if line.startswith("user: ")]
    return "From our earlier conversations: " + " ".join(said)


async def demo(memory: Memory) -> int:
    with ScriptedLLMServer(default=scripted_reply) as server:
        chat = Chat(memory, OpenAILlm(model="scripted", api_key="none",
                                      base_url=server.url), user="demo")
        for session in DEMO:
            for line in session:
                print(f"you> {line}\nassistant> {await chat.say(line)}")
            await chat.new_session()
            print("--- new session ---")
        shown = server.chat_requests[-1].text
        print("the model was shown:\n" + shown.split("</PAST_CONVERSATIONS>")[0].split(
            "They may be useful for answering the user's current query.")[-1].strip())
    return 0


async def converse(memory: Memory, model: OpenAILlm, user: str) -> int:
    chat = Chat(memory, model, user)
    for line in sys.stdin:
        text = line.strip()
        if text == "/new":
            await chat.new_session()
            print("(new session)", flush=True)
        elif text:
            print(await chat.say(text), flush=True)
    await chat.new_session()
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
    with Memory.open(args.db, embedder=embedder) as memory:
        if args.base_url is None:
            return asyncio.run(demo(memory))
        model = OpenAILlm(model=args.model, api_key=args.api_key, base_url=args.base_url)
        return asyncio.run(converse(memory, model, args.user))


if __name__ == "__main__":
    sys.exit(main())
