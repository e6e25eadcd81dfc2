"""An agent with long-term memory: ``MemoryAgent`` around the OpenAI SDK's client,
pointed at any OpenAI-compatible server (Ollama, vLLM, llama.cpp, OpenAI…).

    pip install 'ledgermem[agent]'
    OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_API_KEY=unused \\
        python examples/agent.py --model llama3.1 --user alice

Each line you type is one turn: slash commands (/remember, /memory, /forget, /reset)
are answered by memory and never reach the model; anything else goes to the model
with the memory prompt and the five memory tools, and both turns are stored. When the
model cannot answer (the server is down, say), that is one line on stderr, the line is
not stored (``finish`` records a question with its answer), and the loop goes on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from openai import OpenAI, OpenAIError

from ledgermem import LedgermemError, Memory
from ledgermem.agent import MemoryAgent


def answer(client: OpenAI, agent: MemoryAgent, text: str, model: str) -> str:
    turn = agent.prepare(text)                     # 1. before the model call
    if turn.slash is not None:
        return turn.slash.reply                    # a slash command: no model call
    messages: list[Any] = list(turn.messages)      # JSON objects, as the SDK takes them
    tools: list[Any] = agent.tools()
    for _ in range(5):                             # a few rounds of tool calls at most
        response = client.chat.completions.create(
            model=model, messages=messages, tools=tools)
        message = response.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:            # 2. the model uses its memory
            assert call.type == "function"         # the only kind of tool it was given
            result = agent.call_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    reply = message.content or "(no answer)"
    agent.finish(text, reply)                      # 3. both turns are stored
    return reply


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--db", default=None, help="database (default: the user data dir)")
    parser.add_argument("--user", default="local")
    parser.add_argument("--channel", default="example")
    parser.add_argument("--keyword-only", action="store_true", help="no embedding model")
    args = parser.parse_args(argv)
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    embedder = None if args.keyword_only else "default"
    with Memory.open(args.db, embedder=embedder) as memory, \
            MemoryAgent(memory, user=args.user, channel=args.channel) as agent:
        for line in sys.stdin:
            if line.strip():
                try:
                    print(answer(client, agent, line.strip(), args.model), flush=True)
                except OpenAIError as exc:  # nothing was stored: the line can be sent again
                    fail(f"no answer from the model at {client.base_url} ({exc}); "
                         "the line was not stored")
                except LedgermemError as exc:  # text memory refuses (a NUL, say)
                    fail(str(exc))
    return 0


def fail(message: str) -> None:
    """One line on stderr (the SDK's messages can span several)."""
    print("error: " + " ".join(message.split()), file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
