"""System discovery: every scanner against a home directory the test builds with real
files (a git repository made by ``git``, ``.desktop`` entries, a Chrome ``Bookmarks``
JSON and ``History`` database, a Firefox ``places.sqlite``, a Thunderbird profile),
what the findings say and flag, that a scanner failing is reported while the others go
on, that a browser database is read from a copy while the browser holds it locked,
and that nothing a scan finds is stored or shown until a person approves it (Python
API and CLI, on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledgermem import Finding, InvalidInput, Memory
from ledgermem.agent import system_prefix
from ledgermem.bootstrap import SCANNERS, Host, ScanOptions, finding_id, scan
from ledgermem.bootstrap.git import parse_git_config, parse_remote
from ledgermem.cli import main
from tests.support import snapshot

NOW = datetime.now(UTC).replace(microsecond=0)
TOKEN = "ghp-secrettoken42"
"""A credential inside a remote URL: it must never reach a finding."""
CONTENT = "zebracontentmarker"
"""Written inside files: a scanner that reads file contents would leak it."""
CHROME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=Ann", "-c",
                    "user.email=ann@work.example", "-c", "init.defaultBranch=main", *args],
                   check=True, capture_output=True, timeout=60)


# the home directory ------------------------------------------------------------------
def make_projects(home: Path) -> None:
    widgets = home / "code" / "widgets"
    for name in ("app.py", "models.py", "cli.py", "web/index.ts", "web/api.ts"):
        write(widgets / name, f"# {CONTENT}\n")
    write(widgets / "README.md", CONTENT)
    for n in range(30):  # dependencies: not the project's language
        write(widgets / "node_modules" / "dep" / f"m{n}.js", CONTENT)
    git(widgets, "init", "-q")
    git(widgets, "remote", "add", "origin", f"https://ann:{TOKEN}@github.com/acme/widgets.git")
    git(widgets, "remote", "add", "backup", "git@gitlab.com:ann/widgets-mirror.git")
    git(widgets, "add", "app.py")
    git(widgets, "commit", "-q", "-m", f"first {CONTENT}")
    git(widgets, "branch", "feature/login")
    git(widgets, "pack-refs", "--all")
    git(widgets, "branch", "fix-typo")
    for name in ("main.rs", "lib.rs"):
        write(home / "code" / "scratch" / name, CONTENT)            # source files, no marker
    write(home / "projects" / "acme" / "tool" / "package.json", "{}")   # two levels down
    write(home / "projects" / "acme" / "tool" / "index.js", CONTENT)
    write(home / "code" / "notes" / "todo.txt", CONTENT)             # no project
    write(home / "Documents" / "taxes.pdf", CONTENT)                 # not a code folder


def make_apps(home: Path, root: Path) -> None:
    system = root / "usr" / "share" / "applications"
    write(system / "code.desktop", "[Desktop Entry]\nType=Application\nName=Visual Studio "
          "Code\nName[de]=Visual Studio Code DE\nExec=code\nCategories=Development;IDE;\n"
          "[Desktop Action new-window]\nName=New Window\n")
    write(system / "gimp.desktop", "[Desktop Entry]\nType=Application\nName=GIMP\n"
          "Categories=Graphics;2DGraphics;\n")
    write(system / "panel.desktop", "[Desktop Entry]\nType=Application\nName=Display "
          "Settings\nCategories=Settings;HardwareSettings;\n")
    write(system / "helper.desktop", "[Desktop Entry]\nType=Application\nName=URL "
          "Helper\nNoDisplay=true\n")
    write(system / "steam.desktop", "[Desktop Entry]\nType=Application\nName=Steam\n"
          "Categories=Game;\n")
    user = home / ".local" / "share" / "applications"
    write(user / "steam.desktop", "[Desktop Entry]\nHidden=true\n")  # the user removed it
    write(user / "obsidian.desktop", "[Desktop Entry]\nType=Application\nName=Obsidian\n"
          "Categories=Office;\n")
    write(root / "var" / "lib" / "dpkg" / "status",
          "Package: docker.io\nStatus: install ok installed\nVersion: 24\n\n"
          "Package: libfoo1\nStatus: install ok installed\n\n"
          "Package: nodejs\nStatus: deinstall ok config-files\n\n"
          "Package: postgresql\nStatus: install ok installed\n")


def chrome_bookmarks(profile: Path) -> None:
    def url(name: str, address: str) -> dict[str, Any]:
        return {"date_added": "13350000000000000", "guid": name, "id": name, "name": name,
                "type": "url", "url": address}

    def folder(name: str, children: list[dict[str, Any]]) -> dict[str, Any]:
        return {"children": children, "date_added": "13350000000000000", "guid": name,
                "id": name, "name": name, "type": "folder"}

    data = {"checksum": "0" * 32, "version": 1, "roots": {
        "bookmark_bar": folder("Bookmarks bar", [
            url("GitHub", "https://github.com/acme"),
            url("SO", "https://stackoverflow.com/questions/1"),
            url("local", "http://localhost:8000/admin"),
            folder("Recipes", [url("ramen", "https://www.seriouseats.com/ramen"),
                               folder("Baking", [url("bread", "https://www.bbcgoodfood.com/b")])]),
            folder("Health", [url("sleep", "https://www.mayoclinic.org/sleep")]),
        ]),
        "other": folder("Other bookmarks", [
            url(f"blog {n}", f"https://blog.example.org/post/{n}") for n in range(3)]),
        "synced": folder("Mobile bookmarks", []),
    }}
    write(profile / "Bookmarks", json.dumps(data))


def chrome_history(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT, url LONGVARCHAR, title "
        "LONGVARCHAR, visit_count INTEGER DEFAULT 0 NOT NULL, typed_count INTEGER DEFAULT 0 "
        "NOT NULL, last_visit_time INTEGER NOT NULL, hidden INTEGER DEFAULT 0 NOT NULL);"
        "CREATE TABLE visits(id INTEGER PRIMARY KEY AUTOINCREMENT, url INTEGER NOT NULL, "
        "visit_time INTEGER NOT NULL, from_visit INTEGER, transition INTEGER DEFAULT 0 NOT "
        "NULL, segment_id INTEGER, visit_duration INTEGER DEFAULT 0 NOT NULL);")

    def visit(address: str, days_ago: float, times: int) -> None:
        at = int((NOW - timedelta(days=days_ago) - CHROME_EPOCH) / timedelta(microseconds=1))
        url_id = conn.execute("INSERT INTO urls (url, title, last_visit_time) VALUES "
                              "(?, ?, ?)", (address, f"title {CONTENT}", at)).lastrowid
        conn.executemany("INSERT INTO visits (url, visit_time) VALUES (?, ?)",
                         [(url_id, at)] * times)

    visit("https://news.ycombinator.com/item?id=1", 1, 7)
    visit("https://www.reddit.com/r/python", 2, 5)
    visit("https://github.com/acme/widgets/pulls", 3, 4)
    visit("https://old-forum.example.net/", 400, 50)  # outside the window
    visit("file:///home/ann/notes.html", 1, 9)        # not a web site
    conn.commit()
    conn.close()


def firefox_places(path: Path) -> sqlite3.Connection:
    """A places.sqlite as Firefox keeps it: WAL mode, and the connection left open, its
    last writes still in the -wal file (returned, for the test to close)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.executescript(
        "CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url LONGVARCHAR, title "
        "LONGVARCHAR, rev_host LONGVARCHAR, visit_count INTEGER DEFAULT 0, hidden INTEGER "
        "DEFAULT 0 NOT NULL, typed INTEGER DEFAULT 0 NOT NULL, frecency INTEGER DEFAULT -1 "
        "NOT NULL, last_visit_date INTEGER, guid TEXT, foreign_count INTEGER DEFAULT 0 NOT "
        "NULL, url_hash INTEGER DEFAULT 0 NOT NULL, description TEXT, preview_image_url "
        "TEXT, site_name TEXT, origin_id INTEGER);"
        "CREATE TABLE moz_historyvisits (id INTEGER PRIMARY KEY, from_visit INTEGER, "
        "place_id INTEGER, visit_date INTEGER, visit_type INTEGER, session INTEGER, source "
        "INTEGER DEFAULT 0 NOT NULL, triggeringPlaceId INTEGER);"
        "CREATE TABLE moz_bookmarks (id INTEGER PRIMARY KEY, type INTEGER, fk INTEGER "
        "DEFAULT NULL, parent INTEGER, position INTEGER, title LONGVARCHAR, keyword_id "
        "INTEGER, folder_type TEXT, dateAdded INTEGER, lastModified INTEGER, guid TEXT, "
        "syncStatus INTEGER NOT NULL DEFAULT 0, syncChangeCounter INTEGER NOT NULL "
        "DEFAULT 1);")
    roots = [(1, 0, "", "root________"), (2, 1, "menu", "menu________"),
             (3, 1, "toolbar", "toolbar_____"), (4, 1, "tags", "tags________"),
             (5, 1, "unfiled", "unfiled_____"), (6, 1, "mobile", "mobile______")]
    conn.executemany("INSERT INTO moz_bookmarks (id, type, parent, title, guid) VALUES "
                     "(?, 2, ?, ?, ?)", roots)
    places = [(1, "https://www.booking.com/hotel/pt"), (2, "https://www.airbnb.com/rooms/1"),
              (3, "https://docs.python.org/3/"), (4, "https://www.reddit.com/r/travel"),
              (5, "https://en.wikipedia.org/wiki/Lisbon")]
    conn.executemany("INSERT INTO moz_places (id, url, title) VALUES (?, ?, 'page')", places)
    conn.executemany(
        "INSERT INTO moz_bookmarks (id, type, fk, parent, title, guid) VALUES (?, ?, ?, ?, "
        "?, ?)", [(10, 2, None, 2, "Travel", "travelfolder"),
                  (11, 1, 1, 10, "hotel", "b1"), (12, 1, 2, 10, "flat", "b2"),
                  (13, 1, 3, 3, "docs", "b3"),
                  (14, 2, None, 4, "secretfoldertag", "tag1"),   # a tag, and its entry
                  (15, 1, 4, 14, None, "b4")])
    minutes = int(NOW.timestamp() * 1_000_000)
    day = 86_400 * 1_000_000
    conn.executemany("INSERT INTO moz_historyvisits (place_id, visit_date, visit_type) "
                     "VALUES (?, ?, 1)",
                     [(4, minutes - day)] * 6 + [(5, minutes - 2 * day)] * 2
                     + [(1, minutes - 90 * day)] * 20)
    return conn


def thunderbird(home: Path) -> None:
    write(home / ".thunderbird" / "x1y2.default" / "prefs.js",
          '// Mozilla User Preferences\n'
          'user_pref("mail.identity.id1.useremail", "ann.lee@mail.example");\n'
          'user_pref("mail.identity.id1.fullName", "Ann Lee");\n'
          'user_pref("mail.server.server1.hostname", "imap.mail.example");\n'
          'user_pref("mail.identity.id2.useremail", "Ann@Work.Example");\n')


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Host]:
    """A Linux machine: a home directory and a system root, full of real files; Firefox
    is running (its places.sqlite held open, its last writes in the WAL)."""
    home, root = tmp_path / "home", tmp_path / "root"
    make_projects(home)
    make_apps(home, root)
    write(home / ".gitconfig", "[user]\n\tname = Ann Lee\n\temail = ann@work.example\n"
          "[core]\n\teditor = vim ; a comment\n")
    thunderbird(home)
    chrome = home / ".config" / "google-chrome" / "Default"
    chrome_bookmarks(chrome)
    chrome_history(chrome / "History")
    running = firefox_places(write(home / ".mozilla" / "firefox" / "ab12.default-release"
                                   / "places.sqlite").parent / "places.sqlite")
    try:
        yield Host(home=home, platform="linux", root=root)
    finally:
        running.close()


def found(host: Host, *scanners: str, **options: Any) -> tuple[list[Finding], list[str]]:
    report = scan(host, ScanOptions(now=NOW, **options), scanners)
    return list(report.findings), [f"{p.scanner}: {p.message}" for p in report.problems]


def contents(findings: list[Finding]) -> list[str]:
    return [f.content for f in findings]


def assert_no_secrets(findings: list[Finding]) -> None:
    text = json.dumps([f.__dict__ for f in findings])
    assert CONTENT not in text and TOKEN not in text and "title " not in text


# each scanner ------------------------------------------------------------------------
def test_projects_and_their_languages_from_names_alone(machine: Host) -> None:
    findings, problems = found(machine, "files")
    assert problems == []
    assert contents(findings) == [
        "Has a project named scratch in ~/code/scratch, written mostly in Rust",
        "Has a project named widgets in ~/code/widgets, written mostly in Python and "
        "TypeScript",
        "Has a project named tool in ~/projects/acme/tool, written mostly in JavaScript",
        "Writes code in JavaScript (1 project: tool)",
        "Writes code in Python (1 project: widgets)",
        "Writes code in Rust (1 project: scratch)",
        "Writes code in TypeScript (1 project: widgets)",
    ]
    assert {f.entity for f in findings} >= {"project:widgets", "language:Python"}
    assert {(f.category, f.source, f.confidence, f.sensitive) for f in findings} == {
        ("fact", "discovery", 0.4, False), ("skill", "discovery", 0.4, False)}
    assert_no_secrets(findings)


def test_projects_under_chosen_roots_only(machine: Host) -> None:
    findings, _ = found(machine, "files", roots=(machine.home / "projects",))
    assert [f.entity for f in findings] == ["project:tool", "language:JavaScript"]


def test_git_repositories_hosts_and_branches(machine: Host) -> None:
    findings, problems = found(machine, "git")
    assert problems == []
    repo, host = findings
    assert repo.content == ("Has a git repository acme/widgets (on github.com; branches: "
                            "main, feature/login and fix-typo; written in Python and "
                            "TypeScript)")
    assert repo.entity == "project:widgets" and repo.key == "git:repo:github.com/acme/widgets"
    assert "remote backup → gitlab.com/ann/widgets-mirror" in repo.why
    assert host.content == "Keeps code on github.com (1 repository: acme/widgets)"
    assert_no_secrets(findings)
    assert "ann:" not in json.dumps([f.__dict__ for f in findings])


def test_git_config_and_remote_urls_are_read_safely() -> None:
    config = parse_git_config('[remote "origin"]\n\turl = "https://x@h.io/a/b.git" # c\n'
                              "[branch.main]\n\tremote = origin\n[core]\n\tbare\n")
    assert config[("remote", "origin")]["url"] == ["https://x@h.io/a/b.git"]
    assert config[("branch", "main")]["remote"] == ["origin"]
    assert config[("core", None)]["bare"] == ["true"]
    for url, where in [("https://tok:x-oauth@github.com/a/b.git", ("github.com", "a/b")),
                       ("ssh://git@gitlab.example:2222/team/app", ("gitlab.example",
                                                                    "team/app")),
                       ("git@bitbucket.org:me/site.git", ("bitbucket.org", "me/site")),
                       ("/srv/git/private.git", (None, "private")),
                       ("C:\\repos\\thing", (None, "thing"))]:
        remote = parse_remote("origin", url)
        assert remote is not None and (remote.host, remote.path) == where


def test_installed_applications_on_linux(machine: Host) -> None:
    findings, problems = found(machine, "apps")
    assert problems == []
    assert contents(findings) == [
        "Has Visual Studio Code installed (a development tool)",
        "Has GIMP installed (a graphics application)",
        "Has Obsidian installed (an office application)",
        "Has Docker installed", "Has PostgreSQL installed",
    ]
    assert findings[0].why == "desktop entry " + str(
        machine.root / "usr/share/applications/code.desktop")


def test_installed_applications_on_macos_and_windows(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "root"
    (root / "Applications" / "Xcode.app" / "Contents").mkdir(parents=True)
    (home / "Applications" / "Obsidian.app").mkdir(parents=True)
    (root / "opt" / "homebrew" / "Cellar" / "node" / "22.1").mkdir(parents=True)
    mac, _ = found(Host(home=home, platform="darwin", root=root), "apps")
    assert contents(mac) == ["Has Xcode installed", "Has Obsidian installed",
                             "Has Node.js installed"]

    shared = tmp_path / "ProgramData" / "Microsoft" / "Windows" / "Start Menu" / "Programs"
    mine = tmp_path / "Roaming" / "Microsoft" / "Windows" / "Start Menu" / "Programs"
    for link in (shared / "Notepad++" / "Notepad++.lnk",
                 shared / "Notepad++" / "Uninstall Notepad++.lnk", mine / "Spotify.lnk"):
        write(link)
    windows = Host(home=home, platform="win32", root=root, env={
        "PROGRAMDATA": str(tmp_path / "ProgramData"), "APPDATA": str(tmp_path / "Roaming")})
    assert not windows.is_real  # the registry is read on Windows itself only
    apps, problems = found(windows, "apps")
    assert contents(apps) == ["Has Notepad++ installed", "Has Spotify installed"]
    assert problems == []


def test_bookmarks_become_interests_and_topics(machine: Host) -> None:
    findings, problems = found(machine, "bookmarks")
    assert problems == []
    by_key = {f.key: f for f in findings}
    assert by_key["bookmarks:folder:recipes"].content == (
        "Is interested in Recipes (keeps 2 bookmarks on it: bbcgoodfood.com, "
        "seriouseats.com)")
    assert by_key["bookmarks:folder:travel"].content == (
        "Is interested in Travel (keeps 2 bookmarks on it: airbnb.com, booking.com)")
    assert by_key["bookmarks:topic:software development"].content == (
        "Bookmarks software development sites (docs.python.org, github.com, "
        "stackoverflow.com)")
    assert by_key["bookmarks:site:blog.example.org"].content == (
        "Bookmarks many pages of blog.example.org (3 bookmarks)")
    assert by_key["bookmarks:topic:health"].sensitive  # a sensitive topic
    assert by_key["bookmarks:folder:health"].sensitive  # a folder of its sites
    assert not by_key["bookmarks:folder:recipes"].sensitive
    assert {f.category for f in findings} == {"preference", "fact"}
    text = json.dumps([f.__dict__ for f in findings])
    assert "secretfoldertag" not in text and "reddit" not in text  # tags are no bookmarks
    assert "localhost" not in text and "Baking" not in text       # top folders only
    assert "Bookmarks bar" not in text


def test_history_top_sites_from_a_copy_of_a_locked_database(machine: Host) -> None:
    live = machine.home / ".config" / "google-chrome" / "Default" / "History"
    before = live.read_bytes()
    browser = sqlite3.connect(live, isolation_level=None)
    browser.execute("BEGIN EXCLUSIVE")  # as a running Chrome holds it
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite3.connect(live, timeout=0).execute("SELECT count(*) FROM urls").fetchone()
        findings, problems = found(machine, "history", days=30)
    finally:
        browser.rollback()
        browser.close()
    assert problems == []
    assert [(f.content, f.sensitive) for f in findings] == [
        ("Often visits reddit.com (11 visits in the last 30 days)", True),
        ("Often visits news.ycombinator.com (7 visits in the last 30 days)", True),
        ("Often visits github.com (4 visits in the last 30 days)", True),
        ("Often visits en.wikipedia.org (2 visits in the last 30 days)", True),
    ]
    assert findings[0].why == "Chrome, Firefox history: addresses only"
    assert live.read_bytes() == before
    assert sorted(p.name for p in live.parent.iterdir()) == ["Bookmarks", "History"]
    assert_no_secrets(findings)
    assert "old-forum" not in json.dumps([f.__dict__ for f in findings])
    wider, _ = found(machine, "history", days=120, top_sites=1)
    assert contents(wider) == ["Often visits booking.com (20 visits in the last 120 days)"]


def test_email_addresses_are_always_sensitive(machine: Host) -> None:
    findings, problems = found(machine, "email")
    assert problems == []
    assert [(f.content, f.sensitive, f.entity) for f in findings] == [
        ("Uses the email address ann.lee@mail.example", True,
         "email:ann.lee@mail.example"),
        ("Uses the email address ann@work.example", True, "email:ann@work.example"),
    ]
    assert findings[1].why == ("git config (~/.gitconfig); Thunderbird "
                               "(~/.thunderbird/x1y2.default)")
    assert "imap" not in json.dumps([f.__dict__ for f in findings])


# failures are reported, the others go on ------------------------------------------------
def test_a_failing_scanner_is_reported_and_the_others_go_on(
        machine: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = machine.home / ".config" / "google-chrome" / "Default"
    write(profile / "Bookmarks", "{not json")
    (profile / "History").write_bytes(b"this is no database" * 100)
    prefs = machine.home / ".thunderbird" / "x1y2.default" / "prefs.js"
    prefs.unlink()
    prefs.mkdir()

    def broken(host: Host, options: ScanOptions) -> Any:
        raise RuntimeError("scanner exploded")

    monkeypatch.setitem(SCANNERS, "boom", broken)
    findings, problems = found(machine, "boom", "bookmarks", "history", "email")

    assert problems[0] == "boom: failed: RuntimeError: scanner exploded"
    assert any(p.startswith("bookmarks: Chrome profile ~/.config/google-chrome/Default: ")
               for p in problems)
    assert any(p.startswith("history: Chrome history") and "not a database" in p
               for p in problems)
    assert any(p.startswith("email: ~/.thunderbird/x1y2.default/prefs.js") for p in problems)
    keys = {f.key for f in findings}
    assert "bookmarks:folder:travel" in keys            # Firefox still read
    assert "history:site:reddit.com" in keys
    assert "email:ann@work.example" in keys              # git config still read


def test_a_missing_browser_is_reported(tmp_path: Path) -> None:
    findings, problems = found(Host(home=tmp_path), "bookmarks", "history", "files")
    assert findings == []
    assert problems == [
        "bookmarks: no browser profile with bookmarks found (Chrome, Chromium, Edge, "
        "Brave, Firefox)",
        "history: no browser profile with history found (Chrome, Chromium, Edge, Brave, "
        "Firefox)"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permissions do not bind root (or Windows)")
def test_a_folder_without_permission_is_reported(machine: Host) -> None:
    locked = machine.home / "code" / "scratch"
    locked.chmod(0)
    try:
        findings, problems = found(machine, "files")
    finally:
        locked.chmod(0o755)
    assert "files: ~/code/scratch: permission denied" in problems
    assert "project:widgets" in {f.entity for f in findings}


def test_bad_scan_requests_are_refused(machine: Host) -> None:
    with pytest.raises(InvalidInput, match="unknown scanner"):
        scan(machine, scanners=["files", "mail"])
    with pytest.raises(InvalidInput, match="days"):
        scan(machine, ScanOptions(days=0))


# nothing is stored until approved --------------------------------------------------------
def test_a_scan_stores_nothing_until_a_person_approves(machine: Host, db_url: str) -> None:
    report = scan(machine, ScanOptions(now=NOW))
    assert len(report.findings) > 20 and report.problems == ()
    with Memory.open(db_url, embedder=None) as memory:
        ann = memory.for_user("ann")
        proposals = ann.propose(report.findings, proposer="bootstrap")
        assert ann.all_knowledge()["total"] == 0
        assert ann.search("reddit") == [] and ann.search("widgets") == []
        assert "widgets" not in system_prefix(ann)

        approved = ann.approve([p.id for p in proposals if p.key in (
            "git:repo:github.com/acme/widgets", "history:site:reddit.com")])

        items = {i.content: i for i in ann.all_knowledge()["items"]}
        assert set(items) == {p.content for p in approved}
        assert all(i.source == "discovery" and i.confidence == 0.4 for i in items.values())
        reddit = next(i for i in items.values() if "reddit" in i.content)
        assert reddit.sensitive and "reddit" not in system_prefix(ann)
        assert "acme/widgets" in system_prefix(ann)
        assert len(ann.proposals()) == len(proposals) - 2
        assert ann.reset_discovery() == {"items": 2, "proposals": len(proposals) - 2}
        assert ann.all_knowledge()["total"] == 0 and ann.proposals() == []


# the CLI -----------------------------------------------------------------------------------
@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "LEDGERMEM_DB", "LEDGERMEM_USER"):
        monkeypatch.delenv(name, raising=False)


HOME_SCANNERS = ("--scanner", "files", "--scanner", "git", "--scanner", "bookmarks",
                 "--scanner", "history", "--scanner", "email")
"""The scanners that read the home directory alone (``apps`` reads the system too)."""


def cli(db: Path, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, ["--db", str(db), "--user", "ann", "--embedder",
                                       "none", *args])
    assert result.exit_code == code, result.output
    return result


def scan_json(db: Path, machine: Host, *args: str) -> Any:
    return json.loads(cli(db, "--json", "bootstrap", "scan", "--home", str(machine.home),
                          *HOME_SCANNERS, *args).stdout)


@pytest.mark.usefixtures("clean_env")
def test_bootstrap_scan_shows_findings_and_stores_nothing(machine: Host,
                                                          tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    report = scan_json(db, machine)
    assert report["stored"] is False and report["problems"] == []
    expected = scan(machine, ScanOptions(now=NOW), ["files", "git", "bookmarks",
                                                    "history", "email"])
    assert [f["id"] for f in report["findings"]] == [finding_id(f)
                                                      for f in expected.findings]
    assert not db.exists()
    table = cli(db, "bootstrap", "scan", "--home", str(machine.home), *HOME_SCANNERS)
    assert report["findings"][0]["id"] in table.stdout
    assert "nothing stored" in table.stderr and not db.exists()


@pytest.mark.usefixtures("clean_env")
def test_bootstrap_scan_approve_stores_the_chosen_findings(machine: Host,
                                                           tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ids = {f["key"]: f["id"] for f in scan_json(db, machine)["findings"]}
    chosen = [ids["git:repo:github.com/acme/widgets"], ids["email:ann@work.example"]]
    stored = scan_json(db, machine, "--approve", ",".join(chosen))
    assert stored["stored"] is True
    assert {f["id"]: f["status"] for f in stored["findings"] if "status" in f} == {
        chosen[0]: "approved", chosen[1]: "approved"}
    items = json.loads(cli(db, "--json", "list").stdout)["items"]
    assert sorted((i["source"], i["sensitive"]) for i in items) == [
        ("discovery", False), ("discovery", True)]
    assert json.loads(cli(db, "--json", "review").stdout) == []

    again = scan_json(db, machine, "--approve", chosen[0], "--propose")
    statuses = {f["id"]: f["status"] for f in again["findings"]}
    assert statuses[chosen[0]] == "approved" and again["stored"] is False
    assert set(statuses.values()) == {"approved", "pending"}
    assert len(json.loads(cli(db, "--json", "list").stdout)["items"]) == 2
    pending = json.loads(cli(db, "--json", "review").stdout)
    assert len(pending) == len(again["findings"]) - 2

    reset = json.loads(cli(db, "--json", "bootstrap", "--reset").stdout)
    assert reset == {"items": 2, "proposals": len(pending)}
    assert json.loads(cli(db, "--json", "list").stdout)["items"] == []
    assert json.loads(cli(db, "--json", "review").stdout) == []
    everything = scan_json(db, machine, "--approve", "all")
    assert all(f["status"] == "approved" for f in everything["findings"])


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("args", [
    ["--approve", "nope1234"],
    ["--approve", "all", "--approve", "x"],
    ["--approve", ""],
    ["--scanner", "mail"],
    ["--days", "0"],
    ["--home", "/no/such/home"],
])
def test_bootstrap_scan_refuses_bad_input(machine: Host, tmp_path: Path,
                                          args: list[str]) -> None:
    db = tmp_path / "m.db"
    home = [] if "--home" in args else ["--home", str(machine.home)]
    result = cli(db, "bootstrap", "scan", *home, "--scanner", "email", *args, code=2)
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in result.output and not db.exists()


@pytest.mark.usefixtures("clean_env")
def test_bootstrap_without_reset_shows_help_and_reset_takes_no_subcommand(
        tmp_path: Path, machine: Host) -> None:
    db = tmp_path / "m.db"
    assert "scan" in cli(db, "bootstrap").stdout
    cli(db, "bootstrap", "--reset", "scan", "--home", str(machine.home), code=2)
    with Memory.open(db, embedder=None) as memory:
        memory.for_user("ann").remember("Prefers green tea")
    before = snapshot(db)
    assert json.loads(cli(db, "--json", "bootstrap", "--reset").stdout) == {
        "items": 0, "proposals": 0}
    assert snapshot(db) == before


def test_the_scanners_never_open_file_contents(machine: Host) -> None:
    """A project's files are only listed: make them unreadable, and nothing changes."""
    if os.name != "posix" or os.geteuid() == 0:
        # root reads anything: prove it by replacing the files with dangling links
        for path in (machine.home / "code" / "widgets").glob("*.py"):
            path.unlink()
            path.symlink_to(machine.home / "nowhere" / path.name)
    else:
        for path in (machine.home / "code" / "widgets").glob("*.py"):
            path.chmod(0)
    findings, problems = found(machine, "files")
    assert problems == []
    assert contents(findings)[1].endswith("written mostly in Python and TypeScript")
