"""``/metrics``: requests by route template and status, latencies, search latency,
LLM calls and tokens (counted by ``CountingLLM`` while the ledger still records them),
and the queues read from the database at each scrape."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ledgermem import Memory, OpenAICompatibleLLM
from ledgermem.server.metrics import CountingLLM, ServerMetrics
from ledgermem.testing import Reply, ScriptedLLMServer
from tests.server_support import Api, app_over
from tests.support import FakeClock


@pytest.fixture
def api(mem: Memory) -> Iterator[Api]:
    with app_over(mem) as served:
        yield served


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the exposition ``text`` (labels in any order)."""
    for line in text.splitlines():
        found = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if found is None or found.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
        if have == labels:
            return float(found.group(3))
    return None


def scrape(api: Api) -> str:
    response = api.call("GET", "/metrics", api.admin)
    assert response.status_code == 200
    return str(response.text)


def test_requests_are_counted_by_route_template_and_status(api: Api) -> None:
    item = api.ok("POST", "/v1/memories", api.alice, 201, json={"content": "Likes tea"})
    for _ in range(3):
        api.ok("GET", f"/v1/memories/{item['id']}", api.alice)
    api.call("GET", "/v1/memories/no-such-id", api.alice)
    api.call("GET", "/v1/stats", None)
    text = scrape(api)
    route = "/v1/memories/{item_id}"
    assert sample(text, "ledgermem_http_requests_total", method="GET", route=route,
                  status="200") == 3
    assert sample(text, "ledgermem_http_requests_total", method="GET", route=route,
                  status="404") == 1
    assert sample(text, "ledgermem_http_requests_total", method="GET", route="/v1/stats",
                  status="401") == 1
    assert sample(text, "ledgermem_http_request_duration_seconds_count", method="POST",
                  route="/v1/memories") == 1
    assert item["id"] not in text  # templates, never ids
    assert sample(text, "ledgermem_http_requests_in_progress") == 1  # the scrape itself


def test_made_up_methods_are_counted_as_one(api: Api) -> None:
    """Each label value is a series kept for the life of the process: a client naming
    a new method per request must not grow the server without bound."""
    for n in range(20):
        api.call(f"M{n}X", "/healthz", None)
    text = scrape(api)
    assert sample(text, "ledgermem_http_requests_total", method="other", route="/healthz",
                  status="405") == 20
    assert "M3X" not in text


def test_searches_are_timed_by_target(api: Api) -> None:
    api.ok("POST", "/v1/memories/search", api.alice, json={"query": "tea"})
    api.ok("POST", "/v1/memories/search", api.alice, json={"query": "coffee"})
    api.ok("POST", "/v1/search", api.alice, json={"query": "tea"})
    api.ok("POST", "/v1/turns/search", api.alice, json={"query": "tea"})
    text = scrape(api)
    counts = {target: sample(text, "ledgermem_search_duration_seconds_count", target=target)
              for target in ("knowledge", "all", "conversations")}
    assert counts == {"knowledge": 2, "all": 1, "conversations": 1}


def test_queues_are_read_from_the_database(api: Api, mem: Memory) -> None:
    for n in range(3):
        api.ok("POST", "/v1/memories", api.alice, 201, json={"content": f"fact {n}"})
    api.ok("POST", "/v1/turns", api.bob, 201, json={
        "infer": True, "turns": [{"role": "user", "content": "I moved to Porto"}]})
    api.ok("POST", "/v1/memories/search", api.alice, json={"query": "fact"})
    text = scrape(api)
    # embedder=None: nothing is embedded, so every row waits (both users' rows)
    assert sample(text, "ledgermem_pending_embeddings", table="knowledge") == 3
    assert sample(text, "ledgermem_pending_embeddings", table="conversations") == 1
    assert sample(text, "ledgermem_pending_extraction_batches") == 1
    assert sample(text, "ledgermem_pending_recall_bookkeeping") == mem.recalls.pending()


def test_llm_calls_and_tokens_are_counted_and_still_recorded(
        db_url: str, clock: FakeClock, server: ScriptedLLMServer) -> None:
    metrics = ServerMetrics()
    inner = OpenAICompatibleLLM("scripted", server.url, timeout=2, retries=0,
                                validation_retries=0)
    with Memory.open(db_url, clock=clock, embedder=None, llm=CountingLLM(inner, metrics)
                     ) as memory, app_over(memory, metrics=metrics) as api:
        events = [api.ok("POST", "/v1/events", api.alice, 201, json={
            "kind": "agent.spoke", "agent_id": "miller", "payload": {"text": f"line {n}"}})
            for n in range(10)]
        server.reply(Reply({"belief": "The mill is busy", "based_on": [events[0]["id"]]},
                           usage={"prompt_tokens": 120, "completion_tokens": 7}))
        belief = api.ok("POST", "/v1/agents/miller/reflect", api.alice)["event"]
        assert belief["payload"]["belief"] == "The mill is busy"
        text = scrape(api)
        assert sample(text, "ledgermem_llm_calls_total", purpose="reflection",
                      model="scripted", outcome="ok") == 1
        assert sample(text, "ledgermem_llm_tokens_total", purpose="reflection",
                      model="scripted", direction="in") == 120
        assert sample(text, "ledgermem_llm_tokens_total", purpose="reflection",
                      model="scripted", direction="out") == 7
        # the ledger got the call too (the user's LLM usage)
        [usage] = api.ok("GET", "/v1/llm-usage", api.alice)
        assert (usage["purpose"], usage["calls"], usage["tokens_in"]) == ("reflection", 1, 120)
        assert api.ok("GET", "/v1/status", api.alice)["llm"] == "scripted"
    inner.close()
