"""The browser scanners: bookmarks (sites and interests) and history (top sites).

Profiles of Chrome, Chromium, Edge and Brave (``Bookmarks`` JSON, ``History``
SQLite) and of Firefox (``places.sqlite``) are found where each platform keeps them.
Only addresses, bookmark folder names and visit times are read, never page titles or
content; of an address only its site (the host name) is kept. A browser's SQLite
databases are read from a copy (``host.database_copy``), never the live file, which a
running browser holds locked. History findings are always sensitive.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..types import Finding
from .host import Found, Host, ScanOptions, database_copy, shown_path

__all__ = ["SITE_TOPICS", "Profile", "browser_profiles", "scan_bookmarks", "scan_history",
           "site_of"]

_CHROMIUM: dict[str, dict[str, tuple[str, ...]]] = {
    # browser → platform → where its user data folder is (see ``_places``)
    "Chrome": {"linux": ("config:google-chrome",
                         "home:.var/app/com.google.Chrome/config/google-chrome"),
               "darwin": ("library:Application Support/Google/Chrome",),
               "win32": ("local:Google/Chrome/User Data",)},
    "Chromium": {"linux": ("config:chromium", "home:snap/chromium/common/chromium"),
                 "darwin": ("library:Application Support/Chromium",),
                 "win32": ("local:Chromium/User Data",)},
    "Edge": {"linux": ("config:microsoft-edge",),
             "darwin": ("library:Application Support/Microsoft Edge",),
             "win32": ("local:Microsoft/Edge/User Data",)},
    "Brave": {"linux": ("config:BraveSoftware/Brave-Browser",),
              "darwin": ("library:Application Support/BraveSoftware/Brave-Browser",),
              "win32": ("local:BraveSoftware/Brave-Browser/User Data",)},
}
_FIREFOX: dict[str, tuple[str, ...]] = {
    "linux": ("home:.mozilla/firefox", "home:snap/firefox/common/.mozilla/firefox",
              "home:.var/app/org.mozilla.firefox/.mozilla/firefox"),
    "darwin": ("library:Application Support/Firefox/Profiles",),
    "win32": ("roaming:Mozilla/Firefox/Profiles",),
}

SITE_TOPICS: dict[str, tuple[str, ...]] = {
    "software development": (
        "github.com", "gitlab.com", "bitbucket.org", "stackoverflow.com",
        "stackexchange.com", "docs.python.org", "pypi.org", "npmjs.com", "crates.io",
        "developer.mozilla.org", "readthedocs.io", "go.dev", "rust-lang.org",
        "docs.rs", "kubernetes.io", "hub.docker.com", "huggingface.co"),
    "news": ("news.ycombinator.com", "nytimes.com", "bbc.co.uk", "bbc.com",
             "theguardian.com", "reuters.com", "washingtonpost.com", "lemonde.fr",
             "spiegel.de", "elpais.com", "apnews.com", "economist.com"),
    "social media": ("reddit.com", "twitter.com", "x.com", "facebook.com",
                     "instagram.com", "linkedin.com", "mastodon.social", "bsky.app",
                     "tiktok.com"),
    "video": ("youtube.com", "vimeo.com", "twitch.tv", "netflix.com", "primevideo.com"),
    "music": ("spotify.com", "soundcloud.com", "bandcamp.com", "music.apple.com"),
    "shopping": ("amazon.com", "amazon.co.uk", "amazon.de", "ebay.com", "etsy.com",
                 "aliexpress.com"),
    "travel": ("booking.com", "airbnb.com", "tripadvisor.com", "expedia.com",
               "skyscanner.net", "kayak.com"),
    "cooking": ("allrecipes.com", "seriouseats.com", "bbcgoodfood.com", "epicurious.com",
                "food52.com", "budgetbytes.com"),
    "learning": ("coursera.org", "edx.org", "khanacademy.org", "udemy.com",
                 "duolingo.com", "wikipedia.org"),
    "science": ("arxiv.org", "nature.com", "science.org", "pubmed.ncbi.nlm.nih.gov"),
    "health": ("webmd.com", "mayoclinic.org", "nhs.uk", "healthline.com",
               "myfitnesspal.com", "strava.com"),
    "finance": ("paypal.com", "coinbase.com", "binance.com", "robinhood.com",
                "investing.com", "bloomberg.com"),
    "games": ("store.steampowered.com", "steamcommunity.com", "epicgames.com",
              "itch.io", "chess.com", "lichess.org"),
    "design": ("figma.com", "dribbble.com", "behance.net", "canva.com"),
}
"""Topics of well-known sites (a subdomain counts for its site)."""
SENSITIVE_TOPICS = frozenset({"health", "finance"})
"""Topics whose findings are flagged sensitive (kept out of prompts once approved)."""
_TOPIC_OF = {site: topic for topic, sites in SITE_TOPICS.items() for site in sites}

GENERIC_FOLDERS = frozenset({
    "bookmarks bar", "bookmarks toolbar", "bookmarks menu", "other bookmarks",
    "mobile bookmarks", "imported", "imported from firefox", "imported from chrome",
    "imported from edge", "imported from safari", "new folder", "misc", "other",
    "unsorted", "unsorted bookmarks", "favorites", "favourites", "folder"})
"""Bookmark folder names that say nothing about an interest."""

_FIREFOX_ROOTS = {"root________", "menu________", "toolbar_____", "unfiled_____",
                  "mobile______"}
_FIREFOX_TAGS = "tags________"
_CHROME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)
_MIN_SITE_BOOKMARKS = 3
_MAX_EXAMPLES = 5


@dataclass(frozen=True)
class Profile:
    """One browser profile folder: the browser, its engine family, and where it is."""

    browser: str
    family: str
    path: Path


def _places(host: Host, spec: str) -> Path:
    base, _, rest = spec.partition(":")
    folder = {"config": host.config_home(), "home": host.home, "library": host.library(),
              "local": host.local_app_data(), "roaming": host.app_data()}[base]
    return folder.joinpath(*rest.split("/"))


def browser_profiles(host: Host, wanted: str) -> list[Profile]:
    """The profiles holding ``wanted`` (``bookmarks`` or ``history``) on this host."""
    profiles = []
    chrome_file = "Bookmarks" if wanted == "bookmarks" else "History"
    for browser, by_platform in _CHROMIUM.items():
        for spec in by_platform.get(host.platform, ()):
            folder = _places(host, spec)
            if folder.is_dir():
                profiles += [Profile(browser, "chromium", p.parent)
                             for p in sorted(folder.glob(f"*/{chrome_file}")) if p.is_file()]
    for spec in _FIREFOX.get(host.platform, ()):
        folder = _places(host, spec)
        if folder.is_dir():
            profiles += [Profile("Firefox", "firefox", p.parent)
                         for p in sorted(folder.glob("*/places.sqlite")) if p.is_file()]
    return profiles


def site_of(url: str) -> str | None:
    """The site of a web address (its host, without ``www.``); None for anything
    that is no public web page (``file:``, ``about:``, ``localhost``, an IP)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host or "." not in host:
        return None
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    return host.removeprefix("www.")


def _topic(site: str) -> str | None:
    labels = site.split(".")
    return next((_TOPIC_OF[".".join(labels[i:])] for i in range(len(labels) - 1)
                 if ".".join(labels[i:]) in _TOPIC_OF), None)


# bookmarks ----------------------------------------------------------------------------
@dataclass
class _Bookmarks:
    """Bookmarked sites, overall and per top-level folder."""

    sites: Counter[str] = field(default_factory=Counter)
    folders: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, folder: str | None, url: str) -> None:
        site = site_of(url)
        if site is None:
            return
        self.sites[site] += 1
        if folder and folder.strip().lower() not in GENERIC_FOLDERS:
            self.folders.setdefault(folder.strip(), Counter())[site] += 1


def _chrome_bookmarks(path: Path, into: _Bookmarks) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    roots = data.get("roots") if isinstance(data, dict) else None
    if not isinstance(roots, dict):
        raise ValueError("no 'roots' object: not a Bookmarks file")
    for root in roots.values():
        if isinstance(root, dict):
            for node in root.get("children") or []:
                folder = node.get("name") if node.get("type") == "folder" else None
                for url in _chrome_urls(node):
                    into.add(folder, url)


def _chrome_urls(node: Any) -> Iterator[str]:
    if not isinstance(node, dict):
        return
    if node.get("type") == "url" and isinstance(node.get("url"), str):
        yield node["url"]
    for child in node.get("children") or []:
        yield from _chrome_urls(child)


def _firefox_bookmarks(path: Path, into: _Bookmarks) -> None:
    with database_copy(path) as conn:
        rows = conn.execute(
            "SELECT b.id, b.type, b.parent, b.title, b.guid, p.url FROM moz_bookmarks AS b "
            "LEFT JOIN moz_places AS p ON p.id = b.fk").fetchall()
    nodes = {row[0]: row for row in rows}
    for _, kind, parent, _, _, url in rows:
        if kind != 1 or not url:
            continue
        chain: list[Any] = []  # the bookmark's folders, from its parent up to a root
        while parent in nodes and len(chain) < 100:
            chain.append(nodes[parent])
            parent = nodes[parent][2]
        guids = [node[4] for node in chain]
        if _FIREFOX_TAGS in guids:
            continue  # a tag entry, not a bookmark of its own
        below_root = [node for node in chain if node[4] not in _FIREFOX_ROOTS]
        into.add(below_root[-1][3] if below_root else None, url)


def _examples(sites: Counter[str]) -> str:
    top = [site for site, _ in sorted(sites.items(), key=lambda p: (-p[1], p[0]))]
    return ", ".join(top[:_MAX_EXAMPLES]) + (", …" if len(top) > _MAX_EXAMPLES else "")


def scan_bookmarks(host: Host, options: ScanOptions) -> Found:
    """Findings: an interest per bookmark folder (its name and sites), a topic per kind
    of well-known site bookmarked, and sites with many bookmarks of their own."""
    found = Found()
    profiles = browser_profiles(host, "bookmarks")
    if not profiles:
        found.problems.append("no browser profile with bookmarks found (Chrome, Chromium, "
                              "Edge, Brave, Firefox)")
        return found
    marks = _Bookmarks()
    for profile in profiles:
        where = f"{profile.browser} profile {shown_path(profile.path, host)}"
        try:
            if profile.family == "chromium":
                _chrome_bookmarks(profile.path / "Bookmarks", marks)
            else:
                _firefox_bookmarks(profile.path / "places.sqlite", marks)
        except Exception as exc:  # unreadable, locked, damaged: reported, others go on
            found.failed(where, exc)
    browsers = ", ".join(sorted({p.browser for p in profiles}))
    for folder, sites in sorted(marks.folders.items()):
        count = sum(sites.values())
        found.add(Finding(
            content=f"Is interested in {folder} (keeps {count} bookmark"
                    f"{'' if count == 1 else 's'} on it: {_examples(sites)})",
            category="preference", entity=f"topic:{folder}",
            sensitive=any(_topic(site) in SENSITIVE_TOPICS for site in sites),
            why=f"a bookmark folder named {folder!r} ({browsers})",
            key=f"bookmarks:folder:{folder.lower()}"))
    by_topic: dict[str, Counter[str]] = {}
    for site, count in marks.sites.items():
        topic = _topic(site)
        if topic is not None:
            by_topic.setdefault(topic, Counter())[site] += count
    for topic, sites in sorted(by_topic.items()):
        found.add(Finding(
            content=f"Bookmarks {topic} sites ({_examples(sites)})", category="preference",
            entity=f"topic:{topic}", sensitive=topic in SENSITIVE_TOPICS,
            why=f"{sum(sites.values())} bookmarks of well-known {topic} sites ({browsers})",
            key=f"bookmarks:topic:{topic}"))
    for site, count in sorted(marks.sites.items(), key=lambda p: (-p[1], p[0])):
        if count >= _MIN_SITE_BOOKMARKS and _topic(site) is None:
            found.add(Finding(
                content=f"Bookmarks many pages of {site} ({count} bookmarks)",
                entity=f"site:{site}", why=f"{count} bookmarks ({browsers})",
                key=f"bookmarks:site:{site}"))
    return found


# history ------------------------------------------------------------------------------
def _chrome_visits(path: Path, since: datetime) -> list[tuple[str, int]]:
    cutoff = int((since - _CHROME_EPOCH) / timedelta(microseconds=1))
    with database_copy(path) as conn:
        return conn.execute(
            "SELECT u.url, count(*) FROM visits AS v JOIN urls AS u ON u.id = v.url "
            "WHERE v.visit_time >= ? GROUP BY u.url", (cutoff,)).fetchall()


def _firefox_visits(path: Path, since: datetime) -> list[tuple[str, int]]:
    cutoff = int(since.timestamp() * 1_000_000)
    with database_copy(path) as conn:
        return conn.execute(
            "SELECT p.url, count(*) FROM moz_historyvisits AS v JOIN moz_places AS p "
            "ON p.id = v.place_id WHERE v.visit_date >= ? GROUP BY p.url",
            (cutoff,)).fetchall()


def scan_history(host: Host, options: ScanOptions) -> Found:
    """Findings: the ``options.top_sites`` sites most visited over the last
    ``options.days`` days, across profiles, each flagged sensitive. Addresses only,
    read from a copy of each history database."""
    found = Found()
    profiles = browser_profiles(host, "history")
    if not profiles:
        found.problems.append("no browser profile with history found (Chrome, Chromium, "
                              "Edge, Brave, Firefox)")
        return found
    since = (options.now or datetime.now(UTC)) - timedelta(days=options.days)
    visits: Counter[str] = Counter()
    seen_in: dict[str, set[str]] = {}
    for profile in profiles:
        try:
            rows = (_chrome_visits(profile.path / "History", since)
                    if profile.family == "chromium"
                    else _firefox_visits(profile.path / "places.sqlite", since))
        except Exception as exc:  # unreadable, locked, damaged: reported, others go on
            found.failed(f"{profile.browser} history {shown_path(profile.path, host)}", exc)
            continue
        for url, count in rows:
            site = site_of(str(url))
            if site is not None:
                visits[site] += int(count)
                seen_in.setdefault(site, set()).add(profile.browser)
    top = sorted(visits.items(), key=lambda p: (-p[1], p[0]))[:options.top_sites]
    for site, count in top:
        found.add(Finding(
            content=f"Often visits {site} ({count} visits in the last {options.days} days)",
            entity=f"site:{site}", sensitive=True,
            why=f"{', '.join(sorted(seen_in[site]))} history: addresses only",
            key=f"history:site:{site}"))
    return found
