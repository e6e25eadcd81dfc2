"""The context builder: one prompt from layers, in an order chosen on purpose.

Identity comes first so the model knows who it is before anything else; the current
scene comes before memory because what happens now matters more than what happened
before; visitor artifacts (the last three) are always shown as the most pressing
input; extra, scenario-specific text follows; the output format comes last, so the
model reads everything before it is told how to answer. Every layer is optional, and
an empty one is left out with its heading.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ..types import Event
from .salience import event_text

__all__ = ["HEADINGS", "VISITOR_LIMIT", "build_context", "event_line"]

VISITOR_LIMIT = 3
"""Visitor artifacts shown: the most recent ones."""

HEADINGS = {
    "identity": "## Identity",
    "scene": "## Current scene",
    "memory": "## Your memory",
    "visitor": "## Visitor",
    "extra": "## Additional context",
    "output_format": "## Output format",
}
"""The heading of each layer, in layer order."""

_LINE_CHARS = 500


def event_line(event: Event, *, with_id: bool = False, max_chars: int = _LINE_CHARS) -> str:
    """One event on one line: ``- [id] time kind (agent): text``.

    The time is shown in UTC to the second (as written when it is not ISO 8601); the agent
    only when the event has one; the id only ``with_id``. Line breaks in the text
    become spaces, and text longer than ``max_chars`` is cut with an ellipsis.
    """
    text = " ".join(event_text(event).split())
    if len(text) > max_chars:
        text = text[:max_chars - 1].rstrip() + "…"
    who = f" ({event.agent_id})" if event.agent_id else ""
    ident = f"[{event.id}] " if with_id else ""
    return f"- {ident}{_when(event.ts)} {event.kind}{who}: {text}"


def build_context(*, identity: str | None = None, scene: str | None = None,
                  memory: Sequence[Event] = (), visitor_artifacts: Sequence[str] = (),
                  extra: str | None = None, output_format: str | None = None) -> str:
    """The prompt text: identity → current scene → memory → visitor → extra → output
    format, each under its heading (``HEADINGS``), blank lines between.

    Args:
        identity: who the agent is (persona, role).
        scene: the current state of the world.
        memory: the events to recall (``episodic`` or ``salient``), one line each:
            time, kind, agent, text.
        visitor_artifacts: what visitors left; only the last three are shown.
        extra: anything scenario-specific.
        output_format: how to answer (e.g. a JSON constraint).

    Returns:
        The layers given, in order; empty layers (None, blank, no events) are left
        out, and with no layer at all the result is ``""``.
    """
    artifacts = [a.strip() for a in visitor_artifacts if a.strip()][-VISITOR_LIMIT:]
    bodies = {
        "identity": (identity or "").strip(),
        "scene": (scene or "").strip(),
        "memory": "\n".join(event_line(event) for event in memory),
        "visitor": "\n\n".join(artifacts),
        "extra": (extra or "").strip(),
        "output_format": (output_format or "").strip(),
    }
    return "\n\n".join(f"{HEADINGS[name]}\n{body}" for name, body in bodies.items() if body)


def _when(ts: str) -> str:
    try:
        moment = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")
