"""The agent layer: what an agent's model sees of its memory, and what it can do with it.

- ``prompt``: the session-start profile, the frozen system-prompt prefix, the per-turn
  dynamic block, and ``as_data``, the one escaping of stored text placed in a prompt.
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

__all__ = [
    "TOOLS",
    "TOOL_NAMES",
    "MemoryTools",
    "Profile",
    "PromptOptions",
    "SlashCommands",
    "SlashResult",
    "ToolSpec",
    "anthropic_tools",
    "as_data",
    "is_memory_tool",
    "openai_tools",
    "profile",
    "system_prefix",
    "turn_block",
    "with_turn_block",
]
