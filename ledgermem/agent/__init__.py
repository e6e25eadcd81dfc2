"""The agent layer: what an agent's model sees of its memory, and what it can do with it.

- ``prompt``: the session-start profile, the frozen system-prompt prefix, the per-turn
  dynamic block, and ``as_data``, the one escaping of stored text placed in a prompt.
- ``sessions``: durable sessions keyed ``{user}:{channel}``, the window of recent turns
  replayed to the model, idle consolidation and its start-up sweep, ``/reset``, and the
  users file mapping a person's channels to one user id.
- ``wrapper``: the three hook points for any agent loop (``MemoryAgent``, its async
  twin, and ``MemoryMixin`` for class-based agents).
- ``tools``: the five memory tools (JSON schemas in the OpenAI and Anthropic formats,
  one dispatcher whose failures are results the model can read) and the slash commands
  handled before the model.
"""

from .prompt import (
    Profile,
    PromptOptions,
    as_data,
    profile,
    system_prefix,
    turn_block,
    with_turn_block,
)
from .sessions import (
    SessionOptions,
    SessionResult,
    Sessions,
    UserDirectory,
    session_key,
)
from .tools import (
    TOOL_NAMES,
    TOOLS,
    MemoryTools,
    SlashCommands,
    SlashResult,
    ToolSpec,
    anthropic_tools,
    is_memory_tool,
    openai_tools,
)
from .wrapper import AsyncMemoryAgent, MemoryAgent, MemoryMixin, PreparedTurn

__all__ = [
    "TOOLS",
    "TOOL_NAMES",
    "AsyncMemoryAgent",
    "MemoryAgent",
    "MemoryMixin",
    "MemoryTools",
    "PreparedTurn",
    "Profile",
    "PromptOptions",
    "SessionOptions",
    "SessionResult",
    "Sessions",
    "SlashCommands",
    "SlashResult",
    "ToolSpec",
    "UserDirectory",
    "anthropic_tools",
    "as_data",
    "is_memory_tool",
    "openai_tools",
    "profile",
    "session_key",
    "system_prefix",
    "turn_block",
    "with_turn_block",
]
