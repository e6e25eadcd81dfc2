"""The email-accounts scanner: addresses only, always flagged sensitive.

Addresses come from settings, never from mail: git's ``user.email`` (``~/.gitconfig``
and ``$XDG_CONFIG_HOME/git/config``), Thunderbird's identities (``prefs.js`` of each
profile: ``mail.identity.*.useremail``) and Evolution's mail identities
(``~/.config/evolution/sources/*.source``). No password, server or message is read.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..types import Finding
from .git import parse_git_config
from .host import Found, Host, ScanOptions, existing, shown_path

__all__ = ["scan_email"]

_ADDRESS = re.compile(r"^[A-Za-z0-9._%+'-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
_IDENTITY = re.compile(
    r'user_pref\(\s*"mail\.identity\.[^".]+\.useremail"\s*,\s*"([^"]*)"\s*\)')


def _thunderbird_folders(host: Host) -> list[Path]:
    return existing({
        "linux": [host.home / ".thunderbird",
                  host.home / "snap" / "thunderbird" / "common" / ".thunderbird"],
        "darwin": [host.library() / "Thunderbird" / "Profiles"],
        "win32": [host.app_data() / "Thunderbird" / "Profiles"],
    }.get(host.platform, []))


def _addresses(host: Host, found: Found) -> dict[str, list[str]]:
    """Address (lower case) → where it was found."""
    seen: dict[str, list[str]] = {}

    def note(address: str, where: str) -> None:
        address = address.strip()
        if _ADDRESS.match(address):
            places = seen.setdefault(address.lower(), [])
            if where not in places:
                places.append(where)

    for config in (host.home / ".gitconfig", host.config_home() / "git" / "config"):
        try:
            if config.is_file():
                parsed = parse_git_config(config.read_text(encoding="utf-8",
                                                           errors="replace"))
                for address in parsed.get(("user", None), {}).get("email", []):
                    note(address, f"git config ({shown_path(config, host)})")
        except OSError as exc:
            found.failed(shown_path(config, host), exc)
    for folder in _thunderbird_folders(host):
        for prefs in sorted(folder.glob("*/prefs.js")):
            try:
                text = prefs.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                found.failed(shown_path(prefs, host), exc)
                continue
            for address in _IDENTITY.findall(text):
                note(address, f"Thunderbird ({shown_path(prefs.parent, host)})")
    sources = host.config_home() / "evolution" / "sources"
    if host.platform == "linux" and sources.is_dir():
        for source in sorted(sources.glob("*.source")):
            try:
                text = source.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                found.failed(shown_path(source, host), exc)
                continue
            for address in re.findall(r"(?m)^Address=(.+)$", text):
                note(address, "Evolution")
    return seen


def scan_email(host: Host, options: ScanOptions) -> Found:
    """Findings: one per email address the user's settings name, sensitive."""
    found = Found()
    for address, places in sorted(_addresses(host, found).items()):
        found.add(Finding(
            content=f"Uses the email address {address}", entity=f"email:{address}",
            sensitive=True, why="; ".join(places), key=f"email:{address}"))
    return found
