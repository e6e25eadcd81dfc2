"""Limits on what a client writes through the REST API, on both stores: JSON nested in
``metadata`` (items, turns), ``arguments`` (tool calls) or ``payload`` (events) at most
``MAX_JSON_DEPTH`` levels deep. One level more answers 422 ``invalid_input`` and stores
nothing; at the cap the value is stored and every read of it answers 200 (a value the
server could store but not serialise again made each later read a 500)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from ledgermem import Memory
from ledgermem.validation import MAX_JSON_DEPTH
from tests.server_support import Api, app_over
from tests.support import snapshot
from tests.test_validation_json_depth import nested


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def writes(item_id: str, value: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Every route that stores a client's JSON object, as (method, path, body)."""
    turn = {"role": "user", "content": "deep", "metadata": value}
    return {
        "remember": ("POST", "/v1/memories", {"content": "deep one", "metadata": value}),
        "remember many": ("POST", "/v1/memories/batch",
                          {"items": [{"content": "deep two", "metadata": value}]}),
        "update": ("PATCH", f"/v1/memories/{item_id}", {"metadata": value}),
        "turns": ("POST", "/v1/turns", {"turns": [turn]}),
        "tool call": ("POST", "/v1/tool-calls",
                      {"name": "probe", "arguments": value, "error": "deep"}),
        "event": ("POST", "/v1/events", {"kind": "probe.noted", "payload": value}),
    }


ROUTES = list(writes("x", {}))


@pytest.mark.parametrize("route", ROUTES)
def test_json_nested_past_the_cap_answers_422_and_stores_nothing(api: Api, mem: Memory,
                                                                 route: str) -> None:
    item = api.ok("POST", "/v1/memories", api.alice, 201, json={"content": "to update"})
    method, path, body = writes(item["id"], nested(MAX_JSON_DEPTH + 1))[route]
    before = snapshot(mem)
    response = api.call(method, path, api.alice, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert f"nested more than {MAX_JSON_DEPTH} levels" in error["message"]
    assert snapshot(mem) == before


def test_json_nested_at_the_cap_is_stored_and_every_read_answers_200(api: Api) -> None:
    deep = nested(MAX_JSON_DEPTH)
    item = api.ok("POST", "/v1/memories", api.alice, 201, json={"content": "to update"})
    for route, (method, path, body) in writes(item["id"], deep).items():
        status = 200 if method == "PATCH" else 201
        assert api.call(method, path, api.alice, json=body).status_code == status, route
    listed = api.ok("GET", "/v1/memories", api.alice)["items"]
    assert {i["content"] for i in listed if i["metadata"] == deep} == {
        "to update", "deep one", "deep two"}
    hits = api.ok("POST", "/v1/memories/search", api.alice, json={"query": "deep two"})
    assert hits[0]["item"]["metadata"] == deep
    assert [t["metadata"] for t in api.ok("GET", "/v1/turns", api.alice)] == [deep]
    [call] = api.ok("GET", "/v1/tool-calls/errors", api.alice)
    assert call["arguments"] == deep
    events = api.ok("GET", "/v1/events", api.alice, params={"kind": ["probe.noted"]})
    assert [e["payload"] for e in events] == [deep]
    for key, path in ((api.alice, "/v1/export"), (api.admin, "/v1/admin/export")):
        response = api.call("GET", path, key)
        assert response.status_code == 200, (path, response.text)
        payloads = [json.loads(line).get("payload") for line in response.text.splitlines()]
        assert deep in payloads
