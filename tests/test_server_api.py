"""Every REST route in process (FastAPI's TestClient over the ASGI app), on both stores:
each answers what the Python API answers, in the documented shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermem import Memory
from ledgermem.server.app import ServerSettings
from tests.server_support import Api, app_over
from tests.support import FakeClock


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def remember(api: Api, key: str, content: str, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = api.ok("POST", "/v1/memories", key, 201,
                                  json={"content": content, **fields})
    return item


# knowledge ----------------------------------------------------------------------------
def test_remember_get_and_list(api: Api, mem: Memory) -> None:
    item = remember(api, api.alice, "Prefers green tea over coffee", category="preference",
                    context="personal", entity="drink:tea", metadata={"from": "rest"})
    assert item["written"] == "added" and item["user_id"] == "alice" and item["active"]
    assert mem.for_user("alice").get(item["id"]).content == "Prefers green tea over coffee"
    again = remember(api, api.alice, "Prefers green tea over coffee", category="preference",
                     context="personal", entity="drink:tea")
    assert (again["id"], again["written"]) == (item["id"], "merged")
    got = api.ok("GET", f"/v1/memories/{item['id']}", api.alice)
    assert (got["content"], got["metadata"], got["written"]) == (
        item["content"], {"from": "rest"}, None)
    for n in range(4):
        remember(api, api.alice, f"Fact number {n} about the garden shed", dedup=False)
    page = api.ok("GET", "/v1/memories", api.alice,
                  params={"category": "fact", "limit": 2, "offset": 1, "sort": "created_at",
                          "order": "asc"})
    assert page["total"] == 4 and page["offset"] == 1 and page["limit"] == 2
    assert [i["content"] for i in page["items"]] == [
        "Fact number 1 about the garden shed", "Fact number 2 about the garden shed"]
    by_entity = api.ok("GET", "/v1/memories", api.alice, params={"entity": "drink:tea"})
    assert [i["id"] for i in by_entity["items"]] == [item["id"]]


def test_update_changes_only_the_fields_given_and_null_clears(api: Api) -> None:
    item = remember(api, api.alice, "Works at the port", entity="org:port", domain="work",
                    confidence=0.5)
    changed = api.ok("PATCH", f"/v1/memories/{item['id']}", api.alice,
                     json={"confidence": 0.9, "entity": None})
    assert (changed["confidence"], changed["entity"], changed["domain"], changed["content"]) \
        == (0.9, None, "work", "Works at the port")
    assert changed["id"] == item["id"]


def test_revise_invalidate_restore_and_history(api: Api, clock: FakeClock) -> None:
    item = remember(api, api.alice, "Lives in Lisbon", entity="person:alice")
    clock.advance(days=1)
    new = api.ok("POST", f"/v1/memories/{item['id']}/revise", api.alice, 201,
                 json={"content": "Lives in Porto", "reason": "moved"})
    assert new["id"] != item["id"] and new["entity"] == "person:alice"
    old = api.ok("GET", f"/v1/memories/{item['id']}", api.alice)
    assert old["superseded_by"] == new["id"] and not old["active"]
    before = api.ok("GET", f"/v1/memories/{item['id']}", api.alice,
                    params={"as_of": item["created_at"]})
    assert before["active"] and before["content"] == "Lives in Lisbon"
    clock.advance(days=1)
    gone = api.ok("POST", f"/v1/memories/{new['id']}/invalidate", api.alice,
                  json={"reason": "left Portugal"})
    assert gone["valid_to"] is not None and not gone["active"]
    back = api.ok("POST", f"/v1/memories/{new['id']}/restore", api.alice)
    assert back["active"]
    kinds = [e["kind"] for e in api.ok("GET", f"/v1/memories/{new['id']}/history", api.alice)]
    assert kinds[0] == "memory.added" and len(kinds) >= 4
    assert any(e["payload"].get("reason") == "moved" for e in
               api.ok("GET", f"/v1/memories/{item['id']}/history", api.alice))


def test_revise_keeps_fields_left_out_and_null_clears(api: Api) -> None:
    item = remember(api, api.alice, "Climbs with Dana", entity="person:dana", domain="sport",
                    due_at="2026-12-01")
    kept = api.ok("POST", f"/v1/memories/{item['id']}/revise", api.alice, 201,
                  json={"content": "Climbs with Dana on Thursdays", "confidence": 0.4})
    assert (kept["entity"], kept["domain"], kept["due_at"], kept["confidence"]) \
        == ("person:dana", "sport", item["due_at"], 0.4)
    cleared = api.ok("POST", f"/v1/memories/{kept['id']}/revise", api.alice, 201,
                     json={"content": "Climbs alone", "entity": None, "due_at": None})
    assert (cleared["entity"], cleared["domain"], cleared["due_at"]) == (None, "sport", None)
    refused = api.call("POST", f"/v1/memories/{cleared['id']}/revise", api.alice,
                       json={"content": "Climbs", "category": None})
    assert refused.status_code == 422 and "category" in refused.text
    assert api.ok("GET", f"/v1/memories/{cleared['id']}", api.alice)["active"]


def test_forget_and_forget_many(api: Api, mem: Memory) -> None:
    item = remember(api, api.alice, "A secret to forget")
    assert api.call("DELETE", f"/v1/memories/{item['id']}", api.alice).status_code == 204
    assert api.call("GET", f"/v1/memories/{item['id']}", api.alice).status_code == 404
    history = api.ok("GET", f"/v1/memories/{item['id']}/history", api.alice)
    assert "A secret to forget" not in json.dumps(history)
    remember(api, api.alice, "From a tool", source="tool")
    remember(api, api.alice, "From the user")
    assert api.ok("DELETE", "/v1/memories", api.alice, params={"source": "tool"}) == {"count": 1}
    for params in ({}, {"source": "user", "all": "true"}):
        assert api.call("DELETE", "/v1/memories", api.alice,
                        params=params).status_code == 422
    assert api.ok("DELETE", "/v1/memories", api.alice, params={"all": "true"}) == {"count": 1}
    assert mem.for_user("alice").all_knowledge()["total"] == 0


def test_upcoming_and_reminded(api: Api) -> None:
    item = remember(api, api.alice, "Dentist appointment", category="reminder",
                    due_at="in 2 days")
    assert [i["id"] for i in api.ok("GET", "/v1/memories/upcoming", api.alice)] == [item["id"]]
    assert api.ok("GET", "/v1/memories/upcoming", api.alice, params={"days": 1}) == []
    marked = api.ok("POST", f"/v1/memories/{item['id']}/reminded", api.alice)
    assert marked["reminded_at"] is not None
    assert api.ok("GET", "/v1/memories/upcoming", api.alice) == []


def test_search_with_filters_and_as_of(api: Api, clock: FakeClock, mem: Memory) -> None:
    tea = remember(api, api.alice, "Drinks green tea every morning", context="home")
    remember(api, api.alice, "Drinks coffee at work", context="work")
    hits = api.ok("POST", "/v1/memories/search", api.alice,
                  json={"query": "drinks", "context": "home", "touch": False})
    assert [h["item"]["id"] for h in hits] == [tea["id"]]
    assert hits[0]["turn"] is None and "keyword_rank" in hits[0]["why"]
    clock.advance(days=1)
    api.ok("POST", f"/v1/memories/{tea['id']}/revise", api.alice, 201,
           json={"content": "Drinks rooibos every morning"})
    now = api.ok("POST", "/v1/memories/search", api.alice,
                 json={"query": "green tea", "touch": False})
    assert all(h["item"]["content"] != tea["content"] for h in now)
    then = api.ok("POST", "/v1/memories/search", api.alice,
                  json={"query": "green tea", "as_of": tea["created_at"]})
    assert [h["item"]["content"] for h in then] == ["Drinks green tea every morning"]
    everything = api.ok("POST", "/v1/memories/search", api.alice,
                        json={"query": "green tea", "include_superseded": True, "top_k": 1})
    assert len(everything) == 1
    api.ok("POST", "/v1/memories/search", api.alice, json={"query": "morning"})
    mem.flush()  # the recall bookkeeping of the default search is applied
    assert mem.for_user("alice").all_knowledge()["items"][0].use_count >= 1


def test_search_all_finds_items_and_turns(api: Api) -> None:
    remember(api, api.alice, "Her kayak is orange")
    api.ok("POST", "/v1/turns", api.alice, 201,
           json={"turns": [{"role": "user", "content": "I took the kayak out on Sunday"}]})
    hits = api.ok("POST", "/v1/search", api.alice, json={"query": "kayak", "touch": False})
    assert {("item" if h["item"] else "turn") for h in hits} == {"item", "turn"}


# conversations ------------------------------------------------------------------------
def test_turns_sessions_history_and_search(api: Api) -> None:
    kept = api.ok("POST", "/v1/turns", api.alice, 201, json={
        "session_id": "alice:web", "turns": [
            {"role": "user", "content": "Book a table for two", "name": "Alice"},
            {"role": "assistant", "content": "Done: 8pm at Rosa's", "metadata": {"n": 1}}]})
    assert [t["role"] for t in kept] == ["user", "assistant"]
    assert kept[0]["session_id"] == "alice:web" and kept[1]["metadata"] == {"n": 1}
    api.ok("POST", "/v1/turns", api.alice, 201,
           json={"turns": [{"role": "user", "content": "hello", "at": "yesterday"}]})
    history = api.ok("GET", "/v1/turns", api.alice, params={"session_id": "alice:web"})
    assert [t["content"] for t in history] == ["Book a table for two", "Done: 8pm at Rosa's"]
    assert [t["content"] for t in api.ok("GET", "/v1/turns", api.alice)] == ["hello"]
    recent = api.ok("GET", "/v1/turns/recent", api.alice, params={"limit": 2})
    assert [t["content"] for t in recent] == ["Done: 8pm at Rosa's", "Book a table for two"]
    sessions = api.ok("GET", "/v1/sessions", api.alice)
    assert {s["session_id"]: s["turns"] for s in sessions} == {"alice:web": 2,
                                                               "alice:default": 1}
    found = api.ok("POST", "/v1/turns/search", api.alice, json={"query": "table"})
    assert found[0]["turn"]["content"] == "Book a table for two"  # (neighbours rank next)
    timed = api.ok("POST", "/v1/turns/search", api.alice,
                   json={"session_id": "alice:default", "limit": 5})
    assert [h["turn"]["content"] for h in timed] == ["hello"]


def test_turns_queued_for_extraction_wait_without_an_llm(api: Api) -> None:
    api.ok("POST", "/v1/turns", api.alice, 201, json={
        "infer": True, "turns": [{"role": "user", "content": "I moved to Porto"}]})
    status = api.ok("GET", "/v1/status", api.alice)
    assert status["extraction"]["pending"] == 1 and status["mode"] == "none"
    assert "extraction" in status["skipped"]


# tool calls ----------------------------------------------------------------------------
def test_tool_calls_errors_and_summary(api: Api) -> None:
    ok = api.ok("POST", "/v1/tool-calls", api.alice, 201, json={
        "name": "weather", "arguments": {"city": "Porto"}, "duration_ms": 12.5})
    assert ok["success"] and ok["arguments"] == {"city": "Porto"}
    failed = api.ok("POST", "/v1/tool-calls", api.alice, 201, json={
        "name": "weather", "error": "timeout", "duration_ms": 30000})
    assert not failed["success"]
    errors = api.ok("GET", "/v1/tool-calls/errors", api.alice, params={"name": "weather"})
    assert [e["id"] for e in errors] == [failed["id"]]
    [summary] = api.ok("GET", "/v1/tool-calls/summary", api.alice)
    assert (summary["name"], summary["calls"], summary["failures"], summary["success_rate"]) \
        == ("weather", 2, 1, 0.5)
    recent = api.ok("GET", "/v1/errors/recent", api.alice)
    assert [c["id"] for c in recent["tool_calls"]] == [failed["id"]]
    assert [i["content"] for i in recent["items"]] == ["Tool weather failed: timeout"]
    contradiction = api.call("POST", "/v1/tool-calls", api.alice,
                             json={"name": "x", "success": True, "error": "boom"})
    assert contradiction.status_code == 422


# events and views -----------------------------------------------------------------------
def test_events_and_views(api: Api, clock: FakeClock) -> None:
    said = []
    for n, (agent, visibility) in enumerate([("miller", "private"), ("baker", "global"),
                                             ("miller", "private")]):
        clock.advance(minutes=1)
        said.append(api.ok("POST", "/v1/events", api.alice, 201, json={
            "kind": "agent.spoke", "payload": {"text": f"line {n} about flour"},
            "agent_id": agent, "visibility": visibility}))
    assert said[0]["agent_id"] == "miller" and said[1]["visibility"] == "global"
    listed = api.ok("GET", "/v1/events", api.alice, params={"kind": ["agent.spoke"]})
    assert [e["id"] for e in listed] == [e["id"] for e in said]
    after = api.ok("GET", "/v1/events", api.alice, params={"after_event": said[0]["id"]})
    assert [e["id"] for e in after] == [said[1]["id"], said[2]["id"]]
    mine = api.ok("GET", "/v1/events", api.alice, params={"agent_id": "baker"})
    assert [e["id"] for e in mine] == [said[1]["id"]]
    seen = api.ok("GET", "/v1/agents/miller/episodic", api.alice)
    assert [e["id"] for e in seen] == [e["id"] for e in said]
    baker = api.ok("GET", "/v1/agents/baker/episodic", api.alice)
    assert [e["id"] for e in baker] == [said[1]["id"]]  # the miller's are private
    earlier = api.ok("GET", "/v1/agents/miller/episodic", api.alice,
                     params={"as_of": said[1]["id"], "n": 5})
    assert [e["id"] for e in earlier] == [said[0]["id"], said[1]["id"]]
    salient = api.ok("GET", "/v1/agents/miller/salient", api.alice,
                     params={"query": "flour", "k": 2})
    assert len(salient) == 2
    assert api.ok("GET", "/v1/agents/miller/reflection-due", api.alice) == {"due": False}
    assert api.ok("POST", "/v1/agents/miller/reflect", api.alice) == {"event": None}
    assert api.ok("GET", "/v1/agents/miller/beliefs", api.alice) == []
    reserved = api.call("POST", "/v1/events", api.alice, json={"kind": "memory.added"})
    assert reserved.status_code == 422


# the review queue -----------------------------------------------------------------------
def test_the_review_queue(api: Api, mem: Memory) -> None:
    made = api.ok("POST", "/v1/proposals", api.alice, 201, json={"proposer": "scanner",
                                                                "findings": [
        {"content": "Uses Emacs", "category": "skill", "why": "~/.emacs.d",
         "key": "app:emacs"},
        {"content": "Works on acme/widgets", "why": "git remote"},
        {"content": "Reads about gardening", "why": "bookmarks"}]})
    assert [p["status"] for p in made] == ["pending"] * 3 and made[0]["proposer"] == "scanner"
    again = api.ok("POST", "/v1/proposals", api.alice, 201, json={"findings": [
        {"content": "Uses Emacs daily", "key": "app:emacs"}]})
    assert again[0]["id"] == made[0]["id"]  # the same key is not queued twice
    assert mem.for_user("alice").all_knowledge()["total"] == 0  # nothing stored yet
    assert len(api.ok("GET", "/v1/proposals", api.alice)) == 3
    approved = api.ok("POST", "/v1/proposals/approve", api.alice,
                      json={"ids": [made[0]["id"]]})
    item = api.ok("GET", f"/v1/memories/{approved[0]['item_id']}", api.alice)
    assert item["content"] == "Uses Emacs"
    edited = api.ok("POST", f"/v1/proposals/{made[1]['id']}/edit", api.alice,
                    json={"content": "Maintains acme/widgets"})
    assert edited["status"] == "edited" and edited["changes"]["content"]
    rejected = api.ok("POST", "/v1/proposals/reject", api.alice, json={"ids": "all"})
    assert [p["id"] for p in rejected] == [made[2]["id"]]
    assert "gardening" not in json.dumps(rejected)  # the text is blanked
    assert api.ok("GET", f"/v1/proposals/{made[2]['id']}", api.alice)["status"] == "rejected"
    assert len(api.ok("GET", "/v1/proposals", api.alice, params={"status": "decided"})) == 3
    assert api.ok("POST", "/v1/proposals/reset-discovery", api.alice) == {
        "items": 2, "proposals": 0}  # the two approved discovery items
    assert mem.for_user("alice").all_knowledge()["total"] == 0
    bound = api.ok("POST", "/v1/keys", api.alice, 201, json={"agent": "scout"})["key"]
    assert api.call("POST", "/v1/proposals/reject", bound, json={"ids": "all"}
                    ).status_code == 403  # a person decides, not an agent


# observability ----------------------------------------------------------------------------
def test_stats_status_timeline_entities_contexts_and_llm_usage(api: Api,
                                                              clock: FakeClock) -> None:
    remember(api, api.alice, "Sarah is her manager", entity="person:sarah", context="work")
    remember(api, api.alice, "Sarah likes jazz", entity="person:sarah", context="work")
    remember(api, api.alice, "Plays chess", context="personal")
    stats = api.ok("GET", "/v1/stats", api.alice)
    assert (stats["items"], stats["events"], stats["by_category"]) == (3, 3, {"fact": 3})
    assert stats["llm"] is None and stats["llm_calls"] is None
    assert api.ok("GET", "/v1/status", api.alice)["embedding"] == {"pending": 3}
    assert api.ok("GET", "/v1/timeline", api.alice) == [
        {"day": clock.iso()[:10], "kind": "memory.added", "count": 3}]
    assert api.ok("GET", "/v1/entities", api.alice) == [{"value": "person:sarah", "count": 2}]
    assert api.ok("GET", "/v1/contexts", api.alice) == [
        {"value": "work", "count": 2}, {"value": "personal", "count": 1}]
    assert api.ok("GET", "/v1/llm-usage", api.alice) == []


# maintenance --------------------------------------------------------------------------
def test_maintenance_routes(api: Api, clock: FakeClock) -> None:
    remember(api, api.alice, "An old fact nobody uses")
    api.ok("POST", "/v1/turns", api.alice, 201,
           json={"turns": [{"role": "user", "content": "an old message"}]})
    clock.advance(days=31)
    assert api.ok("POST", "/v1/maintenance/decay", api.alice) == {"count": 1}
    assert api.ok("POST", "/v1/maintenance/decay", api.alice,
                  json={"unused_days": 30, "factor": 0.5}) == {"count": 0}  # once a period
    result = api.ok("POST", "/v1/maintenance/run", api.alice)
    assert set(result) >= {"decay", "reconcile", "consolidate", "prune", "skipped"}
    assert "consolidate" in result["skipped"]
    clock.advance(days=100)
    pruned = api.ok("POST", "/v1/maintenance/prune", api.alice,
                    json={"days": 90, "min_confidence": 0.1})
    assert pruned["turns"] == 1
    assert api.ok("POST", "/v1/maintenance/requeue-extraction", api.alice) == {"count": 0}
    assert api.ok("POST", "/v1/maintenance/flush", api.alice) == {"count": 0}


# export -----------------------------------------------------------------------------
def _records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_export_of_a_user_and_of_everyone(api: Api, mem: Memory) -> None:
    remember(api, api.alice, "Alice's fact")
    remember(api, api.bob, "Bob's fact")
    response = api.call("GET", "/v1/export", api.alice)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    records = _records(response.text)
    assert records[0]["format"] == "ledgermem-export"
    assert {r["user_id"] for r in records if r.get("type") == "event"} == {"alice"}
    assert records[-1] == {"type": "end", "events": 1, "vectors": 0}
    everyone = _records(api.call("GET", "/v1/admin/export", api.admin).text)
    assert {r["user_id"] for r in everyone if r.get("type") == "event"} == {"alice", "bob"}
    assert api.call("GET", "/v1/export", api.admin).status_code == 422  # for whom?
    assert api.call("GET", "/v1/export", api.admin, user="bob").status_code == 200
    nobody = api.call("GET", "/v1/export", api.admin, user="carol")
    assert nobody.status_code == 404 and str(mem.store.url) not in nobody.text


# keys -------------------------------------------------------------------------------
def test_me_and_a_users_own_keys(api: Api) -> None:
    me = api.ok("GET", "/v1/me", api.alice)
    assert (me["user"], me["admin"], me["acting_for"], me["agent"]) == (
        "alice", False, "alice", None)
    admin = api.ok("GET", "/v1/me", api.admin)
    assert (admin["admin"], admin["acting_for"]) == (True, None)
    assert api.ok("GET", "/v1/me", api.admin, user="bob")["acting_for"] == "bob"
    made = api.ok("POST", "/v1/keys", api.alice, 201,
                  json={"agent": "miller", "label": "the miller"})
    assert (made["info"]["user"], made["info"]["agent"]) == ("alice", "miller")
    bound = made["key"]
    assert api.ok("GET", "/v1/me", bound)["agent"] == "miller"
    assert api.call("GET", "/v1/keys", bound).status_code == 403  # a bound key manages none
    labels = [k["label"] for k in api.ok("GET", "/v1/keys", api.alice)]
    assert sorted(labels) == ["alice's", "the miller"]
    assert api.call("DELETE", f"/v1/keys/{made['info']['key_id']}",
                    api.alice).status_code == 204
    assert api.call("GET", "/v1/me", bound).status_code == 401


def test_an_agent_bound_key_records_and_reads_as_its_agent(api: Api) -> None:
    bound = api.ok("POST", "/v1/keys", api.alice, 201, json={"agent": "miller"})["key"]
    event = api.ok("POST", "/v1/events", bound, 201, json={"kind": "agent.spoke"})
    assert event["agent_id"] == "miller"
    assert api.call("POST", "/v1/events", bound,
                    json={"kind": "agent.spoke", "agent_id": "baker"}).status_code == 403
    assert api.call("GET", "/v1/agents/baker/episodic", bound).status_code == 403
    assert api.ok("GET", "/v1/agents/miller/episodic", bound)[0]["id"] == event["id"]
    item = remember(api, bound, "The mill wheel squeaks")
    assert item["agent_id"] == "miller"
    assert api.call("GET", "/v1/export", bound).status_code == 403
    assert api.call("DELETE", "/v1/memories", bound, params={"all": "true"}).status_code == 403


# admin ------------------------------------------------------------------------------
def test_admin_users_and_keys(api: Api, mem: Memory) -> None:
    remember(api, api.alice, "Alice's fact")
    made = api.ok("POST", "/v1/admin/users", api.admin, 201, json={"user": "carol"})
    assert made["info"]["user"] == "carol"
    assert api.call("POST", "/v1/admin/users", api.admin,
                    json={"user": "carol"}).status_code == 409
    assert api.call("POST", "/v1/admin/users", api.admin,
                    json={"user": "alice"}).status_code == 409
    users = {u["user"]: u for u in api.ok("GET", "/v1/admin/users", api.admin)}
    assert set(users) == {"alice", "bob", "carol"}
    assert (users["alice"]["items"], users["alice"]["live_keys"]) == (1, 1)
    carol = made["key"]
    remember(api, carol, "Carol's fact")
    second = api.ok("POST", "/v1/admin/keys", api.admin, 201,
                    json={"user": "carol", "agent": "bot", "label": "bot"})
    listed = api.ok("GET", "/v1/admin/keys", api.admin, params={"user": "carol"})
    assert sorted(k["agent"] or "" for k in listed) == ["", "bot"]
    assert api.call("DELETE", f"/v1/admin/keys/{second['info']['key_id']}",
                    api.admin).status_code == 204
    assert api.call("GET", "/v1/me", second["key"]).status_code == 401
    erased = api.ok("DELETE", "/v1/admin/users/carol", api.admin)
    assert erased == {"events_removed": 1, "keys_revoked": 1}
    assert api.call("GET", "/v1/me", carol).status_code == 401
    assert mem.store.user_ids() == ["alice"]


def test_an_erased_user_is_gone_and_can_be_created_again(api: Api) -> None:
    first = api.ok("POST", "/v1/admin/users", api.admin, 201, json={"user": "carol"})
    remember(api, first["key"], "Carol's fact")
    api.ok("DELETE", "/v1/admin/users/carol", api.admin)
    users = {u["user"] for u in api.ok("GET", "/v1/admin/users", api.admin)}
    assert users == {"alice", "bob"}  # carol's revoked key makes no user
    again = api.ok("POST", "/v1/admin/users", api.admin, 201, json={"user": "carol"})
    assert api.ok("GET", "/v1/me", again["key"])["user"] == "carol"
    assert api.call("GET", "/v1/me", first["key"]).status_code == 401  # still revoked
    listed = {u["user"]: u for u in api.ok("GET", "/v1/admin/users", api.admin)}
    assert (listed["carol"]["live_keys"], listed["carol"]["items"]) == (1, 0)
    kept = api.ok("GET", "/v1/admin/keys", api.admin, params={"user": "carol"})
    assert [k["revoked_at"] is None for k in kept] == [False, True]  # the record stays
    api.ok("DELETE", f"/v1/admin/keys/{again['info']['key_id']}", api.admin, 204)
    assert "carol" not in {u["user"] for u in api.ok("GET", "/v1/admin/users", api.admin)}
    api.ok("POST", "/v1/admin/users", api.admin, 201, json={"user": "carol"})


def test_admin_acts_for_a_named_user(api: Api) -> None:
    item = api.ok("POST", "/v1/memories", api.admin, 201, user="alice",
                  json={"content": "Written by the admin for alice"})
    assert item["user_id"] == "alice"
    assert api.ok("GET", f"/v1/memories/{item['id']}", api.alice)["id"] == item["id"]
    missing = api.call("GET", "/v1/memories", api.admin)
    assert missing.status_code == 422 and "X-Ledgermem-User" in missing.json()["error"][
        "message"]


def test_admin_maintenance_rebuild_and_verify(api: Api) -> None:
    remember(api, api.alice, "Alice's fact")
    remember(api, api.bob, "Bob's fact")
    assert api.ok("POST", "/v1/admin/maintenance", api.admin)["users"] == 2
    assert api.ok("POST", "/v1/admin/rebuild", api.admin) == {"status": "rebuilt"}
    report = api.ok("POST", "/v1/admin/verify", api.admin)
    assert report["problems"] == [] and report["users"] == 2
    for path in ("/v1/admin/users", "/v1/admin/keys"):
        assert api.call("GET", path, api.alice).status_code == 403


# server -----------------------------------------------------------------------------
def test_health_needs_no_key_and_metrics_the_admin_key(api: Api) -> None:
    health = api.ok("GET", "/healthz", None)  # type: ignore[arg-type]
    assert health["status"] == "ok"
    assert api.call("GET", "/metrics", None).status_code == 401
    assert api.call("GET", "/metrics", api.alice).status_code == 403
    metrics = api.call("GET", "/metrics", api.admin)
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith(
        "text/plain")
    assert "ledgermem_http_requests_total" in metrics.text


def test_public_metrics_and_the_dashboard_folder(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<h1>ledgermem dashboard</h1>")
    settings = ServerSettings(rate_limit=None, public_metrics=True, dashboard_dir=tmp_path)
    with app_over(mem, settings) as api:
        assert api.call("GET", "/metrics", None).status_code == 200
        page = api.call("GET", "/", None)
        assert page.status_code == 200 and "ledgermem dashboard" in page.text
        assert api.call("GET", "/v1/stats", api.alice).status_code == 200


def test_without_a_dashboard_the_root_sends_to_the_docs(mem: Memory, tmp_path: Path) -> None:
    with app_over(mem, ServerSettings(rate_limit=None, dashboard_dir=tmp_path)) as api:
        response = api.call("GET", "/", None, follow_redirects=False)
        assert response.status_code in (302, 307) and response.headers["location"] == "/docs"
