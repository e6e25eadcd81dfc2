"""Isolation across API keys, on every route and both stores: bob's key, given alice's
ids, gets 404; its lists are empty; nothing of alice's changes; naming alice in
``X-Ledgermem-User`` is refused; admin routes refuse a user key. A route added to the
app without a case here fails ``test_every_route_has_an_isolation_case``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ledgermem import Memory
from tests.server_support import Api, Response, app_over
from tests.support import FakeClock, user_rows

Check = Callable[[Response], bool]


def status(code: int) -> Check:
    return lambda r: r.status_code == code


def empty(r: Response) -> bool:
    return r.status_code == 200 and r.json() in ([], {"count": 0})


def no_hits_of_alice(r: Response) -> bool:
    return r.status_code in (200, 201) and "alice" not in r.text.replace("alice:", "")


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    """With ``{item}``, ``{event}``, ``{key}``, ``{user}``, ``{proposal}`` standing for
    alice's ids (in ``kwargs`` too)."""
    check: Check
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def template(self) -> str:
        return (self.path.split("?")[0].replace("{item}", "{item_id}")
                .replace("{proposal}", "{proposal_id}")
                .replace("{key}", "{key_id}").replace("{user}", "{user_id}")
                .replace("/miller/", "/{agent_id}/"))


CASES = [
    # knowledge
    Case("POST", "/v1/memories", status(201), {"json": {"content": "Bob's own note"}}),
    Case("POST", "/v1/memories/batch", lambda r: r.status_code == 201 and [
        (i["user_id"], i["written"]) for i in r.json()["items"]] == [("bob", "merged")],
        {"json": {"items": [{"content": "Bob's own note"}]}}),  # merged into his own note
    Case("GET", "/v1/memories", lambda r: r.json()["total"] == 1),  # bob's own note only
    Case("DELETE", "/v1/memories", lambda r: r.json() == {"count": 0},
         {"params": {"source": "tool"}}),
    Case("GET", "/v1/memories/upcoming", empty),
    Case("POST", "/v1/memories/search", empty, {"json": {"query": "Sarah manager"}}),
    Case("POST", "/v1/search", empty, {"json": {"query": "Sarah table weather"}}),
    Case("GET", "/v1/memories/{item}", status(404)),
    Case("GET", "/v1/memories/{item}?as_of=tomorrow", status(404)),
    Case("PATCH", "/v1/memories/{item}", status(404), {"json": {"confidence": 0.1}}),
    Case("DELETE", "/v1/memories/{item}", status(404)),
    Case("POST", "/v1/memories/{item}/revise", status(404), {"json": {"content": "x"}}),
    Case("POST", "/v1/memories/{item}/invalidate", status(404)),
    Case("POST", "/v1/memories/{item}/restore", status(404)),
    Case("POST", "/v1/memories/{item}/reminded", status(404)),
    Case("GET", "/v1/memories/{item}/history", status(404)),
    # conversations
    Case("POST", "/v1/turns", no_hits_of_alice,
         {"json": {"session_id": "alice:web", "turns": [{"role": "user", "content": "hi"}]}}),
    Case("GET", "/v1/turns", lambda r: [t["user_id"] for t in r.json()] == ["bob"],
         {"params": {"session_id": "alice:web"}}),
    Case("GET", "/v1/turns/recent", lambda r: {t["user_id"] for t in r.json()} == {"bob"}),
    Case("POST", "/v1/turns/search", empty, {"json": {"query": "table"}}),
    Case("GET", "/v1/sessions", lambda r: [s["turns"] for s in r.json()] == [1]),
    # tool calls
    Case("GET", "/v1/tool-calls/errors", empty),
    Case("GET", "/v1/tool-calls/summary", empty),
    Case("POST", "/v1/tool-calls", no_hits_of_alice, {"json": {"name": "weather"}}),
    # events and views
    Case("GET", "/v1/events", empty),
    Case("GET", "/v1/events?after_event={event}", status(404)),
    Case("POST", "/v1/events", status(201), {"json": {"kind": "bob.spoke"}}),
    Case("GET", "/v1/agents/miller/episodic", lambda r: all(
        e["user_id"] == "bob" for e in r.json())),
    Case("GET", "/v1/agents/miller/episodic?as_of={event}", status(404)),
    Case("GET", "/v1/agents/miller/salient?query=flour", empty),
    Case("GET", "/v1/agents/miller/reflection-due", lambda r: r.json() == {"due": False}),
    Case("POST", "/v1/agents/miller/reflect", lambda r: r.json() == {"event": None}),
    Case("GET", "/v1/agents/miller/beliefs", empty),
    # the review queue
    Case("GET", "/v1/proposals", empty),
    Case("GET", "/v1/proposals/{proposal}", status(404)),
    Case("POST", "/v1/proposals/approve", status(404), {"json": {"ids": ["{proposal}"]}}),
    Case("POST", "/v1/proposals/{proposal}/edit", status(404), {"json": {"content": "x"}}),
    Case("POST", "/v1/proposals/reject", status(404), {"json": {"ids": ["{proposal}"]}}),
    Case("POST", "/v1/proposals/approve", lambda r: r.json() == [], {"json": {"ids": "all"}}),
    Case("POST", "/v1/proposals/reset-discovery", lambda r: r.json() == {
        "items": 0, "proposals": 0}),
    Case("POST", "/v1/proposals", status(201), {"json": {"findings": [{"content": "b"}]}}),
    # observability
    Case("GET", "/v1/stats", lambda r: (r.json()["items"], r.json()["turns"]) == (1, 1)),
    Case("GET", "/v1/status", lambda r: r.json()["extraction"]["pending"] == 0),
    Case("GET", "/v1/timeline", lambda r: sum(row["count"] for row in r.json()) <= 6),
    Case("GET", "/v1/entities", empty),
    Case("GET", "/v1/contexts", lambda r: [f["value"] for f in r.json()] in ([], ["global"])),
    Case("GET", "/v1/errors/recent", lambda r: r.json() == {"items": [], "tool_calls": []}),
    Case("GET", "/v1/llm-usage", empty),
    # maintenance
    Case("POST", "/v1/maintenance/run", status(200)),
    Case("POST", "/v1/maintenance/decay", empty),
    Case("POST", "/v1/maintenance/prune", lambda r: r.json() == {
        "turns": 0, "tool_calls": 0, "items": 0}),
    Case("POST", "/v1/maintenance/requeue-extraction", empty),
    Case("POST", "/v1/maintenance/flush", status(200)),
    Case("GET", "/v1/dashboard/maintenance", empty),
    # export: bob's ledger only
    Case("GET", "/v1/export", lambda r: r.status_code == 200
         and '"user_id":"alice"' not in r.text),
    # keys
    Case("GET", "/v1/me", lambda r: r.json()["acting_for"] == "bob"),
    Case("GET", "/v1/keys", lambda r: {k["user"] for k in r.json()} == {"bob"}),
    Case("POST", "/v1/keys", lambda r: r.status_code == 201
         and r.json()["info"]["user"] == "bob"),
    Case("DELETE", "/v1/keys/{key}", status(404)),
]
"""Bob's calls, in order (bob writes a little of his own on the way)."""

ADMIN_CASES = [
    Case("GET", "/v1/admin/users", status(403)),
    Case("POST", "/v1/admin/users", status(403), {"json": {"user": "mallory"}}),
    Case("DELETE", "/v1/admin/users/{user}", status(403)),
    Case("GET", "/v1/admin/keys", status(403)),
    Case("POST", "/v1/admin/keys", status(403), {"json": {"user": "alice"}}),
    Case("DELETE", "/v1/admin/keys/{key}", status(403)),
    Case("POST", "/v1/admin/maintenance", status(403)),
    Case("POST", "/v1/admin/rebuild", status(403)),
    Case("POST", "/v1/admin/verify", status(403)),
    Case("GET", "/v1/admin/export", status(403)),
    Case("GET", "/metrics", status(403)),
]
UNSCOPED = {("GET", "/healthz")}
"""Routes that act for no user."""


@dataclass
class Alice:
    item: str
    event: str
    key: str
    proposal: str


def alice_writes(api: Api, clock: FakeClock) -> Alice:
    item = api.ok("POST", "/v1/memories", api.alice, 201, json={
        "content": "Sarah is her manager", "entity": "person:sarah", "context": "work",
        "due_at": "in 2 days", "category": "reminder"})
    api.ok("POST", "/v1/memories", api.alice, 201, json={"content": "From a tool",
                                                         "source": "tool"})
    api.ok("POST", "/v1/turns", api.alice, 201, json={
        "session_id": "alice:web", "infer": True,
        "turns": [{"role": "user", "content": "Book a table for two"}]})
    api.ok("POST", "/v1/tool-calls", api.alice, 201, json={"name": "weather",
                                                           "error": "timeout"})
    event = None
    for n in range(12):  # enough for the miller to be due a reflection
        clock.advance(minutes=1)
        event = api.ok("POST", "/v1/events", api.alice, 201, json={
            "kind": "agent.spoke", "agent_id": "miller", "visibility": "global",
            "payload": {"text": f"flour delivery {n}"}})
    assert event is not None
    key = api.ok("POST", "/v1/keys", api.alice, 201, json={"label": "spare"})
    clock.advance(days=31)  # alice's memory decays: maintenance in her ledger
    assert api.ok("POST", "/v1/maintenance/decay", api.alice)["count"] >= 1
    [proposal] = api.ok("POST", "/v1/proposals", api.alice, 201, json={
        "findings": [{"content": "Alice uses Emacs", "key": "app:emacs"}]})
    return Alice(item["id"], event["id"], key["info"]["key_id"], proposal["id"])


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def _fill(value: Any, alice: Alice) -> Any:
    """``value`` with alice's ids in place of ``{item}``, ``{proposal}``…"""
    if isinstance(value, str):
        return value.format(item=alice.item, event=alice.event, key=alice.key,
                            user="alice", proposal=alice.proposal)
    if isinstance(value, list):
        return [_fill(v, alice) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, alice) for k, v in value.items()}
    return value


def _path(case: Case, alice: Alice) -> str:
    return str(_fill(case.path, alice))


def test_every_route_has_an_isolation_case(api: Api) -> None:
    paths = api.app.openapi()["paths"]
    routes = {(method.upper(), path) for path, operations in paths.items()
              for method in operations}
    covered = {(c.method, c.template) for c in CASES + ADMIN_CASES} | UNSCOPED
    assert routes - covered == set()
    assert covered - routes == set()


def test_another_users_key_sees_and_changes_nothing_of_alice(
        api: Api, mem: Memory, clock: FakeClock) -> None:
    alice = alice_writes(api, clock)
    mem.flush()
    before = user_rows(mem, "alice")
    failed = []
    for case in CASES + ADMIN_CASES:
        response = api.call(case.method, _path(case, alice), api.bob,
                            **_fill(case.kwargs, alice))
        if response.status_code >= 500 or not case.check(response):
            failed.append(f"{case.method} {case.path}: {response.status_code} "
                          f"{response.text[:300]}")
    assert failed == []
    mem.flush()
    assert user_rows(mem, "alice") == before
    assert api.ok("GET", f"/v1/memories/{alice.item}", api.alice)["id"] == alice.item


def test_a_user_key_cannot_act_for_another_user(api: Api, clock: FakeClock) -> None:
    alice = alice_writes(api, clock)
    wrong = []
    for case in CASES:
        response = api.call(case.method, _path(case, alice), api.bob, user="alice",
                            **_fill(case.kwargs, alice))
        if response.status_code != 403:
            wrong.append(f"{case.method} {case.path}: {response.status_code}")
    assert wrong == []
    # naming oneself is allowed
    assert api.call("GET", "/v1/stats", api.bob, user="bob").status_code == 200
