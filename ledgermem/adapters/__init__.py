"""Adapters that make ledgermem the memory of agent frameworks.

Each adapter lives in its own module behind an optional extra, and importing it
without that extra raises ``MissingExtra`` (an ``ImportError`` and a ``ConfigError``)
naming the extra to install:

- ``ledgermem.adapters.adk``: Google ADK's ``BaseMemoryService`` and
  ``BaseSessionService`` (``pip install 'ledgermem[adk]'``);
- ``ledgermem.adapters.openai_agents``: the OpenAI Agents SDK's ``Session``
  (``pip install 'ledgermem[openai-agents]'``);
- ``ledgermem.adapters.langgraph``: LangGraph's ``BaseStore``
  (``pip install 'ledgermem[langgraph]'``).

This package imports none of the frameworks itself.
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["MissingExtra", "missing_extra"]


class MissingExtra(ConfigError, ImportError):
    """An adapter was imported without the optional extra that installs its framework."""


def missing_extra(module: str, extra: str, package: str, cause: ImportError) -> MissingExtra:
    """The error an adapter module raises when ``package`` cannot be imported.

    Args:
        module: the adapter module (``ledgermem.adapters.adk``).
        extra: the extra that installs the framework (``adk``).
        package: the framework's distribution (``google-adk``).
        cause: the original ``ImportError`` (kept as ``__cause__`` by ``raise … from``).
    """
    return MissingExtra(f"{module} needs the {package} package: pip install "
                        f"'ledgermem[{extra}]' ({cause})")
