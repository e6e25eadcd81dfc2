"""The dashboard under attack, in real headless Chromium against a real ``ledgermem
serve``: markup and script stored in every field a client can write (content, entity,
context, metadata, a revision, a reason, a session id, a turn, a tool's name, arguments
and error, a proposal's fields, even a user id) is shown as text on every page, for
the user's key and for the admin's; another site cannot frame the dashboard; and the
key is kept for the tab only (``sessionStorage``), never in ``localStorage``, and
dropped at sign-out.

Without Chromium or Playwright the tests skip, except with ``CI`` set (as
``tests/test_dashboard.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import pytest

from ledgermem import Finding, Memory
from ledgermem.server.keys import KeyRing
from tests.server_support import Served, chromium, free_port, serve_env, start_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page



def payload(n: int) -> str:
    """Markup that sets ``window.__pwned`` to ``n`` if it ever becomes HTML."""
    return f'<img src=x onerror="window.__pwned={n}"><script>window.__pwned={n}</script>'


EVIL_USER = '<img src=x onerror="window.__pwned=99">'
JS_LINK = "javascript:window.__pwned=50"
PAGES = ("Overview", "Knowledge", "Review queue", "Entities & contexts", "Sessions",
         "Activity timeline", "Tools & errors", "LLM usage", "Maintenance")
INJECTED = "main img, main script, main iframe, main object, main embed, #who img, " \
           "nav img, a[href^='javascript:' i], [onerror], [onclick]"
"""What stored markup would leave in the page had it been parsed (the dashboard adds
no image, no script and no inline handler of its own)."""


@dataclass
class Site:
    served: Served
    alice: str


def _seed(memory: Memory) -> None:
    alice = memory.for_user("alice")
    first = alice.remember(payload(1), "note", context=payload(2), domain=payload(3),
                           entity=f"person:{payload(4)}", metadata={payload(5): payload(6)})
    alice.revise(first.id, payload(7), reason=payload(8))           # history and lineage
    wrong = alice.remember(JS_LINK, "fact", entity=f"link:{JS_LINK}")
    alice.invalidate(wrong.id, reason=payload(9))
    alice.remember(payload(10), "error", entity="tool:x")
    alice.add_turns([{"role": "user", "content": payload(11), "name": payload(12)},
                     {"role": "assistant", "content": JS_LINK}], session_id=payload(13))
    alice.log_tool_call(payload(14), {payload(15): payload(16)}, error=payload(17),
                        duration_ms=3.0, session_id=payload(18))
    alice.propose([Finding(payload(19), context=payload(20), entity=f"org:{payload(21)}",
                           why=payload(22), key=payload(23))], proposer=payload(24))
    alice.record("agent.spoke", {"text": payload(25)}, agent_id=payload(26))
    memory.for_user(EVIL_USER).remember(payload(27))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("dashboard-security")
    db = folder / "memory.db"
    with Memory.open(db, embedder=None) as memory:
        _seed(memory)
        alice, _ = KeyRing(memory.store).create("alice")
    served = start_server(["serve", "--db", str(db), "--port", str(free_port())],
                          serve_env(folder / "data"))
    try:
        yield Site(served, alice)
    finally:
        code, _ = served.stop()
        assert code == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(locale="en-US", timezone_id="UTC")
    context.set_default_timeout(15_000)
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    opened = context.new_page()
    crashes: list[str] = []
    opened.on("pageerror", lambda error: crashes.append(str(error)))
    yield opened
    pwned = opened.evaluate("() => window.__pwned")
    context.close()
    assert crashes == [], crashes
    assert pwned is None, f"stored text ran as script ({pwned})"


def sign_in(page: Page, site: Site, key: str) -> None:
    page.goto(site.served.url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def assert_inert(page: Page, where: str) -> None:
    assert page.evaluate("() => window.__pwned") is None, where
    found = page.locator(INJECTED).evaluate_all("nodes => nodes.map(n => n.outerHTML)")
    assert found == [], where


def visit_every_page(page: Page) -> None:
    """Every page, and on those with more to open, what opens: a memory's panel with
    its history and lineage, a session's turns, the decided proposals."""
    from playwright.sync_api import expect

    nav = page.get_by_role("navigation", name="Dashboard pages")
    for name in PAGES:
        nav.get_by_role("link", name=name).click()
        expect(page.locator("#page-title")).to_have_text(name)
        page.wait_for_load_state("networkidle")
        assert_inert(page, name)
        if name == "Knowledge":
            results = page.locator("#kb-results tbody")
            expect(results).to_contain_text(payload(7))
            page.get_by_label("Versions").select_option("1")
            expect(results).to_contain_text(JS_LINK)
            for row in range(page.locator("#kb-results tbody tr[data-id]").count()):
                page.locator("#kb-results tbody tr[data-id]").nth(row).get_by_role(
                    "button").first.click()
                expect(page.locator("#item-history")).to_be_visible()
                page.wait_for_load_state("networkidle")
                assert_inert(page, f"memory panel {row}")
            expect(page.locator("#item-detail")).to_contain_text(payload(1))
        elif name == "Sessions":
            page.get_by_role("button", name=payload(13)).click()
            expect(page.locator("#turns li")).to_have_count(2)
            expect(page.locator("#turns li").first).to_contain_text(payload(11))
            assert_inert(page, "turns")
        elif name == "Review queue":
            expect(page.locator("#review-results")).to_contain_text(payload(19))
            page.get_by_label("Show").select_option("all")
            page.wait_for_load_state("networkidle")
            assert_inert(page, "all proposals")
        elif name == "Tools & errors":
            expect(page.locator("main")).to_contain_text(payload(17))


def test_stored_markup_stays_text_on_every_page(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    expect(page.locator("#acting-user")).to_have_text("alice")
    visit_every_page(page)


def test_the_admins_user_picker_shows_a_user_id_as_text(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    assert site.served.admin_key is not None
    sign_in(page, site, site.served.admin_key)
    expect(page.get_by_role("heading", name="Pick a user")).to_be_visible()
    expect(page.locator("main")).to_contain_text(EVIL_USER)
    assert_inert(page, "user picker")
    page.get_by_label("Acting for").select_option(EVIL_USER)
    expect(page.locator("#page-title")).to_have_text("Overview")
    page.wait_for_load_state("networkidle")
    assert_inert(page, "acting for the user with markup in its id")
    page.get_by_label("Acting for").select_option("alice")
    visit_every_page(page)


@contextmanager
def attacker_site(framed_url: str) -> Iterator[str]:
    """A page on another origin (another loopback port) that frames ``framed_url``."""
    body = (f'<p>Win a prize!</p><iframe id="framed" src="{framed_url}"></iframe>').encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_another_site_cannot_frame_the_dashboard(page: Page, site: Site) -> None:
    with attacker_site(f"{site.served.url}/") as attacker:
        page.goto(attacker)
        page.wait_for_load_state("networkidle")
        framed = [frame for frame in page.frames if frame != page.main_frame]
        assert len(framed) == 1
        # The refused frame shows the browser's error page, never the dashboard's sign-in.
        assert framed[0].url.startswith("chrome-error://"), framed[0].url
        assert framed[0].locator("input[name=key]").count() == 0


def test_the_key_is_kept_for_the_tab_only_and_dropped_at_sign_out(page: Page,
                                                                   site: Site) -> None:
    from playwright.sync_api import expect

    sign_in(page, site, site.alice)
    expect(page.locator("#acting-user")).to_have_text("alice")
    local = page.evaluate("() => JSON.stringify(Object.entries(localStorage))")
    assert site.alice not in local
    assert page.evaluate("() => sessionStorage.getItem('ledgermem.key')") == site.alice
    assert page.evaluate("() => document.cookie") == ""
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    kept = page.evaluate("() => JSON.stringify([Object.entries(sessionStorage), "
                         "Object.entries(localStorage)])")
    assert site.alice not in kept


def test_the_api_documentation_renders_from_the_server_alone(browser: Browser,
                                                             site: Site) -> None:
    """Swagger UI renders in Chromium with every request to the server itself (it came
    from a CDN: an offline machine got a blank page, and a third party learnt each
    visit) and nothing the page's policy refuses."""
    from playwright.sync_api import expect

    context = browser.new_context()
    context.set_default_timeout(15_000)
    asked: list[str] = []
    context.on("request", lambda request: asked.append(request.url))
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on("console", lambda message: problems.append(message.text)
              if message.type == "error" else None)
    try:
        opened.goto(site.served.url + "/docs")
        expect(opened.locator(".opblock").first).to_be_visible(timeout=15_000)
        assert opened.locator(".opblock").count() > 50   # every route, from /openapi.json
    finally:
        context.close()
    elsewhere = [url for url in asked
                 if not url.startswith((site.served.url, "data:", "blob:"))]
    assert elsewhere == []
    assert problems == []
