"""The installed-applications scanner: application names and kinds, nothing else.

- Linux: the ``.desktop`` entries of the system and the user (their ``Name`` and
  ``Categories``; hidden entries and settings panels left out, a user entry overriding
  the system's of the same file name), and, where readable, the package list (dpkg's
  status file, pacman's database folders), from which only well-known tools are
  proposed (``NOTABLE_PACKAGES``): nobody wants to review 2,000 libraries.
- macOS: the ``.app`` bundles in ``/Applications`` and ``~/Applications``, and the
  Homebrew formulae among the well-known tools.
- Windows: the Start Menu's shortcuts (all users and the user), and the registry's
  list of installed programs when the scan runs on that Windows machine itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ..types import Finding
from .host import Found, Host, ScanOptions, existing, shown_path

__all__ = ["NOTABLE_PACKAGES", "parse_desktop_entry", "scan_apps"]

DESKTOP_DIRS = ("/usr/share/applications", "/usr/local/share/applications",
                "/var/lib/flatpak/exports/share/applications",
                "/var/lib/snapd/desktop/applications")
"""System-wide ``.desktop`` folders (the user's are under the data home)."""

KINDS = {
    "Development": "a development tool", "Office": "an office application",
    "Graphics": "a graphics application", "AudioVideo": "a media application",
    "Audio": "an audio application", "Video": "a video application",
    "Game": "a game", "Network": "an internet application",
    "Education": "an education application", "Science": "a science application",
    "Utility": "a utility",
}
"""freedesktop main categories → how a finding names the kind of application."""

LEFT_OUT = frozenset({"Settings", "System", "DesktopSettings", "HardwareSettings",
                      "PackageManager", "Core"})
"""Categories of entries that are part of the desktop, not the user's choice."""

NOTABLE_PACKAGES = {
    "docker.io": "Docker", "docker-ce": "Docker", "docker": "Docker", "podman": "Podman",
    "nodejs": "Node.js", "node": "Node.js", "golang-go": "Go", "golang": "Go", "go": "Go",
    "rustc": "Rust", "rust": "Rust", "rustup": "Rust", "openjdk-17-jdk": "Java",
    "openjdk-21-jdk": "Java", "jdk-openjdk": "Java", "openjdk": "Java",
    "postgresql": "PostgreSQL", "mysql-server": "MySQL", "mariadb-server": "MariaDB",
    "mariadb": "MariaDB", "redis-server": "Redis", "redis": "Redis",
    "mongodb-org": "MongoDB", "kubectl": "kubectl", "helm": "Helm",
    "terraform": "Terraform", "ansible": "Ansible", "nginx": "nginx",
    "emacs": "Emacs", "neovim": "Neovim", "texlive-full": "LaTeX (TeX Live)",
    "texlive-latex-base": "LaTeX (TeX Live)", "texlive": "LaTeX (TeX Live)",
    "r-base": "R", "julia": "Julia", "ghc": "Haskell (GHC)", "elixir": "Elixir",
    "ruby": "Ruby", "php": "PHP", "dotnet-sdk-8.0": ".NET", "dotnet-sdk": ".NET",
    "awscli": "AWS CLI", "google-cloud-cli": "Google Cloud CLI",
    "azure-cli": "Azure CLI", "ffmpeg": "FFmpeg", "blender": "Blender",
}
"""Package names (dpkg, pacman, Homebrew) → the tool a finding names."""

_TRUE = ("true", "1")


def parse_desktop_entry(text: str) -> dict[str, str]:
    """The keys of a ``.desktop`` file's ``[Desktop Entry]`` group (unlocalised)."""
    entry: dict[str, str] = {}
    group = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
            continue
        if group == "Desktop Entry" and "=" in line:
            key, _, value = line.partition("=")
            if "[" not in key:
                entry.setdefault(key.strip(), value.strip())
    return entry


def _kind(categories: str) -> str | None:
    """The kind of application its ``Categories`` say; None for desktop parts."""
    named = [c for c in categories.split(";") if c]
    if any(c in LEFT_OUT for c in named):
        return None
    return next((KINDS[c] for c in named if c in KINDS), "an application")


def _desktop_apps(host: Host, found: Found) -> list[Finding]:
    user_dirs = [host.data_home() / "applications",
                 host.data_home() / "flatpak" / "exports" / "share" / "applications"]
    entries: dict[str, Path] = {}
    for folder in existing([*[host.system(d) for d in DESKTOP_DIRS], *user_dirs]):
        try:
            for path in sorted(folder.glob("*.desktop")):
                entries[path.name] = path  # a later folder (the user's) overrides
        except OSError as exc:
            found.failed(shown_path(folder, host), exc)
    apps = []
    for file_id, path in sorted(entries.items()):
        try:
            entry = parse_desktop_entry(path.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            found.failed(shown_path(path, host), exc)
            continue
        name = entry.get("Name", "").strip()
        kind = _kind(entry.get("Categories", ""))
        if (not name or kind is None or entry.get("Type", "Application") != "Application"
                or entry.get("NoDisplay", "").lower() in _TRUE
                or entry.get("Hidden", "").lower() in _TRUE):
            continue
        apps.append(Finding(
            content=f"Has {name} installed ({kind})", entity=f"app:{name}",
            why=f"desktop entry {shown_path(path, host)}",
            key=f"apps:desktop:{file_id.removesuffix('.desktop')}"))
    return apps


def _dpkg_packages(host: Host) -> Iterator[str]:
    status = host.system("/var/lib/dpkg/status")
    if not status.is_file():
        return
    package, installed = None, False
    for line in [*status.read_text(encoding="utf-8", errors="replace").splitlines(), ""]:
        if line.startswith("Package:"):
            package = line.partition(":")[2].strip()
        elif line.startswith("Status:"):
            installed = line.rstrip().endswith(" installed")
        elif not line.strip():
            if package and installed:
                yield package
            package, installed = None, False


def _folder_packages(folder: Path, strip_version: bool) -> Iterator[str]:
    """Package names from a folder of one entry per package (pacman's
    ``name-version-release``, Homebrew's ``Cellar/name``)."""
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            yield entry.name.rsplit("-", 2)[0] if strip_version else entry.name


def _notable_packages(host: Host, found: Found) -> list[Finding]:
    sources: list[tuple[str, Callable[[], Iterator[str]]]] = []
    if host.platform == "linux":
        sources = [("dpkg", partial(_dpkg_packages, host)),
                   ("pacman", partial(_folder_packages, host.system("/var/lib/pacman/local"),
                                      strip_version=True))]
    elif host.platform == "darwin":
        sources = [("Homebrew", partial(_folder_packages, host.system(cellar),
                                        strip_version=False))
                   for cellar in ("/opt/homebrew/Cellar", "/usr/local/Cellar")]
    tools: dict[str, str] = {}
    for manager, packages in sources:
        try:
            for package in packages():
                tool = NOTABLE_PACKAGES.get(package)
                if tool is not None:
                    tools.setdefault(tool, f"{manager} package {package}")
        except OSError as exc:
            found.failed(f"the {manager} package list", exc)
    return [Finding(content=f"Has {tool} installed", entity=f"tool:{tool}", why=why,
                    key=f"apps:package:{tool.lower()}")
            for tool, why in sorted(tools.items())]


def _mac_apps(host: Host, found: Found) -> list[Finding]:
    apps = []
    for folder in existing([host.system("/Applications"), host.home / "Applications"]):
        try:
            bundles = sorted(folder.glob("*.app"))
        except OSError as exc:
            found.failed(shown_path(folder, host), exc)
            continue
        for bundle in bundles:
            name = bundle.name.removesuffix(".app")
            apps.append(Finding(content=f"Has {name} installed", entity=f"app:{name}",
                                why=f"{shown_path(bundle, host)}",
                                key=f"apps:mac:{name.lower()}"))
    return apps


_NOT_APPS = re.compile(r"uninstall|readme|help|documentation|release notes|license|"
                       r"website|manual", re.I)


def _start_menu(host: Host, found: Found) -> list[Finding]:
    folders = existing([
        host.program_data() / "Microsoft" / "Windows" / "Start Menu" / "Programs",
        host.app_data() / "Microsoft" / "Windows" / "Start Menu" / "Programs"])
    names: dict[str, Path] = {}
    for folder in folders:
        try:
            for link in sorted(folder.rglob("*.lnk")):
                name = link.stem
                if not _NOT_APPS.search(name):
                    names.setdefault(name, link)
        except OSError as exc:
            found.failed(str(folder), exc)
    return [Finding(content=f"Has {name} installed", entity=f"app:{name}",
                    why=f"Start Menu shortcut {link.name}",
                    key=f"apps:windows:{name.lower()}")
            for name, link in sorted(names.items())]


def _registry_apps(host: Host, found: Found) -> list[Finding]:
    """Installed programs from the registry's Uninstall keys (Windows itself only)."""
    names: set[str] = set()
    if sys.platform == "win32" and host.is_real:
        import winreg

        path = r"Software\Microsoft\Windows\CurrentVersion\Uninstall"
        for hive in (winreg.HKEY_LOCAL_MACHINE, winreg.HKEY_CURRENT_USER):
            try:
                with winreg.OpenKey(hive, path) as key:
                    for index in range(winreg.QueryInfoKey(key)[0]):
                        with winreg.OpenKey(key, winreg.EnumKey(key, index)) as app:
                            name = _registry_value(app, "DisplayName")
                            if name and _registry_value(app, "SystemComponent") != "1":
                                names.add(name)
            except OSError as exc:
                found.failed("the registry's installed programs", exc)
    return [Finding(content=f"Has {name} installed", entity=f"app:{name}",
                    why="the registry's installed programs",
                    key=f"apps:windows:{name.lower()}") for name in sorted(names)]


def _registry_value(key: Any, name: str) -> str | None:
    """One value of an open registry key as text, None when it has none."""
    if sys.platform == "win32":
        import winreg

        try:
            return str(winreg.QueryValueEx(key, name)[0])
        except OSError:
            return None
    return None


def scan_apps(host: Host, options: ScanOptions) -> Found:
    """Findings: one per installed application the platform lists, and one per
    well-known tool among the installed packages."""
    found = Found()
    if host.platform == "linux":
        listed = _desktop_apps(host, found)
    elif host.platform == "darwin":
        listed = _mac_apps(host, found)
    elif host.platform == "win32":
        listed = _start_menu(host, found) + _registry_apps(host, found)
    else:
        found.problems.append(f"no application list is known for platform {host.platform}")
        listed = []
    seen: set[str] = set()
    for finding in [*listed, *_notable_packages(host, found)]:
        if finding.key not in seen:
            seen.add(str(finding.key))
            found.add(finding)
    return found
