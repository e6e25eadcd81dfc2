"""A terminal chat with memory on, against any OpenAI-compatible server
(``ledgermem chat``).

``chat_turn`` is one turn of the loop, testable without a terminal: the agent's
``prepare`` (a slash command is answered there and never reaches the model), then
``POST {base_url}/chat/completions`` with the messages and the memory tools, the
model's tool calls run by ``call_tool`` (a few rounds at most), and ``finish`` with
the user's clean text and the reply. ``run_chat`` is the read-print loop around it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape

from ..errors import LedgermemError
from .wrapper import MemoryAgent

__all__ = ["ChatError", "ChatTurn", "ToolUse", "chat_turn", "run_chat", "setup_hint"]

MAX_TOOL_ROUNDS = 4
"""Model calls that may answer with tool calls in one turn; the next call forbids
tools (``tool_choice: none``) so the turn ends with an answer."""
EXIT_COMMANDS = frozenset({"/exit", "/quit"})
READS = frozenset({"recall", "search_past_conversations"})
WRITES = frozenset({"remember", "update_memory", "forget"})


def setup_hint(config_path: str | None = None) -> str:
    """How to configure an endpoint."""
    where = f" (or llm.base_url and llm.model in {config_path})" if config_path else (
        " (or llm.base_url and llm.model in the config file, --config)")
    return ("No model endpoint is configured: set LEDGERMEM_LLM_BASE_URL (e.g. "
            "http://localhost:11434/v1) and LEDGERMEM_LLM_MODEL" + where +
            ", and LEDGERMEM_LLM_API_KEY if the server needs a key. Slash commands "
            "work meanwhile (/help).")


class ChatError(LedgermemError):
    """The model server could not be reached or gave no usable answer."""


@dataclass(frozen=True)
class ToolUse:
    """A tool call the model made: its name, arguments (as sent) and the JSON result."""

    name: str
    arguments: str
    result: str

    @property
    def kind(self) -> str:
        """``read`` (recall), ``write`` (remember, update, forget) or ``other``."""
        return "read" if self.name in READS else "write" if self.name in WRITES else "other"

    def describe(self) -> str:
        """One line saying what memory did."""
        try:
            data: Any = json.loads(self.result)
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        if "error" in data:
            return f"memory: {self.name} refused: {data.get('error')}"
        if self.name == "recall":
            return f"memory: recalled {len(data.get('results') or [])} item(s)"
        if self.name == "search_past_conversations":
            return f"memory: found {len(data.get('turns') or [])} past turn(s)"
        if self.name == "remember":
            return f"memory: {data.get('written', 'written')}: {data.get('content', '')}"
        if self.name == "update_memory":
            return f"memory: updated {data.get('id', '')}"
        if self.name == "forget":
            return f"memory: forgot {data.get('forgotten', '')}"
        return f"tool: {self.name}"


@dataclass(frozen=True)
class ChatTurn:
    """What one line did: the reply, whether a slash command answered it (nothing
    reached the model), and the tool calls the model made."""

    reply: str
    slash: bool = False
    tools: list[ToolUse] = field(default_factory=list)


def chat_turn(client: httpx.Client, agent: MemoryAgent, text: str, *, model: str,
              max_rounds: int = MAX_TOOL_ROUNDS,
              on_tool: Callable[[ToolUse], None] | None = None) -> ChatTurn:
    """One turn: a slash command, or the model with the memory tools.

    ``client`` has the server's base URL (``…/v1``) and any key set. The turns are
    stored (``finish``) only once the model answered.

    Raises:
        ChatError: the server could not be reached, failed, or gave no answer.
        InvalidInput: text the agent refuses.
    """
    prepared = agent.prepare(text)
    if prepared.slash is not None:
        return ChatTurn(prepared.slash.reply, slash=True)
    messages: list[dict[str, Any]] = list(prepared.messages)
    used: list[ToolUse] = []
    for round_ in range(max_rounds + 1):
        body: dict[str, Any] = {"model": model, "messages": messages}
        tools = agent.tools()
        if tools:  # none with long-term memory off; servers refuse an empty list
            body["tools"] = tools
            if round_ == max_rounds:
                body["tool_choice"] = "none"
        message = _complete(client, body)
        calls = message.get("tool_calls") or []
        if not calls or round_ == max_rounds:
            reply = message.get("content")
            if not isinstance(reply, str) or not reply.strip():
                raise ChatError("the model gave no answer")
            agent.finish(text, reply)
            return ChatTurn(reply, tools=used)
        messages.append({"role": "assistant", "content": message.get("content"),
                         "tool_calls": calls})
        for call in calls:
            use = _run_call(agent, call)
            used.append(use)
            if on_tool is not None:
                on_tool(use)
            messages.append({"role": "tool", "tool_call_id": str(call.get("id", "")),
                             "content": use.result})
    raise AssertionError("unreachable")  # pragma: no cover


def _run_call(agent: MemoryAgent, call: Any) -> ToolUse:
    function = call.get("function") if isinstance(call, dict) else None
    function = function if isinstance(function, dict) else {}
    name = function.get("name")
    arguments = function.get("arguments")
    name = name if isinstance(name, str) else ""
    arguments = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolUse(name, arguments, agent.call_tool(name, arguments))


def _complete(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message of one chat completion."""
    where = f"{client.base_url}".rstrip("/")
    try:
        response = client.post("chat/completions", json=body)
    except httpx.TimeoutException:
        raise ChatError(f"the model server at {where} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise ChatError(f"cannot reach the model server at {where}: "
                        f"{exc or type(exc).__name__}") from None
    if response.status_code != 200:
        raise ChatError(f"the model server at {where} answered HTTP "
                        f"{response.status_code}: {_error_message(response)}")
    try:
        data = response.json()
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ChatError(f"the model server at {where} sent an answer that is not a chat "
                        "completion") from None
    if not isinstance(message, dict):
        raise ChatError(f"the model server at {where} sent a malformed message")
    return message


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        text = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        text = None
    text = str(text or response.text or response.reason_phrase)
    return " ".join(text.split())[:300]


def run_chat(console: Console, agent: MemoryAgent, client: httpx.Client | None, *,
             model: str | None, hint: str,
             read: Callable[[str], str] | None = None) -> None:
    """The read-print loop: ``/exit``, end of input or Ctrl-C end it. Without a client
    (no endpoint) only slash commands run; other lines get ``hint``. A failed turn is
    one line, and the chat goes on."""
    ask = read if read is not None else console.input
    console.print(f"[dim]chat as {escape(agent.user)} on {escape(agent.channel)} "
                  "(memory on; /help for commands, /exit to leave)[/]")
    if client is None:
        console.print(f"[yellow]{escape(hint)}[/]")

    def shown(use: ToolUse) -> None:
        console.print(f"[dim]{escape(use.describe())}[/]")

    try:
        while True:
            try:
                text = ask("[bold]you>[/] ")
            except EOFError:
                break
            if not text.strip():
                continue
            if text.strip().lower() in EXIT_COMMANDS:
                break
            try:
                if client is None or model is None:
                    prepared = agent.prepare(text)
                    if prepared.slash is None:
                        console.print(f"[yellow]{escape(hint)}[/]")
                        continue
                    turn = ChatTurn(prepared.slash.reply, slash=True)
                else:
                    turn = chat_turn(client, agent, text, model=model, on_tool=shown)
            except LedgermemError as exc:
                console.print(f"[red]error: {escape(_one_line(str(exc)))}[/]")
                continue
            style = "cyan" if turn.slash else "green"
            console.print(f"[{style}]{escape(turn.reply)}[/]")
    except KeyboardInterrupt:
        console.print()
    console.print("[dim]bye[/]")


def _one_line(text: str) -> str:
    return " ".join(text.split()).encode("utf-8", "backslashreplace").decode("utf-8")
