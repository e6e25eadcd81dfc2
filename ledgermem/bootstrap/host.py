"""Where the scanners look, what they may read, and how they read safely.

Every scanner is given a ``Host`` (the home directory, the platform, where system-wide
paths are rooted, the environment variables that place Windows folders) and
``ScanOptions``; no scanner reads ``Path.home()``, ``sys.platform`` or the environment
itself, so a test points a scanner at a home directory it built.
``Host.current(os.environ)`` is the machine the CLI runs on.

Browser databases are read from a copy (``database_copy``), never the live file: a
browser that is running holds them locked, and a reader of the live file could disturb
it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..types import Finding

__all__ = ["DEFAULT_ROOTS", "Found", "Host", "ScanOptions", "database_copy", "shown_path"]

DEFAULT_ROOTS = ("code", "src", "projects", "Projects", "dev", "workspace", "repos", "git",
                 "Code", "Developer")
"""Folders under the home directory where projects usually live (the home directory
itself is looked at too)."""

_ENV_KEYS = ("APPDATA", "LOCALAPPDATA", "PROGRAMDATA", "XDG_CONFIG_HOME", "XDG_DATA_HOME")


@dataclass(frozen=True)
class Host:
    """The machine a scan looks at.

    Attributes:
        home: the user's home directory.
        platform: ``linux``, ``darwin`` or ``win32`` (as ``sys.platform`` says).
        root: where system-wide paths (``/usr/share/applications``…) are looked up;
            ``/`` on a real machine, a folder of the test's on a test's.
        env: the environment variables that place folders (``APPDATA``,
            ``LOCALAPPDATA``, ``PROGRAMDATA``, ``XDG_CONFIG_HOME``, ``XDG_DATA_HOME``).
    """

    home: Path
    platform: str = "linux"
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def current(cls, env: Mapping[str, str], home: Path | None = None) -> Host:
        """The machine this process runs on, its folders placed by ``env`` (the CLI
        passes ``os.environ``; the library reads no environment itself), and ``home``
        or the user's home directory."""
        return cls(home=home or Path.home(), platform=_platform(sys.platform),
                   root=Path(os.path.abspath(os.sep)),
                   env={k: v for k, v in env.items() if k in _ENV_KEYS and v})

    @property
    def is_real(self) -> bool:
        """Whether this is the machine the process runs on (the Windows registry is
        read only then)."""
        return self.platform == _platform(sys.platform) and self.root == Path(
            os.path.abspath(os.sep))

    def system(self, path: str) -> Path:
        """A system-wide path (written POSIX-style, from the root) on this host."""
        return self.root.joinpath(*[part for part in path.split("/") if part])

    def config_home(self) -> Path:
        """Linux: ``$XDG_CONFIG_HOME``, else ``~/.config``."""
        return Path(self.env["XDG_CONFIG_HOME"]) if self.env.get("XDG_CONFIG_HOME") \
            else self.home / ".config"

    def data_home(self) -> Path:
        """Linux: ``$XDG_DATA_HOME``, else ``~/.local/share``."""
        return Path(self.env["XDG_DATA_HOME"]) if self.env.get("XDG_DATA_HOME") \
            else self.home / ".local" / "share"

    def app_data(self) -> Path:
        """Windows: ``%APPDATA%`` (roaming), else its usual place under the home."""
        return Path(self.env.get("APPDATA") or self.home / "AppData" / "Roaming")

    def local_app_data(self) -> Path:
        """Windows: ``%LOCALAPPDATA%``, else its usual place under the home."""
        return Path(self.env.get("LOCALAPPDATA") or self.home / "AppData" / "Local")

    def program_data(self) -> Path:
        """Windows: ``%PROGRAMDATA%``, else ``C:\\ProgramData`` on this host's root."""
        return Path(self.env["PROGRAMDATA"]) if self.env.get("PROGRAMDATA") \
            else self.system("ProgramData")

    def library(self) -> Path:
        """macOS: ``~/Library``."""
        return self.home / "Library"


def _platform(name: str) -> str:
    return "linux" if name.startswith("linux") else name


@dataclass(frozen=True)
class ScanOptions:
    """What a scan covers.

    Attributes:
        roots: folders searched for projects and git repositories; None: the home
            directory and ``DEFAULT_ROOTS`` under it.
        days: how far back browser history counts.
        top_sites: how many of the most visited sites history proposes.
        max_files: most file names read per project (to tell its languages).
        now: the moment history is counted back from; None: the current time.
    """

    roots: tuple[Path, ...] | None = None
    days: int = 30
    top_sites: int = 10
    max_files: int = 5_000
    now: datetime | None = None

    def project_roots(self, host: Host) -> list[Path]:
        """The folders to search, existing ones only, each once."""
        wanted = self.roots if self.roots is not None else (
            host.home, *(host.home / name for name in DEFAULT_ROOTS))
        seen: dict[Path, None] = {}
        for root in wanted:
            if root.is_dir():
                seen.setdefault(root.resolve(), None)
        return list(seen)


@dataclass
class Found:
    """What one scanner found, and what it could not read (one line each)."""

    findings: list[Finding] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def failed(self, what: str, exc: BaseException) -> None:
        """Note that ``what`` could not be read, and why (the scan goes on)."""
        self.problems.append(f"{what}: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def shown_path(path: Path, host: Host) -> str:
    """``path`` as a person reads it: ``~/code/widgets`` under the home directory."""
    for home in (host.home, host.home.resolve()):
        if path.is_relative_to(home):
            inner = path.relative_to(home).as_posix()
            return "~" if inner == "." else f"~/{inner}"
    return str(path)


@contextmanager
def database_copy(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to a private copy of the SQLite database at ``path`` (with its
    ``-wal`` and ``-journal`` files, so recent writes are seen and an interrupted one
    is rolled back in the copy), deleted afterwards. The live file is only copied:
    never opened by SQLite, so a browser holding it locked neither blocks the scan
    nor is disturbed by it.

    Raises:
        OSError: the file cannot be copied (permission denied, held open for
            exclusive use on Windows).
        sqlite3.Error: the copy is no SQLite database.
    """
    with tempfile.TemporaryDirectory(prefix="ledgermem-scan-") as folder:
        copy = Path(folder) / "copy.sqlite"
        shutil.copyfile(path, copy)
        for suffix in ("-wal", "-journal"):
            side = path.with_name(path.name + suffix)
            if side.is_file():
                shutil.copyfile(side, copy.with_name(copy.name + suffix))
        conn = sqlite3.connect(copy)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            yield conn
        finally:
            conn.close()


def existing(paths: Sequence[Path]) -> list[Path]:
    """The paths that are folders, each once, in order."""
    return list(dict.fromkeys(p for p in paths if p.is_dir()))
