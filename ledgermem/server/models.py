"""The REST API's request and response bodies, as pydantic models.

Responses mirror the library's value types (``Item``, ``Turn``, ``ToolCall``,
``Event``, ``Hit``) field for field, so the OpenAPI document describes what the Python
API returns. Requests say in their schema what the schema can say (types, enums,
ranges, lengths); what only the library knows (a date in words, a reserved event kind,
text no store can keep) is checked there and answered 422 ``invalid_input``.
Unknown fields in a request body are refused, so a typo is not silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..types import CATEGORIES, SOURCES
from ..validation import MAX_NAME_CHARS

__all__ = [
    "AddTurnsRequest",
    "ApproveRequest",
    "ConversationSearchRequest",
    "CountOut",
    "CreateKeyRequest",
    "CreateUserRequest",
    "CreatedKeyOut",
    "DecayRequest",
    "EditApproveRequest",
    "EventOut",
    "FacetOut",
    "FindingIn",
    "ForgetUserOut",
    "HealthOut",
    "HitOut",
    "InvalidateRequest",
    "ItemOut",
    "ItemPage",
    "ItemsOut",
    "KeyInfoOut",
    "LLMUsageOut",
    "MemoryEntry",
    "OwnKeyRequest",
    "PrincipalOut",
    "ProposalOut",
    "ProposeRequest",
    "PruneOut",
    "PruneRequest",
    "RecentErrorsOut",
    "RecordEventRequest",
    "ReflectOut",
    "ReflectionDueOut",
    "RejectRequest",
    "RememberManyRequest",
    "RememberRequest",
    "ResetDiscoveryOut",
    "RestoreRequest",
    "ReviseRequest",
    "SearchAllRequest",
    "SearchRequest",
    "SessionOut",
    "StatsOut",
    "StatusOut",
    "TimelineOut",
    "ToolCallOut",
    "ToolCallRequest",
    "ToolStatOut",
    "TurnIn",
    "TurnOut",
    "UpdateRequest",
    "UserOut",
]

Category = Literal["fact", "preference", "error", "skill", "note", "reminder"]
Source = Literal["user", "tool", "llm_extract", "heuristic", "error_auto", "discovery",
                 "consolidation"]
Role = Literal["user", "assistant", "system", "tool"]
TimeModeName = Literal["boost", "filter", "off"]
Visibility = Literal["private", "global"]
MAX_LIMIT = 10_000
MAX_BATCH = 1_000
"""The most entries one ``POST /v1/memories/batch`` takes (about a second of writing)."""

assert Category.__args__ == CATEGORIES and Source.__args__ == SOURCES  # type: ignore[attr-defined]



def _name() -> Any:
    """A required identifier (user, tool name)."""
    return Field(min_length=1, max_length=MAX_NAME_CHARS)


def _when() -> Any:
    """An optional time, in any form the library reads."""
    return Field(default=None, max_length=200, description=(
        "A time: ISO 8601 (2026-05-12T09:30:00+02:00), a date, or English "
        "(\"yesterday\", \"3 days ago\", \"next Friday\")."))


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Response(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# knowledge ------------------------------------------------------------------------------
class ItemOut(_Response):
    """A knowledge item (``ledgermem.types.Item``)."""

    id: str
    user_id: str
    category: str
    content: str
    source: str
    confidence: float
    created_at: str
    updated_at: str
    context: str
    domain: str | None
    agent_id: str | None
    entity: str | None
    sensitive: bool
    due_at: str | None
    reminded_at: str | None
    superseded_by: str | None
    valid_from: str | None
    valid_to: str | None
    last_used_at: str | None
    use_count: int
    metadata: dict[str, Any]
    active: bool = Field(description="Neither superseded nor invalidated.")
    written: Literal["added", "merged"] | None = Field(
        default=None, description="On a remember: whether the text was added as a new item "
        "or restated this existing one, which was refreshed instead.")


class ItemPage(BaseModel):
    """A page of items and how many match in all."""

    items: list[ItemOut]
    total: int
    offset: int
    limit: int | None


class MemoryEntry(_Request):
    """A knowledge item to store verbatim: ``remember``'s fields but ``dedup`` (one entry
    of a batch; ``RememberRequest`` adds ``dedup``)."""

    content: str = Field(min_length=1, description="At most 2,000 characters are kept; "
                         "longer text is cut and flagged in metadata.")
    category: Category = "fact"
    domain: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    source: Source = "user"
    confidence: float | None = Field(default=None, ge=0, le=1)
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1,
                               description="type:name, e.g. person:sarah_chen.")
    sensitive: bool = False
    due_at: str | None = _when()
    metadata: dict[str, Any] | None = None
    valid_from: str | None = _when()
    reason: str | None = Field(default=None, max_length=MAX_NAME_CHARS)


class RememberRequest(MemoryEntry):
    """A knowledge item to store verbatim (see ``UserMemory.remember``)."""

    dedup: bool | None = Field(default=None, description="False always adds; default: "
                               "refresh the active item this text restates.")


class RememberManyRequest(_Request):
    """Knowledge items stored in one transaction (see ``UserMemory.remember_many``): all
    of them, or none when one is refused. An empty list stores nothing."""

    items: list[MemoryEntry] = Field(max_length=MAX_BATCH, description=(
        f"At most {MAX_BATCH:,} entries, each deduplicated against what is stored and the "
        "entries before it."))
    dedup: bool | None = Field(default=None, description="False always adds; default: "
                               "refresh the active item an entry restates.")


class ItemsOut(BaseModel):
    """Items in the order of the request's entries (two entries merged into one item
    return it twice, as stored at the end)."""

    items: list[ItemOut]


class UpdateRequest(_Request):
    """Fields to change in place; those left out stay. ``null`` clears ``domain``,
    ``entity`` and ``due_at``."""

    content: str | None = Field(default=None, min_length=1)
    category: Category | None = None
    domain: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    confidence: float | None = Field(default=None, ge=0, le=1)
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1)
    sensitive: bool | None = None
    due_at: str | None = _when()
    metadata: dict[str, Any] | None = None


class ReviseRequest(_Request):
    """A new version replacing an active item (a new id; the old one is kept). Fields
    left out are the old version's; ``null`` clears ``entity``, ``domain`` or
    ``due_at``."""

    content: str = Field(min_length=1)
    category: Category | None = None
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1)
    domain: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    confidence: float | None = Field(default=None, ge=0, le=1)
    sensitive: bool | None = None
    due_at: str | None = _when()
    source: Source = "user"
    reason: str = Field(default="revised", max_length=MAX_NAME_CHARS)
    turn_ids: list[str] | None = Field(default=None, max_length=MAX_LIMIT)
    at: str | None = _when()


class InvalidateRequest(_Request):
    """Mark an active item as no longer true (nothing is erased)."""

    reason: str = Field(default="no longer true", max_length=MAX_NAME_CHARS)
    source: Source | None = None
    turn_ids: list[str] | None = Field(default=None, max_length=MAX_LIMIT)
    at: str | None = _when()


class RestoreRequest(_Request):
    """Why a superseded or invalidated version is made active again."""

    reason: str = Field(default="restored", max_length=MAX_NAME_CHARS)


class SearchRequest(_Request):
    """A knowledge search (see ``UserMemory.search``): every filter and ``as_of``."""

    query: str = Field(max_length=10_000)
    category: Category | None = None
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1)
    sensitive: bool | None = None
    top_k: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    time_from: str | None = _when()
    time_to: str | None = _when()
    include_superseded: bool = False
    touch: bool = Field(default=True, description="Give the hits their recall "
                        "bookkeeping (+0.02 confidence, a use); false only looks.")
    as_of: str | None = Field(default=None, max_length=200, description=(
        "Search what was known and true at this time, replayed from the ledger."))
    time_mode: TimeModeName | None = None
    min_score: float | None = Field(default=None, ge=0, le=1)


class SearchAllRequest(_Request):
    """One search over knowledge and past conversations."""

    query: str = Field(max_length=10_000)
    top_k: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    category: Category | None = None
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1)
    session_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    time_from: str | None = _when()
    time_to: str | None = _when()
    time_mode: TimeModeName | None = None
    touch: bool = True
    min_score: float | None = Field(default=None, ge=0, le=1)


# conversations ------------------------------------------------------------------------
class TurnOut(_Response):
    """A conversation turn (``ledgermem.types.Turn``)."""

    id: str
    user_id: str
    session_id: str
    role: str
    content: str
    ts: str
    agent_id: str | None
    consolidated_at: str | None
    metadata: dict[str, Any]


class HitOut(_Response):
    """A search result: an item or a turn, its score, and why it ranked there."""

    score: float
    item: ItemOut | None
    turn: TurnOut | None
    why: dict[str, float]


class TurnIn(_Request):
    """One message to keep."""

    role: Role
    content: str = Field(min_length=1)
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS,
                             description="The speaker's name.")
    at: str | None = _when()
    metadata: dict[str, Any] | None = None


class AddTurnsRequest(_Request):
    """Messages kept in one transaction; ``infer`` also queues them for extraction."""

    turns: list[TurnIn] = Field(min_length=1, max_length=1000)
    session_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS,
                                   description="Default: the user's default session.")
    infer: bool = False


class ConversationSearchRequest(_Request):
    """Past turns by keywords and meaning, and/or a time range."""

    query: str | None = Field(default=None, max_length=10_000)
    time_from: str | None = _when()
    time_to: str | None = _when()
    session_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    limit: int = Field(default=10, ge=1, le=MAX_LIMIT)
    time_mode: TimeModeName | None = None
    min_score: float | None = Field(default=None, ge=0, le=1)


class SessionOut(BaseModel):
    """A session: its turns and when it began and last spoke."""

    session_id: str
    turns: int
    first_ts: str
    last_ts: str
    unconsolidated: int


# tool calls -------------------------------------------------------------------------------
class ToolCallOut(_Response):
    """A logged tool call (``ledgermem.types.ToolCall``)."""

    id: str
    user_id: str
    name: str
    arguments: dict[str, Any]
    success: bool
    ts: str
    duration_ms: float | None
    error: str | None
    session_id: str | None
    agent_id: str | None


class ToolCallRequest(_Request):
    """A tool call of the host agent; a failure also becomes ``error`` knowledge."""

    name: str = _name()
    arguments: dict[str, Any] | None = None
    success: bool | None = Field(default=None, description="Default: whether error is null.")
    duration_ms: float | None = Field(default=None, ge=0)
    error: str | None = Field(default=None, max_length=100_000)
    session_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    learn_error: bool = True


class ToolStatOut(BaseModel):
    """Per tool name: calls, failures, success rate, mean duration, last call."""

    name: str
    calls: int
    failures: int
    success_rate: float
    avg_duration_ms: float | None
    last_ts: str | None


# events and views ---------------------------------------------------------------------
class EventOut(_Response):
    """A ledger entry (``ledgermem.types.Event``)."""

    id: str
    ts: str
    user_id: str
    kind: str
    payload: dict[str, Any]
    agent_id: str | None
    session_id: str | None
    subject_id: str | None
    visibility: Visibility


class RecordEventRequest(_Request):
    """An event of the application's own kind, appended to the user's ledger."""

    kind: str = Field(min_length=3, max_length=100, pattern=r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+$",
                      description="Lower-case words joined by dots (world.observed); not "
                      "memory.*, turn.*, turns.*, llm.* or tool.*.")
    payload: dict[str, Any] | None = None
    agent_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    visibility: Visibility = "private"
    session_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)


class ReflectionDueOut(BaseModel):
    """Whether the agent has seen enough events since it last reflected."""

    due: bool


class ReflectOut(BaseModel):
    """The belief written, or null when none was due (or no LLM is configured)."""

    event: EventOut | None


# observability ----------------------------------------------------------------------------
class LLMTotals(BaseModel):
    calls: int
    tokens_in: int
    tokens_out: int
    errors: int


class StatsOut(BaseModel):
    """Counts of one user's memory and the modes on."""

    items: int
    items_total: int
    items_unembedded: int
    turns: int
    sessions: int
    tool_calls: int
    events: int
    by_category: dict[str, int]
    embedder: str | None
    llm: str | None
    llm_calls: LLMTotals | None = None


class StatusOut(BaseModel):
    """Which mode is on and what waits for the background workers."""

    mode: str
    llm: str | None
    structured_output: str | bool | None
    embedder: str | None
    extraction: dict[str, int]
    embedding: dict[str, int]
    skipped: dict[str, str]


class TimelineOut(BaseModel):
    """Events of one kind on one day."""

    day: str
    kind: str
    count: int


class FacetOut(BaseModel):
    """A value (an entity, a context) and how many active items carry it."""

    value: str
    count: int


class RecentErrorsOut(BaseModel):
    """Known ``error`` items and the latest failed tool calls."""

    items: list[ItemOut]
    tool_calls: list[ToolCallOut]


class LLMUsageOut(BaseModel):
    """LLM calls made for this user, per purpose and model."""

    purpose: str
    model: str
    calls: int
    tokens_in: int
    tokens_out: int
    errors: int
    latency_ms: float


class CountOut(BaseModel):
    """How many rows an operation touched."""

    count: int


# maintenance ----------------------------------------------------------------------------
class DecayRequest(_Request):
    """Confidence decay of items unused for a while."""

    unused_days: int = Field(default=30, ge=0, le=100_000)
    factor: float = Field(default=0.9, gt=0, le=1)


class PruneRequest(_Request):
    """Drop old turns and tool calls, and low-confidence items unused as long."""

    days: int = Field(default=90, ge=0, le=100_000)
    min_confidence: float = Field(default=0.1, ge=0, le=1)


class PruneOut(BaseModel):
    turns: int
    tool_calls: int
    items: int


# the review queue -----------------------------------------------------------------------
class FindingIn(_Request):
    """Something to propose remembering (``ledgermem.types.Finding``)."""

    content: str = Field(min_length=1)
    category: Category = "fact"
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1)
    sensitive: bool = False
    confidence: float = Field(default=0.4, ge=0, le=1)
    source: Source = "discovery"
    why: str = Field(default="", max_length=2_000, description="Where it was found, "
                     "shown to the reviewer.")
    key: str | None = Field(default=None, max_length=MAX_NAME_CHARS, description=(
        "What the finding is about, stable across scans: not proposed twice."))


class ProposeRequest(_Request):
    """Findings for the review queue; nothing becomes knowledge until approved."""

    findings: list[FindingIn] = Field(min_length=1, max_length=MAX_LIMIT)
    proposer: str = Field(default="api", min_length=1, max_length=MAX_NAME_CHARS)


class ProposalOut(_Response):
    """A finding in the review queue (``ledgermem.types.Proposal``)."""

    id: str
    content: str
    category: str
    context: str
    source: str
    confidence: float
    proposer: str
    proposed_at: str
    status: Literal["pending", "approved", "edited", "rejected"]
    entity: str | None
    sensitive: bool
    why: str
    key: str | None
    decided_at: str | None
    item_id: str | None
    changes: dict[str, Any]


class ApproveRequest(_Request):
    """Pending proposals to approve, and the fields changed per proposal."""

    ids: list[str] | Literal["all"] = Field(description='Proposal ids, or "all" pending.')
    edits: dict[str, dict[str, Any]] | None = Field(default=None, description=(
        "Proposal id → the fields the reviewer changes (content, category, context, "
        "entity, sensitive, confidence)."))


class RejectRequest(_Request):
    """Pending proposals to reject: no item is made and their text is blanked."""

    ids: list[str] | Literal["all"]


class EditApproveRequest(_Request):
    """Approve one proposal with changes (null: as proposed; "" clears the entity)."""

    content: str | None = Field(default=None, min_length=1)
    category: Category | None = None
    context: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    entity: str | None = Field(default=None, max_length=2 * MAX_NAME_CHARS + 1)
    sensitive: bool | None = None
    confidence: float | None = Field(default=None, ge=0, le=1)


class ResetDiscoveryOut(BaseModel):
    """What undoing the discovery bootstrap removed."""

    items: int
    proposals: int


# keys and users ---------------------------------------------------------------------------
class PrincipalOut(BaseModel):
    """Who the presented key speaks for."""

    key_id: str
    user: str | None
    agent: str | None
    admin: bool
    acting_for: str | None = Field(description="The user this request acts for (the "
                                   "key's own, or the admin's X-Ledgermem-User).")


class KeyInfoOut(_Response):
    """An API key, without the key itself."""

    key_id: str
    user: str | None
    agent: str | None
    label: str
    admin: bool
    created_at: str
    revoked_at: str | None
    active: bool


class CreatedKeyOut(BaseModel):
    """A new key: ``key`` is shown this once (only its hash is kept)."""

    key: str
    info: KeyInfoOut


class CreateKeyRequest(_Request):
    """A key for a user, optionally bound to one agent."""

    user: str = _name()
    agent: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    label: str = Field(default="", max_length=200)


class OwnKeyRequest(_Request):
    """Another key for the caller's own user, optionally bound to one agent."""

    agent: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    label: str = Field(default="", max_length=200)


class CreateUserRequest(_Request):
    """A new user: its first key is made and returned."""

    user: str = _name()
    label: str = Field(default="", max_length=200)


class UserOut(BaseModel):
    """A user the server knows: one with memory, or with a key."""

    user: str
    events: int
    items: int
    turns: int
    tool_calls: int
    live_keys: int


class ForgetUserOut(BaseModel):
    """What erasing a user removed."""

    events_removed: int
    keys_revoked: int


class HealthOut(BaseModel):
    """The server answers and its database does."""

    status: Literal["ok"]
    version: str
