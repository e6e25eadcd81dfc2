"""``make run``: a short scripted tour of the CLI against a fresh database.

Run with ``python -m ledgermem.demo [FOLDER]``; the database is ``FOLDER/demo.db``
(default ``.demo/demo.db``), recreated on every run.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from .cli import main as cli

SCRIPT = [
    'remember "Sarah Chen is my manager at Acme" --entity "person:Sarah Chen"',
    'remember "I prefer green tea over coffee" --category preference',
    'remember "Deploys run from the release branch, never main" --category skill --context work',
    'remember "Renew the passport" --category reminder --due "in 10 days"',
    'recall "who is my manager"',
    'recall "what do I like to drink"',
    "upcoming --days 30",
    'add-turn "I am flying to Lisbon on Friday" --session demo:chat',
    'recall "when is the trip" --conversations',
    "list",
    "stats",
]


def run(folder: Path) -> int:
    console = Console()
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "demo.db"
    for stale in folder.glob("demo.db*"):
        stale.unlink()
    console.rule(f"ledgermem demo — database {db}")
    runner = CliRunner(env={"COLUMNS": str(console.width)})  # tables as wide as this terminal
    for line in SCRIPT:
        console.print(f"\n[bold green]$ ledgermem {line}[/]")
        result = runner.invoke(cli, ["--db", str(db), "--user", "demo", *shlex.split(line)])
        console.out(result.stdout, end="")  # stderr names the database: the rule above does
        if result.exit_code != 0:
            console.out(result.stderr, end="")
            console.print(f"[red]exit code {result.exit_code}[/]")
            return result.exit_code
    console.rule("done — try: .venv/bin/ledgermem --db " + str(db) + " recall tea")
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".demo")))
