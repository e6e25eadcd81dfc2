"""Run the scanners: each one's findings, and what each could not read.

``scan`` runs the chosen scanners one after the other; a scanner that fails (a
missing browser, a locked database, permission denied, anything it raises) is
reported in ``ScanReport.problems`` and the others go on. A scan stores nothing: its
findings go to the review queue only through ``UserMemory.propose``.

Each finding has a short id (``finding_id``: 8 hex digits of a hash of its ``key``),
the same from one scan to the next as long as what it is about stays, so a person can
look at ``ledgermem bootstrap scan`` and then approve by id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import InvalidInput
from ..types import Finding
from .accounts import scan_email
from .apps import scan_apps
from .browsers import scan_bookmarks, scan_history
from .git import scan_git
from .host import Found, Host, ScanOptions
from .projects import scan_projects

__all__ = ["SCANNERS", "Problem", "ScanReport", "Scanner", "check_options", "finding_id",
           "scan", "scanner_of"]

Scanner = Callable[[Host, ScanOptions], Found]
"""A scanner: the host and options in, findings and problems out."""

SCANNERS: dict[str, Scanner] = {
    "files": scan_projects,
    "git": scan_git,
    "apps": scan_apps,
    "bookmarks": scan_bookmarks,
    "history": scan_history,
    "email": scan_email,
}
"""Every scanner by name, in the order ``scan`` runs them."""

MAX_SCAN_DAYS = 3_650
MAX_TOP_SITES = 1_000


@dataclass(frozen=True)
class Problem:
    """Something a scanner could not read, or the scanner's failure."""

    scanner: str
    message: str


@dataclass(frozen=True)
class ScanReport:
    """What a scan found: the findings (each once, by key), the problems, and the
    scanners that ran."""

    findings: tuple[Finding, ...]
    problems: tuple[Problem, ...]
    scanners: tuple[str, ...]

    def by_id(self) -> dict[str, Finding]:
        """Finding id → finding."""
        return {finding_id(f): f for f in self.findings}

    def select(self, ids: str | Sequence[str]) -> list[Finding]:
        """The findings ``ids`` names (``"all"``: every one), in scan order.

        Raises:
            InvalidInput: no ids, or an id that is no finding of this scan.
        """
        if ids == "all":
            return list(self.findings)
        wanted = [ids] if isinstance(ids, str) else list(ids)
        known = self.by_id()
        unknown = [i for i in wanted if i not in known]
        if not wanted or unknown:
            raise InvalidInput(
                f"no finding {', '.join(map(repr, unknown))} in this scan; give ids "
                "that 'ledgermem bootstrap scan' shows, or 'all'" if unknown
                else "give finding ids, or 'all'")
        chosen = set(wanted)
        return [f for f in self.findings if finding_id(f) in chosen]


def finding_id(finding: Finding) -> str:
    """A short id for a finding, stable across scans: from its key (else its text)."""
    basis = finding.key or f"{finding.category}\0{finding.content}"
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()[:8]


def scanner_of(finding: Finding) -> str:
    """The scanner a finding came from (its key's prefix)."""
    return (finding.key or "").partition(":")[0]


def check_options(options: ScanOptions) -> ScanOptions:
    """Refuse options no scan can use (``InvalidInput``)."""
    for name, value, high in (("days", options.days, MAX_SCAN_DAYS),
                              ("top_sites", options.top_sites, MAX_TOP_SITES),
                              ("max_files", options.max_files, 10**7)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise InvalidInput(f"{name} must be a whole number from 1 to {high}, "
                               f"not {value!r}")
    return options


def scan(host: Host, options: ScanOptions | None = None,
         scanners: Sequence[str] | None = None) -> ScanReport:
    """Run ``scanners`` (default: all of ``SCANNERS``) over ``host``.

    Raises:
        InvalidInput: an unknown scanner name or bad options; nothing is scanned then.
    """
    options = check_options(options or ScanOptions())
    names = list(dict.fromkeys(scanners)) if scanners is not None else list(SCANNERS)
    unknown = [name for name in names if name not in SCANNERS]
    if unknown or not names:
        raise InvalidInput(f"unknown scanner {', '.join(map(repr, unknown))}; the "
                           f"scanners are {', '.join(SCANNERS)}" if unknown
                           else "no scanner chosen")
    findings: dict[str, Finding] = {}
    problems: list[Problem] = []
    for name in names:
        try:
            found = SCANNERS[name](host, options)
        except Exception as exc:  # a scanner's failure is reported; the others go on
            problems.append(Problem(name, f"failed: {type(exc).__name__}: {exc}"))
            continue
        for finding in found.findings:
            findings.setdefault(finding.key or finding_id(finding), finding)
        problems += [Problem(name, message) for message in found.problems]
    return ScanReport(tuple(findings.values()), tuple(problems), tuple(names))
