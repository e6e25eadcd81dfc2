"""Query syntax and wildcards sent to the REST API and the MCP tools are only ever text:
FTS5 operators, column filters (``content:``, ``scope:``), quotes and ``NEAR(`` in a
search are words; ``%`` and ``_`` in a filter match themselves; nothing of another user
comes back, nothing answers 5xx, and nothing stored changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from ledgermem import Memory
from ledgermem.aio import AsyncMemory
from ledgermem.mcp import bound_to, build_server
from ledgermem.store.sqlite_keyword import keyword_scope
from tests.server_support import Api, app_over
from tests.support import user_rows

SYNTAX = ['"', '""', "*", "manager*", "NEAR(", "NEAR(sarah manager, 2)", "^sarah",
          "content:manager", "entity:person", f"scope:{keyword_scope('alice')}",
          "{content entity}: manager", "sarah AND manager OR bob NOT x", "-manager",
          "(manager", "manager)", "' OR 1=1 --", "%", "_", "\\", "manager\x00", ":"]


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def post(api: Api, path: str, key: str, body: dict[str, Any]) -> Any:
    response = api.call("POST", path, key, content=json.dumps(body).encode(),
                        headers={"content-type": "application/json"})
    assert response.status_code == 200, (path, body, response.text)
    return response.json()


def test_search_syntax_is_words_and_never_crosses_users(api: Api, mem: Memory) -> None:
    api.ok("POST", "/v1/memories", api.alice, 201, json={
        "content": "Sarah is her manager", "entity": "person:sarah", "context": "work"})
    api.ok("POST", "/v1/turns", api.alice, 201, json={
        "turns": [{"role": "user", "content": "my manager Sarah called"}]})
    mine = api.ok("POST", "/v1/memories", api.bob, 201, json={
        "content": "NEAR the manager's desk, a quote \" and 100% sure"})
    before = user_rows(mem, "alice")
    for query in SYNTAX:
        for path in ("/v1/memories/search", "/v1/search", "/v1/turns/search"):
            found = post(api, path, api.bob, {"query": query})
            assert "alice" not in json.dumps(found), (path, query)
    # the words of bob's own text find it, syntax and all
    hits = post(api, "/v1/memories/search", api.bob, {"query": 'NEAR( "manager\'s'})
    assert [hit["item"]["id"] for hit in hits] == [mine["id"]]
    assert user_rows(mem, "alice") == before


def test_wildcards_in_filters_match_only_themselves(api: Api) -> None:
    literal = api.ok("POST", "/v1/memories", api.alice, 201, json={
        "content": "Sam likes 100% rye", "entity": "person:sam_x", "context": "w_rk"})
    api.ok("POST", "/v1/memories", api.alice, 201, json={
        "content": "Sarah is her manager", "entity": "person:samox", "context": "work"})
    api.ok("POST", "/v1/memories", api.bob, 201, json={
        "content": "Bob's note", "entity": "person:sam_x", "context": "w_rk"})
    cases = [({"entity": "person:sam_x"}, [literal["id"]]), ({"context": "w_rk"}, [literal["id"]]),
             ({"entity": "person:sam%"}, []), ({"entity": "person:%"}, []),
             ({"context": "%"}, []), ({"context": "_ork"}, []), ({"context": "w%"}, [])]
    for params, expected in cases:
        listed = api.ok("GET", "/v1/memories", api.alice, params=params)
        assert [item["id"] for item in listed["items"]] == expected, params
        hits = post(api, "/v1/memories/search", api.alice, {"query": "rye manager", **params})
        assert [hit["item"]["id"] for hit in hits] == expected, params
    assert api.ok("GET", "/v1/turns", api.alice, params={"session_id": "%"}) == []
    assert api.ok("GET", "/v1/tool-calls/errors", api.alice, params={"name": "%"}) == []


def test_mcp_tools_take_syntax_and_wildcards_as_text(mem: Memory) -> None:
    mem.for_user("alice").remember("Alice's secret manager is Sarah", entity="person:sarah")
    bob = mem.for_user("bob")
    bob.remember("Bob's manager is Tom", entity="person:tom", context="w_rk")

    async def calls() -> list[Any]:
        server = build_server(bound_to(AsyncMemory.from_sync(mem).for_user("bob")))
        answers: list[Any] = []
        async with Client(server) as client:
            for query in SYNTAX:
                answers.append(await client.call_tool("recall", {"query": query}))
                answers.append(await client.call_tool("search_past_conversations",
                                                      {"query": query}))
            for filters in ({"entity": "person:%"}, {"context": "%"}, {"context": "w%"}):
                answers.append(await client.call_tool("recall", {"query": "manager",
                                                                 **filters}))
        return answers

    for answer in asyncio.run(calls()):
        assert "Alice" not in json.dumps(answer.structured_content or {})
        if answer.structured_content is not None:
            assert answer.structured_content in ({"results": []}, {"turns": []}) or all(
                hit["content"].startswith("Bob") for hit in
                answer.structured_content.get("results", []))
