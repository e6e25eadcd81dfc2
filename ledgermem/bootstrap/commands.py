"""``ledgermem bootstrap`` and ``ledgermem review``: thin click layers over
``ledgermem.bootstrap.scan`` and the review queue of ``UserMemory``.

``bootstrap scan`` is a dry run: it shows the findings, each with a short id that
stays the same from one scan to the next, and stores nothing (it does not even open
the database). ``bootstrap scan --approve all|IDS`` scans again, proposes the chosen
findings into the review queue and approves them there, so that every decision is a
ledger event; ``--propose`` queues every finding for ``ledgermem review`` instead.
``review`` lists, approves, edits and rejects what any proposer queued.

The commands get the CLI's ``Context`` (``cli.Context``) through click; this module
names only what it uses of it (``CommandContext``), so it need not import the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import click
from rich.console import Console
from rich.table import Table

from ..cli.core import shown
from ..review import STATUS_FILTERS, StatusFilter
from ..types import CATEGORIES, SOURCES, Finding, Proposal
from ..user_memory import UserMemory
from . import PROPOSER
from .host import DEFAULT_ROOTS, Host, ScanOptions
from .scan import MAX_SCAN_DAYS, SCANNERS, ScanReport, finding_id, scan, scanner_of

__all__ = ["bootstrap_command", "review_command"]


class CommandContext(Protocol):
    """What the commands use of the CLI's ``Context``."""

    as_json: bool
    console: Console

    def handle(self, context: str = "global", **open_options: Any) -> UserMemory: ...
    def emit(self, value: Any, render: Callable[[], None]) -> None: ...
    def settle(self) -> None: ...


def _ids(values: Sequence[str], what: str) -> str | list[str]:
    """``all``, or the ids given (repeated, or separated by commas or spaces)."""
    ids = [part for value in values for part in value.replace(",", " ").split()]
    if "all" in ids:
        if len(ids) > 1:
            raise click.UsageError(f"give 'all' or {what} ids, not both")
        return "all"
    if not ids:
        raise click.UsageError(f"give {what} ids, or 'all'")
    return list(dict.fromkeys(ids))


# bootstrap ----------------------------------------------------------------------------
@click.group("bootstrap", invoke_without_command=True)
@click.option("--reset", is_flag=True,
              help="Remove every discovery item (text blanked everywhere) and reject the "
                   "pending discovery proposals.")
@click.pass_context
def bootstrap_command(ctx: click.Context, reset: bool) -> None:
    """Day-zero system discovery: scan the machine for what to remember about the user
    (names and metadata only), then approve what to keep."""
    if ctx.invoked_subcommand is not None:
        if reset:
            raise click.UsageError("--reset is used alone: ledgermem bootstrap --reset")
        return
    if not reset:
        click.echo(ctx.get_help())
        return
    obj: CommandContext = ctx.obj
    done = obj.handle(embed=False).reset_discovery()
    obj.emit(done, lambda: obj.console.print(
        f"removed {done['items']} discovery items; rejected {done['proposals']} pending "
        "discovery proposals"))


def _report_table(report: ScanReport) -> Table:
    """The findings of a dry run, with their ids."""
    table = Table(title=f"{len(report.findings)} findings ({', '.join(report.scanners)})")
    for column in ("id", "kind", "content", "why"):
        table.add_column(column, no_wrap=column == "id", overflow="fold")
    for finding in report.findings:
        kind = f"{finding.category}, sensitive" if finding.sensitive else finding.category
        table.add_row(finding_id(finding), kind, shown(finding.content),
                      shown(f"{scanner_of(finding)}: {finding.why}"))
    return table


def _outcome_table(report: ScanReport, standing: dict[str, Proposal]) -> Table:
    """Where each finding stands after --approve or --propose."""
    table = Table(title=f"{len(report.findings)} findings")
    for column in ("id", "status", "content"):
        table.add_column(column, no_wrap=column != "content", overflow="fold")
    for finding in report.findings:
        proposal = standing.get(finding_id(finding))
        status = "not proposed" if proposal is None else {
            "approved": "stored", "edited": "stored (edited)"}.get(proposal.status,
                                                                  proposal.status)
        table.add_row(finding_id(finding), status, shown(finding.content))
    return table


def _finding_json(finding: Finding, proposal: Proposal | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"id": finding_id(finding), "scanner": scanner_of(finding),
                            "content": finding.content, "category": finding.category,
                            "context": finding.context, "entity": finding.entity,
                            "sensitive": finding.sensitive,
                            "confidence": finding.confidence, "source": finding.source,
                            "why": finding.why, "key": finding.key}
    if proposal is not None:
        data.update(proposal_id=proposal.id, status=proposal.status,
                    item_id=proposal.item_id)
    return data


@bootstrap_command.command("scan")
@click.option("--scanner", "scanners", multiple=True, type=click.Choice(list(SCANNERS)),
              help="Run only this scanner (repeatable). Default: all of them.")
@click.option("--root", "roots", multiple=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="A folder to search for projects and git repositories (repeatable). "
                   f"Default: the home folder and ~/{', ~/'.join(DEFAULT_ROOTS[:4])}…")
@click.option("--home", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="The home folder to scan. Default: yours.")
@click.option("--days", type=click.IntRange(1, MAX_SCAN_DAYS), default=30,
              show_default=True, help="How far back browser history counts.")
@click.option("--propose", is_flag=True,
              help="Put every finding in the review queue (see `ledgermem review`).")
@click.option("--approve", "approve", multiple=True, metavar="all|IDS",
              help="Store these findings: 'all', or ids from the scan's table "
                   "(repeatable, or separated by commas).")
@click.pass_obj
def scan_command(obj: CommandContext, scanners: tuple[str, ...], roots: tuple[Path, ...],
                 home: Path | None, days: int, propose: bool,
                 approve: tuple[str, ...]) -> None:
    """Scan this machine and show the findings; stores nothing unless --approve or
    --propose is given. Problems (a missing browser, a locked database, permission
    denied) are reported and the other scanners go on."""
    chosen_ids = _ids(approve, "finding") if approve else None
    report = scan(Host.current(os.environ, home),
                  ScanOptions(roots=roots or None, days=days), scanners or None)
    if not obj.as_json:
        for problem in report.problems:
            click.echo(f"note: {problem.scanner}: {problem.message}", err=True)
    if chosen_ids is None and not propose:
        obj.emit({"stored": False, "findings": [_finding_json(f) for f in report.findings],
                  "problems": report.problems},
                 lambda: _show_dry_run(obj, report))
        return
    chosen = report.select(chosen_ids) if chosen_ids is not None else []
    handle = obj.handle(create=True)
    offered = list(report.findings) if propose else chosen
    standing = dict(zip([finding_id(f) for f in offered],
                        handle.propose(offered, proposer=PROPOSER), strict=True))
    wanted = {finding_id(f) for f in chosen}
    pending = [p.id for fid, p in standing.items() if fid in wanted and p.status == "pending"]
    if pending:
        for decided in handle.approve(pending):
            standing.update({fid: decided for fid, p in standing.items() if p.id == decided.id})
    obj.settle()
    obj.emit({"stored": bool(pending),
              "findings": [_finding_json(f, standing.get(finding_id(f)))
                           for f in report.findings],
              "problems": report.problems},
             lambda: obj.console.print(_outcome_table(report, standing)))


def _show_dry_run(obj: CommandContext, report: ScanReport) -> None:
    obj.console.print(_report_table(report))
    click.echo("nothing stored: --approve all|IDS stores findings, --propose queues them "
               "for `ledgermem review`", err=True)


# review -------------------------------------------------------------------------------
def _queue_table(title: str, proposals: Sequence[Proposal]) -> Table:
    """Proposals (the status column only when some proposal is decided; the item
    each approval made is in ``--json`` and ``history``)."""
    decided = any(p.status != "pending" for p in proposals)
    table = Table(title=title)
    for column in ("id", *(["status"] if decided else []), "kind", "content", "why"):
        table.add_column(column, no_wrap=column == "id", overflow="fold")
    for p in proposals:
        kind = f"{p.category}, sensitive" if p.sensitive else p.category
        why = f"{p.proposer}: {p.why}" if p.why else p.proposer
        table.add_row(shown(p.id), *([p.status] if decided else []), shown(kind),
                      shown(p.content), shown(why))
    return table


@click.group("review", invoke_without_command=True)
@click.pass_context
def review_command(ctx: click.Context) -> None:
    """The review queue: what proposers (the bootstrap, an agent, an import) suggest
    remembering. Nothing in it is stored until approved. Alone: lists what is pending."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(review_list)


@review_command.command("list")
@click.option("--status", type=click.Choice(STATUS_FILTERS), default="pending",
              show_default=True)
@click.option("--source", type=click.Choice(SOURCES), default=None,
              help="Only proposals of this item source (discovery…).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=None)
@click.pass_obj
def review_list(obj: CommandContext, status: StatusFilter = "pending",
                source: str | None = None, limit: int | None = None) -> None:
    """List proposals (pending ones by default), oldest first."""
    found = obj.handle(embed=False).proposals(status, source=source, limit=limit)
    obj.emit(found, lambda: obj.console.print(_queue_table(
        f"{len(found)} {'' if status == 'all' else status + ' '}proposals", found)))


@review_command.command("approve")
@click.argument("ids", nargs=-1, required=True)
@click.pass_obj
def review_approve(obj: CommandContext, ids: tuple[str, ...]) -> None:
    """Approve proposals (IDS, or 'all'): each becomes a knowledge item."""
    decided = obj.handle().approve(_ids(ids, "proposal"))
    obj.settle()
    obj.emit(decided, lambda: obj.console.print(
        _queue_table(f"approved {len(decided)}", decided)))


@review_command.command("reject")
@click.argument("ids", nargs=-1, required=True)
@click.pass_obj
def review_reject(obj: CommandContext, ids: tuple[str, ...]) -> None:
    """Reject proposals (IDS, or 'all'): nothing is stored, and their text is blanked."""
    decided = obj.handle(embed=False).reject(_ids(ids, "proposal"))
    obj.emit(decided, lambda: obj.console.print(f"rejected {len(decided)} proposals"))


@review_command.command("edit")
@click.argument("proposal_id")
@click.option("--content", default=None, help="The text to store instead.")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None, help="type:name; an empty value clears it.")
@click.option("--sensitive", is_flag=True, default=None,
              help="Flag the item sensitive (kept out of prompts).")
@click.option("--confidence", type=click.FloatRange(0, 1), default=None)
@click.pass_obj
def review_edit(obj: CommandContext, proposal_id: str, content: str | None,
                category: str | None, context: str | None, entity: str | None,
                sensitive: bool | None, confidence: float | None) -> None:
    """Approve one proposal with changes (what is not given stays as proposed)."""
    decided = obj.handle().edit_and_approve(
        proposal_id, content=content, category=category, context=context, entity=entity,
        sensitive=sensitive, confidence=confidence)
    obj.settle()
    obj.emit(decided, lambda: obj.console.print(
        f"approved [bold]{shown(decided.id)}[/] as item [bold]{shown(decided.item_id)}[/]: "
        f"{shown(decided.changes.get('content', decided.content))}"))
