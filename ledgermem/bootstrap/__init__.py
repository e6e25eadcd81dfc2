"""System discovery: a day-zero scan that proposes what to remember about the user.

Scanners read names and metadata only, never file contents, mail or page content:
project folders and their languages (``files``), git repositories (``git``),
installed applications (``apps``), browser bookmarks (``bookmarks``), browser history
(``history``: top sites, always sensitive, read from a copy of each database) and
email addresses (``email``: always sensitive). A scan stores nothing; its findings go
to the review queue (``UserMemory.propose``), and only a person's approval
(``UserMemory.approve``) makes knowledge items of them (source ``discovery``,
confidence 0.4).

Example:
    >>> from ledgermem.bootstrap import Host, scan              # doctest: +SKIP
    >>> report = scan(Host.current(os.environ))
    >>> proposals = alice.propose(report.findings, proposer="bootstrap")
    >>> alice.approve([p.id for p in proposals if not p.sensitive])
"""

from .host import DEFAULT_ROOTS, Found, Host, ScanOptions, database_copy
from .scan import SCANNERS, Problem, Scanner, ScanReport, finding_id, scan, scanner_of

__all__ = [
    "DEFAULT_ROOTS",
    "PROPOSER",
    "SCANNERS",
    "Found",
    "Host",
    "Problem",
    "ScanOptions",
    "ScanReport",
    "Scanner",
    "database_copy",
    "finding_id",
    "scan",
    "scanner_of",
]

PROPOSER = "bootstrap"
"""The proposer name the bootstrap's proposals carry."""
