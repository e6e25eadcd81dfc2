"""The web dashboard in real headless Chromium, against a real ``ledgermem serve``.

A SQLite file is seeded through the Python API (a user with 2,600+ memories across
categories, contexts and entities, sensitive, superseded and invalidated ones, two
sessions of turns, tool calls that fail, LLM calls of a scripted model; a second user
with a few memories of his own), then ``ledgermem serve`` runs on it on a free loopback
port and Debian's ``chromium`` (driven by Playwright through ``executable_path``) signs
in with the user key, the second user's key and the admin key. Every count the pages
show is checked against the Python API over the same file.

Screenshots of each page are kept in ``tests/artifacts/dashboard/`` (not committed).
Without Chromium or Playwright the tests skip, except with ``CI`` set, where they fail:
``make test`` installs Chromium first (``make browser``).
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from ledgermem import (
    CATEGORIES,
    Finding,
    Memory,
    NotFound,
    OpenAICompatibleLLM,
    SQLiteStore,
)
from ledgermem.server.app import DASHBOARD_DIR
from ledgermem.server.keys import KeyRing
from ledgermem.testing import HashEmbedder, Reply, ScriptedLLMServer
from tests.pipeline.scripts import LONG, add, ops
from tests.server_support import (
    ROOT,
    Served,
    app_over,
    chromium,
    free_port,
    serve_env,
    start_server,
)
from tests.support import FakeClock

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Route, ViewportSize

ARTIFACTS = ROOT / "tests" / "artifacts" / "dashboard"

CONTEXTS = ("work", "personal", "travel", "health")
ENTITIES = ("person:sarah_chen", "person:sarah_chen", "place:lisbon", "org:acme", None)
WORDS = ("budget", "meeting", "flight", "allergy", "recipe", "deadline", "invoice", "garden",
         "concert", "library", "dentist", "marathon", "python", "violin", "museum")
BULK = 2600
XSS = "<img src=x onerror=window.__pwned=1>"
XSS_TOOL = "<script>window.__pwned=2</script> upstream said <b>no</b>"
LONG_ERROR = ("HTTP 500 from https://db.internal.example/query?statement=" + "x" * 120 + ": "
              + "the database refused the statement: its connection pool was exhausted, "
              "retried three times and gave up. " * 5)
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1440, "height": 900}
LOG_ROUTE = "/v1/dashboard/maintenance"


@dataclass
class Site:
    """The seeded server, its keys, and the same database read through the Python API."""

    served: Served
    url: str
    alice: str
    bob: str
    admin: str
    reader: Memory

    def total(self, user: str = "alice", **filters: Any) -> int:
        total: int = self.reader.for_user(user).all_knowledge(limit=1, **filters)["total"]
        return total

    def page(self, user: str = "alice", **options: Any) -> list[str]:
        found = self.reader.for_user(user).all_knowledge(**options)["items"]
        return [item.id for item in found]


def _seed_bulk(mem: Memory, clock: FakeClock) -> None:
    alice = mem.for_user("alice", session_id="alice:cli")
    with mem.store.transaction():
        for i in range(40):  # old enough for maintenance to decay them
            clock.advance(minutes=5)
            alice.remember(f"Archived note {i:02d} on the {WORDS[i % 15]}", "note",
                           context="archive", dedup=False)
    clock.now = datetime.now(UTC) - timedelta(days=27)
    ids = []
    with mem.store.transaction():
        for i in range(BULK):
            clock.advance(minutes=10)
            ids.append(alice.remember(
                f"Memory {i:04d} about the {WORDS[i % 15]} and the {WORDS[(i * 7 + 3) % 15]}",
                CATEGORIES[i % 6], context=CONTEXTS[i % 4], entity=ENTITIES[i % 5],
                sensitive=i % 11 == 0, confidence=round(0.3 + (i % 70) / 100, 2),
                dedup=False).id)
        for i in range(0, 400, 10):  # 40 superseded versions
            clock.advance(minutes=3)
            alice.revise(ids[i], f"Memory {i:04d} revised: the plan changed")
        for i in range(5, 55, 10):  # 5 invalidated ones
            alice.invalidate(ids[i], reason="no longer true")


def _seed_story(mem: Memory, clock: FakeClock, db: Path) -> None:
    alice = mem.for_user("alice", session_id="alice:cli")
    clock.advance(hours=2)
    alice.remember("Sarah Chen prefers oolong tea in the afternoon", "preference",
                   context="personal", entity="person:sarah_chen")
    alice.remember("Tom's birthday is on 12 May", "fact", context="personal",
                   entity="person:tom")
    alice.remember("Temporary parking code is 4711", "note", context="travel")
    porto = alice.remember("Lives in Porto near the river", "fact", context="personal")
    clock.advance(hours=5)
    alice.revise(porto.id, "Lives in Lisbon since the move")
    alice.remember(XSS, "note", context="work", entity="person:mallory")
    alice.add_turns([{"role": "user" if n % 2 == 0 else "assistant",
                      "content": f"cli turn {n}: about the {WORDS[n]}"} for n in range(6)],
                    session_id="alice:cli")
    clock.advance(days=1)
    alice.add_turns([{"role": "user", "content": "web turn 0: hello"},
                     {"role": "assistant", "content": XSS},
                     {"role": "user", "content": "web turn 2: thanks"},
                     {"role": "assistant", "content": "web turn 3: bye"}],
                    session_id="alice:web")
    for n in range(10):
        clock.advance(minutes=30)
        failed = n in (2, 5, 9)
        alice.log_tool_call("web_search", {"q": f"query {n}"}, duration_ms=100.0 + 10 * n,
                            error=("timeout after 30 s" if n == 9 else "HTTP 503 from search")
                            if failed else None, session_id="alice:cli")
    alice.log_tool_call("fetch_page", {"url": "x"}, duration_ms=5.0, error=XSS_TOOL)
    for n in range(5):
        alice.log_tool_call("calculator", {"expr": f"{n}+1"}, duration_ms=2.0)
    alice.log_tool_call("db_query", {"sql": "select 1"}, duration_ms=30.0, error=LONG_ERROR)
    # one memory each for the edit, revise and double-click tests to change
    alice.remember("Prefers aisle seats on trains", "preference", context="travel",
                   confidence=0.7)
    alice.remember("Climbs with Dana on Thursdays", "fact", context="personal",
                   entity="person:dana")
    alice.remember("Keeps the spare key with the neighbour", "note", context="personal")
    clock.advance(days=1)
    with ScriptedLLMServer(Reply(ops(add("Plays the cello in an orchestra")),
                                 usage={"prompt_tokens": 1200, "completion_tokens": 80})) as llm:
        client = OpenAICompatibleLLM("scripted-model", llm.url, timeout=5, retries=0,
                                     validation_retries=0)
        learner = Memory(SQLiteStore(db), embedder=HashEmbedder(), clock=clock, llm=client)
        try:
            learner.for_user("alice", session_id="alice:chat").add_turns(
                [{"role": "user", "content": "I play the cello in an amateur orchestra " + LONG}],
                infer=True)
            learner.flush()
        finally:
            learner.close()
            client.close()
    now = datetime.now(UTC)
    for days, text in ((1, "Call the dentist about the crown"), (3, "Renew the passport"),
                       (6, "Send Sarah the Apollo budget")):
        alice.remember(text, "reminder", context="personal", due_at=now + timedelta(days=days))
    alice.remember("Return the library books", "reminder", context="personal",
                   due_at=now - timedelta(days=2))  # overdue
    alice.maintain()  # decays the archived notes: the maintenance page shows it
    bob = mem.for_user("bob")
    for text in ("Bob plans a herb garden", "Bob's bank PIN hint: first dog", "Bob likes jazz"):
        bob.remember(text, "note", context="garden")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("dashboard")
    db = folder / "memory.db"
    clock = FakeClock(datetime.now(UTC) - timedelta(days=70))
    mem = Memory(SQLiteStore(db), embedder=HashEmbedder(), clock=clock)
    try:
        _seed_bulk(mem, clock)
        _seed_story(mem, clock, db)
        mem.flush()
        keys = KeyRing(mem.store)
        alice, _ = keys.create("alice", label="dashboard test")
        bob, _ = keys.create("bob", label="dashboard test")
    finally:
        mem.close()
    port = free_port()
    served = start_server(["serve", "--db", str(db), "--port", str(port)],
                          serve_env(folder / "data"))
    reader = Memory(SQLiteStore(db), embedder=HashEmbedder())
    try:
        assert served.admin_key is not None
        yield Site(served, served.url, alice, bob, served.admin_key, reader)
    finally:
        reader.close()
        code, _ = served.stop()
        assert code == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        print(f"\ndashboard screenshots: {ARTIFACTS}")
        yield launched


@pytest.fixture
def page(browser: Browser, site: Site) -> Iterator[Page]:
    context = browser.new_context(locale="en-US", timezone_id="UTC",
                                  viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)  # assertions wait as long as actions on a busy machine
    opened = context.new_page()
    crashes: list[str] = []
    opened.on("pageerror", lambda error: crashes.append(str(error)))
    # Console errors other than the API's own 4xx answers (a CSP violation, a failed
    # module load) are failures too.
    opened.on("console", lambda message: crashes.append(message.text) if (
        message.type == "error" and "Failed to load resource" not in message.text) else None)
    yield opened
    pwned = opened.evaluate("() => window.__pwned")
    context.close()
    assert crashes == [], crashes
    assert pwned is None, "stored text ran as script"


def assert_labelled(page: Page) -> None:
    """Every form control on the page has a label a screen reader announces."""
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea')]
        .filter(c => c.type !== 'hidden' && !(c.labels && c.labels.length)
                 && !c.getAttribute('aria-label'))
        .map(c => c.outerHTML)""")
    assert unlabelled == []


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def shot_detail(page: Page, name: str) -> None:
    """The memory panel alone, tall enough to show its history and lineage."""
    page.set_viewport_size({"width": 1440, "height": 2000})
    page.locator("#item-detail").screenshot(path=str(ARTIFACTS / f"{name}-panel.png"))
    page.set_viewport_size({"width": 1440, "height": 900})


def sign_in(page: Page, site: Site, key: str) -> None:
    page.goto(site.url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def open_page(page: Page, name: str) -> None:
    page.get_by_role("navigation", name="Dashboard pages").get_by_role("link", name=name).click()


def held_back(page: Page, pattern: str, hold: Callable[[Route, list[Route]], bool]
              ) -> list[Route]:
    """The requests to ``pattern`` that ``hold(route, held so far)`` picks are kept
    back in the list returned, until the test continues them; the rest go through."""
    held: list[Route] = []

    def handle(route: Route) -> None:
        if hold(route, held):
            held.append(route)
        else:
            route.continue_()

    page.route(pattern, handle)
    return held


def n(value: int) -> str:
    return f"{value:,}"


def rows(page: Page) -> list[str]:
    """The ids of the memories listed, in order."""
    ids = page.locator("#kb-results tbody tr[data-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.id)")
    return cast("list[str]", ids)  # what the script returns is untyped


def wait_summary(page: Page, total: int, page_number: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#kb-total")).to_have_text(n(total))
    expect(page.locator("#kb-page")).to_have_text(str(page_number))


# the pages --------------------------------------------------------------------------------
def test_overview_shows_the_users_counts(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    expect(page.locator("#acting-user")).to_have_text("alice")
    stats = site.reader.for_user("alice").stats()
    for key in ("items", "items_total", "sessions", "turns", "tool_calls", "events"):
        expect(page.locator(f"[data-stat={key}] .card-value")).to_have_text(n(stats[key]))
    for category, count in stats["by_category"].items():
        expect(page.locator(f"#by-category li[data-category={category}] .num")).to_have_text(
            n(count))
    assert stats["items"] > 2500
    shot(page, "01-overview")


def test_the_browser_pages_through_thousands_of_items(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    total = site.total()
    pages = -(-total // 50)
    wait_summary(page, total, 1)
    expect(page.locator("#kb-pages")).to_have_text(str(pages))
    assert rows(page) == site.page(limit=50)
    shot(page, "02-knowledge-page-1")
    page.get_by_role("button", name="Next page").click()
    wait_summary(page, total, 2)
    expect(page.locator("#kb-range")).to_have_text("51–100")
    assert rows(page) == site.page(offset=50, limit=50)
    page.get_by_role("button", name="Last page").click()
    wait_summary(page, total, pages)
    last = site.page(offset=(pages - 1) * 50, limit=50)
    assert rows(page) == last and len(last) == total - (pages - 1) * 50
    expect(page.get_by_role("button", name="Next page")).to_be_disabled()
    shot(page, "03-knowledge-last-page")
    page.get_by_label("Page", exact=True).fill("17")
    page.get_by_label("Page", exact=True).press("Enter")
    wait_summary(page, total, 17)
    assert rows(page) == site.page(offset=16 * 50, limit=50)
    page.get_by_label("Per page").select_option("200")
    wait_summary(page, total, 1)
    expect(page.locator("#kb-pages")).to_have_text(str(-(-total // 200)))
    assert rows(page) == site.page(limit=200)
    page.get_by_label("Sort by").select_option("confidence")
    page.get_by_label("Order").select_option("asc")
    wait_summary(page, total, 1)
    page.get_by_role("button", name="Next page").click()
    wait_summary(page, total, 2)
    assert rows(page) == site.page(sort="confidence", order="asc", offset=200, limit=200)


def test_filters_agree_with_the_python_api(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    wait_summary(page, site.total(), 1)
    page.get_by_label("Category").select_option("preference")
    wait_summary(page, site.total(category="preference"), 1)
    page.get_by_label("Context").fill("personal")
    page.get_by_label("Context").press("Enter")
    wait_summary(page, site.total(category="preference", context="personal"), 1)
    page.get_by_label("Sensitive").select_option("true")
    expected = site.total(category="preference", context="personal", sensitive=True)
    assert 0 < expected < 50
    wait_summary(page, expected, 1)
    assert rows(page) == site.page(category="preference", context="personal", sensitive=True)
    expect(page.locator("#kb-results tbody .badge.sensitive")).to_have_count(expected)
    shot(page, "04-knowledge-filtered")
    assert_labelled(page)
    page.get_by_role("button", name="Reset").click()
    page.get_by_label("Entity").fill("person:sarah_chen")
    page.get_by_label("Entity").press("Enter")
    wait_summary(page, site.total(entity="person:sarah_chen"), 1)
    page.get_by_label("Versions").select_option("1")
    with_old = site.total(entity="person:sarah_chen", include_superseded=True)
    assert with_old > site.total(entity="person:sarah_chen")
    wait_summary(page, with_old, 1)
    assert rows(page) == site.page(entity="person:sarah_chen", include_superseded=True)
    expect(page.locator("#kb-results tbody .badge.inactive").first).to_be_visible()


def test_search_ranks_the_matching_memory_first(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    page.get_by_label("Search").fill("oolong tea")
    page.get_by_label("Search").press("Enter")
    expect(page.locator("#kb-summary")).to_contain_text("best matches for “oolong tea”")
    first = page.locator("#kb-results tbody tr[data-id]").first
    expect(first).to_contain_text("Sarah Chen prefers oolong tea in the afternoon")
    shot(page, "05-knowledge-search")


def _open_by_search(page: Page, words: str, content: str) -> None:
    from playwright.sync_api import expect

    page.get_by_label("Search").fill(words)
    page.get_by_label("Search").press("Enter")
    page.locator("#kb-results tbody tr[data-id]", has_text=content).first.get_by_role(
        "button").click()
    expect(page.locator("#item-detail .item-content")).to_have_text(content)


def test_edit_an_item_and_see_its_history(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    _open_by_search(page, "Tom birthday", "Tom's birthday is on 12 May")
    item_id = page.locator("#item-detail code").first.inner_text()
    page.get_by_role("button", name="Edit", exact=True).click()
    assert_labelled(page)
    page.get_by_label("Content").fill("Tom's birthday is on 14 May")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#item-detail .item-content")).to_have_text("Tom's birthday is on 14 May")
    expect(page.locator("#item-history li[data-kind='memory.updated']")).to_contain_text(
        "content → Tom's birthday is on 14 May")
    assert site.reader.for_user("alice").get(item_id).content == "Tom's birthday is on 14 May"
    shot(page, "06-knowledge-edited-history")
    shot_detail(page, "06-knowledge-edited-history")


def test_forget_removes_it_from_the_list_and_the_api(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    _open_by_search(page, "parking code", "Temporary parking code is 4711")
    item_id = page.locator("#item-detail code").first.inner_text()
    page.get_by_role("button", name="Forget…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("cannot be undone")
    page.keyboard.press("Escape")  # cancels: nothing is forgotten
    expect(dialog).to_be_hidden()
    assert site.reader.for_user("alice").get(item_id).content == "Temporary parking code is 4711"
    page.get_by_role("button", name="Forget…").focus()
    page.keyboard.press("Enter")
    expect(dialog).to_contain_text("cannot be undone")
    shot(page, "07-knowledge-forget-confirm")
    dialog.get_by_role("button", name="Forget", exact=True).click()
    expect(page.locator("#toast")).to_have_text("Forgotten.")
    expect(page.locator("#item-detail")).to_be_hidden()
    expect(page.locator(f"#kb-results tr[data-id='{item_id}']")).to_have_count(0)
    with pytest.raises(NotFound):
        site.reader.for_user("alice").get(item_id)
    page.get_by_role("button", name="Reset").click()
    wait_summary(page, site.total(), 1)


def test_restore_a_superseded_version_from_its_lineage(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    _open_by_search(page, "Lives in Lisbon", "Lives in Lisbon since the move")
    lineage = page.locator("#item-lineage li")
    expect(lineage).to_have_count(2)
    expect(lineage.first).to_contain_text("Lives in Porto near the river")
    expect(lineage.first).to_contain_text("superseded")
    lineage.first.get_by_role("button").click()
    expect(page.locator("#item-detail .item-content")).to_have_text("Lives in Porto near the river")
    old_id = page.locator("#item-detail code").first.inner_text()
    shot(page, "08-knowledge-lineage")
    page.get_by_role("button", name="Restore", exact=True).click()
    expect(page.locator("#toast")).to_contain_text("Restored")
    expect(page.locator("#item-history li[data-kind='memory.restored']")).to_have_count(1)
    assert site.reader.for_user("alice").get(old_id).active
    expect(page.locator("#item-detail .detail-head .badge.inactive")).to_have_count(0)
    shot_detail(page, "08-knowledge-restored")


def test_entities_and_contexts_open_the_browser_filtered(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Entities & contexts")
    alice = site.reader.for_user("alice")
    for value, count in alice.entities():
        expect(page.locator("#entities tr", has_text=value).locator("td.num")).to_have_text(
            n(count))
    for value, count in alice.contexts():
        expect(page.locator("#contexts tr", has_text=value).locator("td.num")).to_have_text(
            n(count))
    shot(page, "09-entities-contexts")
    page.locator("#entities").get_by_role("button", name="place:lisbon").click()
    wait_summary(page, site.total(entity="place:lisbon"), 1)
    expect(page.get_by_label("Entity")).to_have_value("place:lisbon")


def test_sessions_with_their_turns(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Sessions")
    sessions = site.reader.for_user("alice").sessions()
    assert {s["session_id"] for s in sessions} >= {"alice:cli", "alice:web"}
    for session in sessions:
        expect(page.locator("tr", has_text=session["session_id"]).locator("td.num").first
               ).to_have_text(n(session["turns"]))
    page.get_by_role("button", name="alice:cli").click()
    expect(page.locator("#turns li")).to_have_count(6)
    expect(page.locator("#turns li").first).to_contain_text("cli turn 0: about the budget")
    page.get_by_role("button", name="alice:web").click()
    expect(page.locator("#turns li")).to_have_count(4)
    expect(page.locator("#turns li").nth(1)).to_contain_text(XSS)
    shot(page, "10-sessions")


def test_the_timeline_chart_is_drawn_from_the_events(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Activity timeline")
    expect(page.locator("#timeline-chart rect.day-bar").first).to_be_visible()
    drawn = page.locator("#timeline-chart rect.day-bar").evaluate_all(
        "bars => bars.reduce((sum, b) => sum + Number(b.dataset.count), 0)")
    expected = sum(row["count"] for row in site.reader.for_user("alice").activity_timeline(30))
    assert drawn == expected
    days = page.locator("#timeline-chart rect.day-bar").evaluate_all(
        "bars => new Set(bars.map(b => b.dataset.day)).size")
    assert days >= 15  # the seeded weeks, one bar per day
    shot(page, "11-timeline")


def test_tools_show_success_rate_and_last_error(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Tools & errors")
    web = page.locator("tr[data-tool=web_search]")
    expect(web.locator("td").nth(1)).to_have_text("10")
    expect(web.locator("td").nth(2)).to_have_text("3")
    expect(web.locator("td").nth(3)).to_have_text("70.0%")
    expect(web.locator("td").nth(4)).to_have_text("145.0 ms")
    expect(web.locator("td").nth(6)).to_contain_text("timeout after 30 s")
    expect(page.locator("tr[data-tool=calculator] td").nth(3)).to_have_text("100.0%")
    expect(page.locator("tr[data-tool=fetch_page] td").nth(6)).to_contain_text(XSS_TOOL)
    expect(page.get_by_role("heading", name="Recent failed calls")).to_be_visible()
    shot(page, "12-tools")


def test_llm_usage_and_an_estimated_cost(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "LLM usage")
    [usage] = site.reader.for_user("alice").llm_usage()
    row = page.locator(f"tr[data-purpose={usage['purpose']}]")
    expect(row.locator("td").nth(2)).to_have_text(n(usage["calls"]))
    expect(row.locator("td").nth(4)).to_have_text(n(usage["tokens_in"]))
    assert_labelled(page)
    page.get_by_label("scripted-model: $ per million input tokens").fill("1000")
    cost = usage["tokens_in"] / 1e6 * 1000
    expect(row.locator("td").nth(7)).to_have_text(f"${cost:.4f}")
    shot(page, "13-llm-usage")


def test_maintenance_runs_and_says_what_it_did(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Maintenance")
    expect(page.locator("#maintenance-result")).to_contain_text("Not run")
    page.get_by_role("button", name="Run maintenance now").click()
    result = page.locator("#maintenance-result")
    expect(result).to_contain_text("memories lost confidence")
    expect(result).to_contain_text("Skipped: reconcile")
    [decay] = site.reader.store.events("alice", kinds=["memory.decayed"])  # the seed's
    decayed = len(decay.payload["ids"])
    assert decayed == 40  # the archived notes
    expect(page.locator("#maintenance-history tr[data-step=decay]")).to_have_text(
        re.compile(f"decay{decayed} memories unused for a while: confidence × 0.9$"))
    shot(page, "14-maintenance")


def test_the_review_queue_approves_edits_and_rejects(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    alice = site.reader.for_user("alice")
    keep, fix, drop, html = (p.id for p in alice.propose([
        Finding("Prefers window seats on long flights", category="preference",
                context="travel", source="llm_extract", why="said so on two trips"),
        Finding("Works on the Apolo budget", context="work", entity="org:acme"),
        Finding("Owes Mallory fifty euros", category="note", context="personal",
                sensitive=True, why="from a chat"),
        Finding(XSS, context="work", why=XSS),
    ], proposer="reflection"))
    items = site.total()
    sign_in(page, site, site.alice)
    open_page(page, "Review queue")

    def row(pid: str) -> Any:
        return page.locator(f"#review-results tbody tr[data-id='{pid}']")

    expect(page.locator("#review-results tbody tr[data-id]")).to_have_count(4)
    expect(page.locator("#review-summary")).to_have_text("4 proposals (pending), oldest first.")
    expect(row(keep)).to_contain_text("Why: said so on two trips")
    expect(row(keep)).to_contain_text("llm_extract")
    expect(row(fix).locator("td").nth(3)).to_have_text("org:acme")
    expect(row(drop).locator(".badge.sensitive")).to_have_text("sensitive")
    expect(row(html).locator(".proposal-content")).to_have_text(XSS)
    expect(row(html).locator(".why")).to_have_text("Why: " + XSS)
    assert page.locator("main img, main script").count() == 0
    shot(page, "20-review-queue")

    row(keep).get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#toast")).to_have_text("Approved.")
    expect(row(keep)).to_have_count(0)
    approved = alice.proposal(keep)
    assert approved.status == "approved" and approved.item_id is not None
    assert alice.get(approved.item_id).content == "Prefers window seats on long flights"

    row(fix).get_by_role("button", name="Edit…").click()
    assert_labelled(page)
    page.get_by_label("Content").fill("Works on the Apollo budget")
    shot(page, "21-review-edit")
    page.get_by_role("button", name="Approve with changes").click()
    expect(page.locator("#toast")).to_have_text("Approved with changes.")
    expect(row(fix)).to_have_count(0)
    edited = alice.proposal(fix)
    assert edited.status == "edited" and edited.changes == {
        "content": "Works on the Apollo budget"}
    assert edited.item_id is not None
    made = alice.get(edited.item_id)
    assert (made.content, made.entity) == ("Works on the Apollo budget", "org:acme")

    row(drop).get_by_role("button", name="Reject…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("cannot be undone")
    dialog.get_by_role("button", name="Reject", exact=True).click()
    expect(page.locator("#toast")).to_have_text("Rejected.")
    expect(row(drop)).to_have_count(0)
    rejected = alice.proposal(drop)
    assert (rejected.status, rejected.item_id) == ("rejected", None)
    assert "Mallory" not in rejected.content  # blanked in the ledger

    page.get_by_role("button", name="Reject all…").click()  # the stored HTML one is left
    dialog.get_by_role("button", name="Reject all", exact=True).click()
    expect(page.locator("#toast")).to_have_text("Rejected 1.")
    expect(page.locator("#review-results")).to_contain_text("Nothing waits for review.")
    assert alice.proposal(html).status == "rejected"
    assert site.total() == items + 2  # the approved and the edited one, nothing rejected
    assert alice.proposals() == []

    page.get_by_label("Show").select_option("decided")
    expect(page.locator("#review-results tbody tr[data-id]")).to_have_count(4)
    assert page.locator("#review-results tbody tr[data-id]").evaluate_all(
        "rows => rows.map(r => [r.dataset.id, r.dataset.status])") == [
        [keep, "approved"], [fix, "edited"], [drop, "rejected"], [html, "rejected"]]
    expect(row(fix)).to_contain_text("content → Works on the Apollo budget")
    expect(page.locator("#review-results")).not_to_contain_text("Mallory")  # text blanked
    shot(page, "22-review-decided")
    row(keep).get_by_role("button", name="Open the memory").click()
    expect(page.locator("#item-detail .item-content")).to_have_text(
        "Prefers window seats on long flights")


# safety -----------------------------------------------------------------------------------
def test_stored_html_is_shown_as_text(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    page.get_by_label("Entity").fill("person:mallory")
    page.get_by_label("Entity").press("Enter")
    wait_summary(page, 1, 1)
    expect(page.locator("#kb-results tbody")).to_contain_text(XSS)
    page.locator("#kb-results tbody").get_by_role("button").first.click()
    expect(page.locator("#item-detail .item-content")).to_have_text(XSS)
    expect(page.locator("#item-history")).to_contain_text(XSS)
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    shot(page, "15-stored-html-as-text")


def test_a_slow_answer_to_an_older_request_is_not_shown_over_a_newer_one(
        page: Page, site: Site) -> None:
    """The page's first listing (no filter) is held back until the filtered one has
    been shown, then answered: the filtered listing stays, and so does the item
    opened from it."""
    from playwright.sync_api import expect

    released = False
    held = held_back(page, "**/v1/memories?*", lambda route, _: not released
                     and "entity=" not in route.request.url)
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    page.get_by_label("Entity").fill("person:mallory")
    page.get_by_label("Entity").press("Enter")
    wait_summary(page, 1, 1)
    page.locator("#kb-results tbody").get_by_role("button").first.click()
    expect(page.locator("#item-detail .item-content")).to_have_text(XSS)
    assert held
    released = True
    for route in held:
        route.continue_()
    page.wait_for_timeout(500)   # the held answers arrive, and must be dropped
    wait_summary(page, 1, 1)
    expect(page.locator("#kb-results tbody")).to_contain_text(XSS)
    expect(page.locator("#item-detail .item-content")).to_have_text(XSS)


def test_a_filter_typed_while_the_page_loads_keeps_the_focus(page: Page, site: Site) -> None:
    """The Knowledge page's first listing is held back while the user types an entity;
    when it arrives, the focus stays in the filter (the page's heading takes it only
    when the page is opened), so Enter applies the filter."""
    from playwright.sync_api import expect

    held = held_back(page, "**/v1/memories?*", lambda route, held: not held
                     and "/v1/memories?" in route.request.url)   # the first listing
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    expect(page.locator("#page-title")).to_be_focused()   # a navigation moves it there
    page.get_by_label("Entity").fill("person:mallory")
    for _ in range(100):   # the listing is asked for as the form is shown
        if held:
            break
        page.wait_for_timeout(20)
    assert held
    held[0].continue_()
    wait_summary(page, site.total(), 1)
    assert page.evaluate("() => document.activeElement.name") == "entity"
    page.keyboard.press("Enter")
    wait_summary(page, 1, 1)
    expect(page.locator("#kb-results tbody")).to_contain_text(XSS)


def test_a_knowledge_page_left_while_loading_does_not_take_over_the_next(
        page: Page, site: Site) -> None:
    """The first Knowledge page's filter lists are held back while the user goes to
    Overview and back; answered last, that page is dropped: a search still updates
    the list on screen."""
    from playwright.sync_api import expect

    held = held_back(page, "**/v1/contexts*", lambda _, held: not held)   # the first
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    page.wait_for_timeout(300)
    assert held
    open_page(page, "Overview")
    open_page(page, "Knowledge")
    wait_summary(page, site.total(), 1)
    held[0].continue_()
    page.wait_for_timeout(500)   # the first page's lists arrive, after the second's
    page.get_by_label("Search").fill("oolong tea")
    page.get_by_label("Search").press("Enter")
    expect(page.locator("#kb-summary")).to_contain_text("best matches for “oolong tea”")


def test_the_admin_key_picks_a_user(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.admin)
    expect(page.get_by_role("heading", name="Pick a user")).to_be_visible()
    expect(page.locator("main tr", has_text="alice").locator("td.num").first).to_have_text(
        n(site.reader.store.user_counts()["alice"]["items"]))
    shot(page, "16-admin-pick-user")
    page.get_by_label("Acting for").select_option("alice")
    stats = site.reader.for_user("alice").stats()
    expect(page.locator("[data-stat=items] .card-value")).to_have_text(n(stats["items"]))
    open_page(page, "Knowledge")
    wait_summary(page, site.total(), 1)
    page.get_by_label("Acting for").select_option("bob")
    open_page(page, "Knowledge")
    wait_summary(page, site.total("bob"), 1)
    expect(page.locator("#kb-results")).not_to_contain_text("Memory 0")
    shot(page, "17-admin-as-bob")


def test_a_second_users_key_sees_nothing_of_the_first(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.bob)
    expect(page.locator("#acting-user")).to_have_text("bob")
    expect(page.locator("[data-stat=items] .card-value")).to_have_text(n(site.total("bob")))
    expect(page.locator("[data-stat=turns] .card-value")).to_have_text("0")
    open_page(page, "Knowledge")
    wait_summary(page, 3, 1)
    assert sorted(page.locator("#kb-results tbody .content").all_inner_texts()) == sorted([
        "Bob plans a herb garden", "Bob's bank PIN hint: first dog", "Bob likes jazz"])
    for name in ("Sessions", "Tools & errors", "LLM usage", "Entities & contexts"):
        open_page(page, name)
        expect(page.locator("main")).not_to_contain_text(re.compile(
            "alice|web_search|Sarah|scripted-model"))
    shot(page, "18-second-user")


def test_api_errors_show_the_servers_message(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    page.goto(site.url + "/")
    page.get_by_label("API key").fill("lm_0123456789abcdef_not-a-real-secret")
    page.get_by_label("API key").press("Enter")  # the keyboard alone signs in
    expect(page.get_by_role("alert")).to_contain_text("this API key is unknown or revoked")
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    page.get_by_label("Entity").fill("no colon here")
    page.get_by_label("Entity").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("entity must look like 'type:name'")
    shot(page, "19-api-error")


# editing, small screens, second clicks -----------------------------------------------------
def sideways(page: Page) -> int:
    """How many pixels the page scrolls sideways (0: it fits the screen)."""
    overflow: int = page.evaluate(
        "() => document.documentElement.scrollWidth - window.innerWidth")
    return overflow


def _edit(page: Page, site: Site, words: str, content: str) -> str:
    """Open the memory ``content`` on Knowledge and its Edit form; returns its id."""
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    _open_by_search(page, words, content)
    item_id = page.locator("#item-detail code").first.inner_text()
    page.get_by_role("button", name="Edit", exact=True).click()
    return item_id


def test_a_cleared_confidence_is_left_unchanged(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    item_id = _edit(page, site, "aisle seats trains", "Prefers aisle seats on trains")
    page.get_by_label("Confidence").fill("")
    page.get_by_role("button", name="Save").click()   # nothing else changed: nothing saved
    expect(page.locator("#item-detail .item-content")).to_have_text(
        "Prefers aisle seats on trains")
    assert site.reader.for_user("alice").get(item_id).confidence == 0.7
    page.get_by_role("button", name="Edit", exact=True).click()
    page.get_by_label("Content").fill("Prefers aisle seats on long trains")
    page.get_by_label("Confidence").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_have_text("Saved.")
    expect(page.locator("#item-detail .item-content")).to_have_text(
        "Prefers aisle seats on long trains")
    item = site.reader.for_user("alice").get(item_id)
    assert (item.content, item.confidence) == ("Prefers aisle seats on long trains", 0.7)
    expect(page.locator("#item-detail dl.facts")).to_contain_text("0.70")


def test_a_revision_with_the_entity_cleared_and_a_confidence_keeps_both(page: Page,
                                                                        site: Site) -> None:
    from playwright.sync_api import expect

    old_id = _edit(page, site, "Climbs with Dana", "Climbs with Dana on Thursdays")
    page.get_by_label("Content").fill("Climbs on Thursdays, alone since Dana moved")
    page.get_by_role("form", name="Edit the memory").get_by_label("Entity").fill("")
    page.get_by_label("Confidence").fill("0.42")
    page.get_by_label("Keep the old version").check()
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#toast")).to_contain_text("Saved as a new version")
    expect(page.locator("#item-detail .item-content")).to_have_text(
        "Climbs on Thursdays, alone since Dana moved")
    alice = site.reader.for_user("alice")
    old = alice.get(old_id)
    assert old.superseded_by is not None and old.entity == "person:dana"  # history kept
    new = alice.get(old.superseded_by)
    assert (new.content, new.entity, new.confidence) \
        == ("Climbs on Thursdays, alone since Dana moved", None, 0.42)
    # one event made the new version as it is: no edit of it afterwards
    assert [e.kind for e in alice.history(new.id) if e.subject_id == new.id] \
        == ["memory.added"]
    expect(page.locator("#item-detail code").first).to_have_text(new.id)
    expect(page.get_by_role("alert")).to_have_count(0)


def test_a_double_click_on_save_revises_once(page: Page, site: Site) -> None:
    """The revision is held back while Save is clicked twice: one request is sent,
    Save is disabled until it is answered, and no error follows."""
    from playwright.sync_api import expect

    held = held_back(page, "**/v1/memories/*/revise", lambda _, held: not held)
    old_id = _edit(page, site, "spare key neighbour", "Keeps the spare key with the neighbour")
    page.get_by_label("Content").fill("Keeps the spare key in the garden shed")
    page.get_by_label("Keep the old version").check()
    save = page.get_by_role("button", name="Save")
    save.dblclick()
    page.wait_for_timeout(300)
    assert len(held) == 1
    expect(save).to_be_disabled()
    held[0].continue_()
    expect(page.locator("#toast")).to_contain_text("Saved as a new version")
    expect(page.locator("#item-detail .item-content")).to_have_text(
        "Keeps the spare key in the garden shed")
    page.wait_for_timeout(300)   # a second request would have failed by now
    expect(page.get_by_role("alert")).to_have_count(0)
    old = site.reader.for_user("alice").get(old_id)
    assert old.superseded_by is not None
    assert site.reader.for_user("alice").get(old.superseded_by).superseded_by is None


def test_a_double_click_decides_a_proposal_once(page: Page, site: Site) -> None:
    """Approve, and Approve with changes, clicked twice while the first request is
    held back: one request each, the queue's buttons disabled meanwhile, no error."""
    from playwright.sync_api import expect

    alice = site.reader.for_user("alice")
    plain, edited = (p.id for p in alice.propose([
        Finding("Takes the 8:10 train on weekdays", context="travel"),
        Finding("Drinks decaf after noon", category="preference", context="personal"),
    ], proposer="reflection"))
    held = held_back(page, "**/v1/proposals/**", lambda route, _: route.request.method == "POST")
    sign_in(page, site, site.alice)
    open_page(page, "Review queue")

    def row(pid: str) -> Any:
        return page.locator(f"#review-results tbody tr[data-id='{pid}']")

    approve = row(plain).get_by_role("button", name="Approve", exact=True)
    approve.dblclick()
    page.wait_for_timeout(300)
    assert len(held) == 1
    expect(approve).to_be_disabled()
    expect(row(edited).get_by_role("button", name="Edit…")).to_be_disabled()
    held.pop().continue_()
    expect(page.locator("#toast")).to_have_text("Approved.")
    expect(row(plain)).to_have_count(0)

    row(edited).get_by_role("button", name="Edit…").click()
    page.get_by_label("Content").fill("Drinks decaf after 2 pm")
    submit = page.get_by_role("button", name="Approve with changes")
    submit.dblclick()
    page.wait_for_timeout(300)
    assert len(held) == 1
    expect(submit).to_be_disabled()
    held.pop().continue_()
    expect(page.locator("#toast")).to_have_text("Approved with changes.")
    page.wait_for_timeout(300)   # a second decision would have failed by now
    expect(page.get_by_role("alert")).to_have_count(0)
    assert (alice.proposal(plain).status, alice.proposal(edited).status) == (
        "approved", "edited")
    shot(page, "23-review-after-double-clicks")


def test_overdue_reminders_are_marked_on_the_overview(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    due = page.locator("#due-soon")
    expect(due.get_by_role("heading")).to_have_text("Due within 7 days or overdue")
    expect(due.locator("tr", has_text="Return the library books").locator(
        ".badge.overdue")).to_have_text("overdue")
    expect(due.locator("tr", has_text="Renew the passport")).to_be_visible()
    expect(due.locator(".badge.overdue")).to_have_count(1)
    shot(page, "24-overview-overdue")


def test_on_a_phone_an_opened_memory_is_scrolled_into_view(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    page.set_viewport_size(PHONE)
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    wait_summary(page, site.total(), 1)
    page.locator("#kb-results tbody tr[data-id]").nth(1).get_by_role("button").click()
    detail = page.locator("#item-detail")
    expect(detail.locator(".item-content")).to_be_visible()
    page.wait_for_timeout(200)
    box = detail.bounding_box()
    assert box is not None
    assert 0 <= box["y"] < PHONE["height"] / 2, box   # its top is on screen
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert sideways(page) == 0
    shot(page, "m-knowledge-memory")
    page.get_by_role("button", name="Close the memory panel").click()
    expect(detail).to_be_hidden()
    row = page.locator("#kb-results tbody tr[data-id]").nth(1)
    expect(row.get_by_role("button")).to_be_focused()   # back where the user was
    expect(row).to_be_in_viewport()


def test_on_a_phone_the_filters_fit_in_one_column(page: Page, site: Site) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, site, site.alice)
    open_page(page, "Knowledge")
    wait_summary(page, site.total(), 1)
    boxes = page.locator("form.filters .field").evaluate_all("""fields => fields.map(f => {
        const box = f.getBoundingClientRect();
        return [box.left, box.right];
    })""")
    form = page.locator("form.filters").bounding_box()
    assert form is not None and form["x"] + form["width"] <= PHONE["width"]
    assert len({round(left) for left, _ in boxes}) == 1, boxes   # one column
    assert all(right <= form["x"] + form["width"] for _, right in boxes), boxes
    assert sideways(page) == 0
    shot(page, "m-knowledge")


@pytest.mark.parametrize("name", ["Overview", "Knowledge", "Review queue",
                                  "Entities & contexts", "Sessions", "Activity timeline",
                                  "Tools & errors", "LLM usage", "Maintenance"])
def test_on_a_phone_no_page_scrolls_sideways(page: Page, site: Site, name: str) -> None:
    """Wide tables scroll inside their own box; the page itself fits the screen."""
    from playwright.sync_api import expect

    page.set_viewport_size(PHONE)
    sign_in(page, site, site.alice)
    open_page(page, name)
    expect(page.locator("#page-title")).to_have_text(name)
    expect(page.locator("main .panel").first).to_be_visible()
    if name == "Sessions":
        page.get_by_role("button", name="alice:web").click()
        expect(page.locator("#turns li")).to_have_count(4)
    page.wait_for_timeout(200)   # the page's data has arrived and been drawn
    assert sideways(page) == 0
    shot(page, "m-" + re.sub(r"\W+", "-", name.lower()))


def test_a_long_tool_error_is_shown_in_a_few_readable_lines(page: Page, site: Site) -> None:
    """Clamped to a few lines of a readable width (the table scrolls sideways on a
    phone), with the whole error a click away."""
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    for viewport in (PHONE, DESKTOP):
        page.set_viewport_size(viewport)
        open_page(page, "Overview")
        open_page(page, "Tools & errors")
        row = page.locator("tr[data-tool=db_query]")
        cell = row.locator("td.error-text")
        expect(cell).to_contain_text(LONG_ERROR[:40])
        box = cell.bounding_box()
        assert box is not None and box["width"] >= 200, box
        height = row.bounding_box()
        assert height is not None and height["height"] < 150, height
        assert sideways(page) == 0
        shot(page, "m-tools" if viewport is PHONE else "25-tools-long-error")
        cell.get_by_role("button", name="Show all").click()
        assert cell.evaluate("c => c.querySelector('.clamped').scrollHeight "
                             "<= c.querySelector('.clamped').clientHeight")
        expect(cell).to_contain_text(LONG_ERROR.strip())
        expect(cell.get_by_role("button", name="Show less")).to_have_attribute(
            "aria-expanded", "true")
        for heading, text in (("Recent failed calls", "db_query"),
                              ("Known errors (error memories)", "Tool db_query failed")):
            other = page.locator("section", has=page.get_by_role("heading", name=heading)
                                 ).locator("tbody tr", has_text=text)
            other_box = other.bounding_box()
            assert other_box is not None and other_box["height"] < 150, (heading, other_box)


# the dashboard's own route --------------------------------------------------------------
def test_the_maintenance_log_reads_what_maintenance_did_from_the_ledger(
        tmp_path: Path, clock: FakeClock) -> None:
    mem = Memory(SQLiteStore(tmp_path / "m.db"), embedder=HashEmbedder(), clock=clock)
    alice = mem.for_user("alice")
    alice.add_turns([{"role": "user", "content": "an old message"}])
    for text in ("Old fact one", "Old fact two about tea", "Old fact three about chess"):
        alice.remember(text)
    clock.advance(days=31)
    alice.maintain()  # decays the three
    clock.advance(days=60)
    alice.maintain()  # decays them again, and prunes the turn (older than 90 days)
    with app_over(mem) as api:
        log = api.ok("GET", LOG_ROUTE, api.alice)
        assert [(e["step"], e["counts"]) for e in log] == [
            ("prune", {"items": 0, "turns": 1, "tool_calls": 0}),
            ("decay", {"items": 3}), ("decay", {"items": 3})]
        assert log[1]["detail"] == {"factor": 0.9} and log[0]["ts"] == clock.iso()
        assert "Old fact" not in json.dumps(log)  # no stored text
        assert api.ok("GET", LOG_ROUTE, api.alice, params={"limit": 1}) == log[:1]
        assert api.ok("GET", LOG_ROUTE, api.alice, params={"days": 30}) == log[:2]
        assert api.ok("GET", LOG_ROUTE, api.admin, user="alice") == log
        assert api.ok("GET", LOG_ROUTE, api.bob) == []
        refused = api.call("GET", LOG_ROUTE, api.alice, params={"days": -1})
        assert refused.status_code == 422 and "days" in refused.json()["error"]["message"]
        assert api.call("GET", LOG_ROUTE, None).status_code == 401
        assert api.call("GET", LOG_ROUTE, api.admin).status_code == 422  # for whom?
        assert LOG_ROUTE in api.ok("GET", "/openapi.json", api.alice)["paths"]
    mem.close()


def test_every_dashboard_file_ships_in_the_package() -> None:
    """A non-editable install serves the dashboard: package-data names each file."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["ledgermem"]
    files = [path.relative_to(ROOT / "ledgermem").as_posix()
             for path in DASHBOARD_DIR.rglob("*") if path.is_file()]
    assert "server/dashboard/index.html" in files
    missing = [name for name in files
               if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns)]
    assert missing == []
