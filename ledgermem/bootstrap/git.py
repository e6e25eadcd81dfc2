"""The git scanner: repositories, where they are hosted, their branches and languages.

A repository is a project folder (``projects.find_projects``) holding ``.git``. From
it only metadata is read: ``.git/config`` (the remotes' URLs, of which only the host
and the repository's path are kept: a user name or token in a URL is dropped), the
branch names (``refs/heads``, ``packed-refs``, ``HEAD``), and the languages of its
file names. No object, commit message or file content is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..types import Finding
from .host import Found, Host, ScanOptions, shown_path
from .projects import languages_of, listing, project_folders

__all__ = ["GitConfig", "Remote", "parse_git_config", "parse_remote", "scan_git"]

GitConfig = dict[tuple[str, str | None], dict[str, list[str]]]
"""(section, subsection) → key → values, names of sections and keys in lower case."""

_SECTION = re.compile(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]')
_MAX_BRANCHES = 8


def parse_git_config(text: str) -> GitConfig:
    """The sections, keys and values of a git config file (``.git/config``,
    ``~/.gitconfig``): a reader of its plain syntax (quoted values, comments, legacy
    ``[section.sub]`` headers); include directives are not followed."""
    config: GitConfig = {}
    section: tuple[str, str | None] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = _SECTION.match(line)
        if header:
            name, sub = header.group(1).lower(), header.group(2)
            if sub is None and "." in name:
                name, _, sub = name.partition(".")
            section = (name, sub.replace('\\"', '"').replace("\\\\", "\\") if sub else sub)
            config.setdefault(section, {})
            continue
        if section is None:
            continue
        key, has_value, value = line.partition("=")
        config[section].setdefault(key.strip().lower(), []).append(
            _config_value(value) if has_value else "true")
    return config


def _config_value(value: str) -> str:
    value = value.strip()
    if value.startswith('"'):
        end = value.find('"', 1)
        return value[1:end] if end > 0 else value[1:]
    return re.split(r"\s[#;]", value, maxsplit=1)[0].strip()


@dataclass(frozen=True)
class Remote:
    """Where a remote points: the host (None for a local path) and the repository's
    path there (``acme/widgets``)."""

    name: str
    host: str | None
    path: str

    @property
    def repo(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def parse_remote(name: str, url: str) -> Remote | None:
    """A remote's host and path from its URL (``https://…``, ``ssh://…``, scp-like
    ``git@host:path``, or a local path); credentials in the URL are never kept."""
    url = url.strip()
    if not url:
        return None
    if "://" in url:
        parts = urlsplit(url)
        host = parts.hostname if parts.scheme != "file" else None
        path = parts.path
    elif re.match(r"^[^/\\]+:", url) and not re.match(r"^[A-Za-z]:[/\\]", url):
        address, _, path = url.partition(":")
        host = address.rpartition("@")[2].lower() or None
    else:
        host, path = None, url
    path = path.strip("/").removesuffix(".git").strip("/")
    if host is None:
        path = path.replace("\\", "/").rsplit("/", 1)[-1]
    return Remote(name, host, path) if path else None


def _git_dir(repo: Path) -> tuple[Path, Path]:
    """The repository's git folder (for ``HEAD``) and its common folder (config and
    refs): ``.git``, or where a ``.git`` file (a worktree, a submodule) points."""
    dot = repo / ".git"
    if dot.is_file():
        line = dot.read_text(encoding="utf-8", errors="replace").strip()
        if line.startswith("gitdir:"):
            dot = (repo / line.removeprefix("gitdir:").strip()).resolve()
    common = dot
    if (dot / "commondir").is_file():
        common = (dot / (dot / "commondir").read_text(encoding="utf-8").strip()).resolve()
    return dot, common


def _branches(git_dir: Path, common: Path) -> list[str]:
    """Branch names, the checked-out one first."""
    names: dict[str, None] = {}
    head = git_dir / "HEAD"
    if head.is_file():
        ref = head.read_text(encoding="utf-8", errors="replace").strip()
        if ref.startswith("ref: refs/heads/"):
            names[ref.removeprefix("ref: refs/heads/")] = None
    heads = common / "refs" / "heads"
    others: set[str] = set()
    for folder, _, files in os.walk(heads):
        others.update((Path(folder) / f).relative_to(heads).as_posix() for f in files)
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
            sha, _, ref = line.partition(" ")
            if ref.startswith("refs/heads/") and not sha.startswith("#"):
                others.add(ref.removeprefix("refs/heads/"))
    names.update(dict.fromkeys(sorted(others)))
    return list(names)


def _remotes(config: GitConfig) -> list[Remote]:
    found = []
    for (section, sub), values in config.items():
        if section == "remote" and sub:
            for url in values.get("url", [])[:1]:
                remote = parse_remote(sub, url)
                if remote is not None:
                    found.append(remote)
    return sorted(found, key=lambda r: (r.name != "origin", r.name))


def scan_git(host: Host, options: ScanOptions) -> Found:
    """Findings: one per repository (its name, host, branches and languages), and one
    per host the repositories are on (github.com, gitlab.com, a company's server)."""
    found = Found()
    by_host: dict[str, list[str]] = {}
    for repo in _repositories(host, options, found):
        where = shown_path(repo, host)
        try:
            git_dir, common = _git_dir(repo)
            config_file = common / "config"
            config = parse_git_config(config_file.read_text(encoding="utf-8",
                                                            errors="replace")
                                      if config_file.is_file() else "")
            branches = _branches(git_dir, common)
        except OSError as exc:
            found.failed(f"{where}/.git", exc)
            continue
        remotes = _remotes(config)
        main = next((r for r in remotes if r.host), None)
        languages = [lang for lang, count in languages_of(repo, options, found)[:3]]
        parts = [f"on {main.host}" if main else "kept locally, with no hosted remote"]
        if branches:
            more = f" and {len(branches) - _MAX_BRANCHES} more" \
                if len(branches) > _MAX_BRANCHES else ""
            first = branches[:_MAX_BRANCHES]
            parts.append(f"branches: {', '.join(first)}{more}" if more
                         else f"branches: {listing(first)}")
        if languages:
            parts.append(f"written in {listing(languages)}")
        name = main.path if main else repo.name
        found.add(Finding(
            content=f"Has a git repository {name} ({'; '.join(parts)})", category="fact",
            entity=f"project:{main.repo if main else repo.name}",
            why=f"{where}/.git: " + (", ".join(f"remote {r.name} → {r.host or 'local'}"
                                               f"/{r.path}" for r in remotes)
                                     or "no remote") + f"; {len(branches)} branch"
                + ("" if len(branches) == 1 else "es"),
            key=f"git:repo:{main.host}/{main.path}" if main else f"git:repo:{where}"))
        if main and main.host:
            by_host.setdefault(main.host, []).append(main.path)
    for name, repos in sorted(by_host.items(), key=lambda p: (-len(p[1]), p[0])):
        plural = "repository" if len(repos) == 1 else "repositories"
        shown = ", ".join(sorted(repos)[:5]) + (", …" if len(repos) > 5 else "")
        found.add(Finding(
            content=f"Keeps code on {name} ({len(repos)} {plural}: {shown})",
            category="fact", entity=f"service:{name}",
            why=f"the remotes of {len(repos)} git {plural}", key=f"git:host:{name}"))
    return found


def _repositories(host: Host, options: ScanOptions, found: Found) -> Iterable[Path]:
    seen: dict[Path, None] = {}
    for root in options.project_roots(host):
        in_code_folder = root != host.home.resolve()
        for path, markers in project_folders(host, root, in_code_folder, found):
            if ".git" in markers:
                seen.setdefault(path, None)
    return list(seen)
