"""What the benchmarks share: a settable clock, percentiles, progress bars."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["ManualClock", "percentiles", "progress"]


class ManualClock:
    """A clock the benchmark sets to each sample's "now"."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50 / p95 / mean of latencies in milliseconds."""
    if not samples_ms:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0}
    data = np.asarray(samples_ms)
    return {"p50": round(float(np.percentile(data, 50)), 2),
            "p95": round(float(np.percentile(data, 95)), 2),
            "mean": round(float(data.mean()), 2)}


def progress(quiet: bool = False) -> Progress:
    """A rich progress bar (written to stderr, so ``--json`` output stays clean)."""
    from rich.console import Console

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), disable=quiet,
                    transient=False)
