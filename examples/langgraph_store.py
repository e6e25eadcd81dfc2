"""A LangGraph chat graph whose long-term store is ledgermem: what the user says on one
thread is recalled on another, by meaning, on any OpenAI-compatible endpoint (Ollama,
vLLM, llama.cpp, OpenAI…), or offline on a scripted model.

    pip install 'ledgermem[langgraph]'
    python examples/langgraph_store.py --db /tmp/graph.db                  # offline demo
    python examples/langgraph_store.py --db graph.db --user alice \\
        --base-url http://localhost:11434/v1 --model llama3.1          # chat on stdin

The graph is recall → respond → remember: the store is searched in the user's
namespace ``(user, "memories")`` for the message, the model answers with what was
found in its system prompt, and the message is stored for later threads. In the chat,
``/thread NAME`` switches to another thread (the checkpointer's short-term memory) while
the store (long-term memory) stays the user's.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from ledgermem import Memory
from ledgermem.adapters.langgraph import LedgermemStore
from ledgermem.testing import ScriptedLLMServer

Chat = Callable[[list[dict[str, str]]], str]
"""Sends chat messages to a model, returns its answer."""


class State(TypedDict):
    text: str
    memories: list[str]
    reply: str


def endpoint(base_url: str, model: str, api_key: str) -> Chat:
    def chat(messages: list[dict[str, str]]) -> str:
        response = httpx.post(f"{base_url.rstrip('/')}/chat/completions", timeout=120,
                              headers={"Authorization": f"Bearer {api_key}"},
                              json={"model": model, "messages": messages})
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"] or "")

    return chat


def build(store: BaseStore, chat: Chat) -> Any:
    def recall(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user = config["configurable"]["user_id"]
        hits = store.search((user, "memories"), query=state["text"], limit=3)
        return {"memories": [hit.value["text"] for hit in hits]}

    def respond(state: State) -> dict[str, Any]:
        known = "\n".join(f"- {m}" for m in state["memories"]) or "(nothing yet)"
        system = ("You are a helpful assistant. Be brief.\nWhat the user told you "
                  f"before:\n{known}")
        return {"reply": chat([{"role": "system", "content": system},
                               {"role": "user", "content": state["text"]}])}

    def remember(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user = config["configurable"]["user_id"]
        store.put((user, "memories"), str(uuid.uuid4()), {"text": state["text"]})
        return {}

    graph = StateGraph(State)
    for name, node in (("recall", recall), ("respond", respond), ("remember", remember)):
        graph.add_node(name, node)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "respond")
    graph.add_edge("respond", "remember")
    graph.add_edge("remember", END)
    return graph.compile(checkpointer=InMemorySaver(), store=store)


def say(graph: Any, user: str, thread: str, text: str) -> str:
    config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": user}}
    return str(graph.invoke({"text": text, "memories": [], "reply": ""}, config)["reply"])


def scripted_reply(body: dict[str, Any]) -> str:
    """The offline model: repeats the first thing it was told the user said before."""
    system = str(body["messages"][0]["content"])
    known = [line[2:] for line in system.splitlines() if line.startswith("- ")]
    return f"You told me: {known[0]}" if known else "Noted."


def demo(memory: Memory) -> int:
    with ScriptedLLMServer(default=scripted_reply) as server:
        graph = build(LedgermemStore(memory), endpoint(server.url, "scripted", "none"))
        for thread, text in (("1", "I am allergic to peanuts."), ("2", "Can I eat peanuts?")):
            print(f"[thread {thread}] you> {text}")
            print(f"[thread {thread}] assistant> {say(graph, 'demo', thread, text)}")
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
            return demo(memory)
        graph = build(LedgermemStore(memory), endpoint(args.base_url, args.model,
                                                       args.api_key))
        thread = "main"
        for line in sys.stdin:
            text = line.strip()
            if text.startswith("/thread "):
                thread = text.removeprefix("/thread ").strip() or thread
                print(f"(thread {thread})", flush=True)
            elif text:
                print(say(graph, args.user, thread, text), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
