"""Run the benchmarks and print their tables; results also go to ``bench/results/``.

    python -m bench                      # LoCoMo (keyword, hybrid) and scale (10k, 100k)
    python -m bench --quick              # LoCoMo keyword only and scale at 10k
    python -m bench --locomo FILE        # another LoCoMo-format file
    python -m bench --postgres URL       # also LoCoMo and scale on PostgreSQL
    python -m bench --crash-trials 5     # fewer crash trials (default 20 per scenario and store)

Then crash safety (``bench.crash``: writers killed with SIGKILL, on SQLite and on
PostgreSQL, the given one or a private one), load (``bench.load``: threads in several
processes on one store, on both), where a default search's time goes
(``bench.latency``: LoCoMo, per phase, and passages/s), writes (``bench.writes``:
``remember``, ``remember_many`` and bulk ``add_turns`` per second, empty and at 20,000
items) and conversation search (``bench.conversations``: 100,000 turns of one user, by
the time a question names).

Searches use the options a user gets by default (recall bookkeeping on); scale also
times each query with touch=False, interleaved, to show what the bookkeeping costs.

Record what it prints, with the machine and date, in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"


def ledgermem(*args: str) -> dict[str, Any]:
    """Run one ``ledgermem bench`` command (its progress bars show on stderr) and
    return its JSON result."""
    command = [sys.executable, "-m", "ledgermem", *args, "--json"]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(output.stdout)  # type: ignore[no-any-return]


def reliability(name: str, *args: str) -> dict[str, Any]:
    """Run ``python -m bench.NAME`` (its progress on stderr) and return its JSON report;
    a run that found problems exits 1 and is reported all the same."""
    command = [sys.executable, "-m", f"bench.{name}", *args, "--json"]
    output = subprocess.run(command, check=False, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    return json.loads(output.stdout)  # type: ignore[no-any-return]


def show(results: dict[str, Any]) -> None:
    console = Console()
    quality = Table(title="retrieval quality (evidence recall@k)")
    for column in ("run", "questions", "R@5", "R@10", "R@20", "p50 ms", "p95 ms", "ingest s"):
        quality.add_column(column, justify="right")
    for name, result in results.items():
        if name.startswith("locomo"):
            quality.add_row(name, str(result["questions"]),
                            *[f"{result[f'recall@{k}']:.3f}" for k in (5, 10, 20)],
                            f"{result['latency_ms']['p50']:.1f}",
                            f"{result['latency_ms']['p95']:.1f}", f"{result['ingest_s']:.1f}")
    console.print(quality)
    scale = Table(title="scale (latency p50 / p95 ms; default search, then touch=False)")
    for column in ("store", "items", "add/s", "add/s full", "hybrid", "keyword", "vector",
                   "query embed", "hybrid no-touch", "keyword no-touch", "RSS MiB",
                   "file MiB"):
        scale.add_column(column, justify="right")
    runs = [(name.removeprefix("scale_") if name != "scale" else "sqlite", run)
            for name in ("scale", "scale_postgres")
            for run in results.get(name, {}).get("runs", [])]
    for store, run in runs:
        lat = run["latency_ms"]
        scale.add_row(store, str(run["items"]), f"{run['add_per_s']:.0f}",
                      f"{run.get('add_per_s_full', 0):.0f}",
                      *[f"{lat[m]['p50']:.1f} / {lat[m]['p95']:.1f}"
                        for m in ("hybrid", "keyword", "vector", "query_embedding")],
                      *[f"{run['latency_ms_no_touch'][m]['p50']:.1f} / "
                        f"{run['latency_ms_no_touch'][m]['p95']:.1f}"
                        for m in ("hybrid", "keyword")],
                      f"{run['peak_rss_mib']:.0f}", f"{run['file_mib']:.0f}")
    console.print(scale)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL to measure too")
    parser.add_argument("--sizes", default=None,
                        help="scale sizes, comma-separated (default 10000,100000)")
    parser.add_argument("--crash-trials", type=int, default=20,
                        help="kill trials per crash scenario and store (0: no crash runs)")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.processor()},
    }
    modes = ["keyword"] if args.quick else ["keyword", "hybrid"]
    if args.locomo.exists():
        for mode in modes:
            results[f"locomo_{mode}"] = ledgermem("bench", "locomo", "--data",
                                                  str(args.locomo), "--mode", mode)
    else:
        print(f"skipping LoCoMo: {args.locomo} not found", file=sys.stderr)
    sizes = args.sizes or ("10000" if args.quick else "10000,100000")
    results["scale"] = ledgermem("bench", "scale", "--items", sizes)
    if args.postgres:
        for mode in modes if args.locomo.exists() else []:
            results[f"locomo_{mode}_postgres"] = ledgermem(
                "--db", args.postgres, "bench", "locomo", "--data", str(args.locomo),
                "--mode", mode)
        results["scale_postgres"] = ledgermem("bench", "scale", "--items", sizes,
                                              "--db", args.postgres)
    pg = ["--postgres", args.postgres] if args.postgres else []
    if args.crash_trials:
        results["crash"] = reliability("crash", "--trials", str(args.crash_trials), *pg)
    results["load"] = reliability("load", *(["--ops", "50"] if args.quick else []), *pg)
    # Write throughput; the full store is 20,000 items here (100,000 fills for minutes
    # on PostgreSQL: run python -m bench.writes alone for it).
    results["writes"] = reliability("writes", "--full", "5000" if args.quick else "20000",
                                    *pg)
    results["conversations"] = reliability(
        "conversations", "--turns", "10000" if args.quick else "100000", *pg)
    if args.locomo.exists():
        results["latency"] = reliability("latency", "--locomo", str(args.locomo),
                                         *(["--samples", "1"] if args.quick else []))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    target = out / f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
    target.write_text(json.dumps(results, indent=2))
    show({k: v for k, v in results.items() if isinstance(v, dict)
          and k not in ("machine", "crash", "load", "latency", "writes", "conversations")})
    from . import conversations, crash, latency, load, writes

    for name, module in (("crash", crash), ("load", load), ("latency", latency),
                         ("writes", writes), ("conversations", conversations)):
        if name in results:
            module.show(results[name])
    print(f"\nresults written to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
