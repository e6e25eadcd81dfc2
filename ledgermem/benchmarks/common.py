"""What the benchmarks share: a settable clock, percentiles, progress bars, and
reading a data file whose shape is checked before a run starts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import InvalidInput

__all__ = ["ManualClock", "percentiles", "progress", "read_entries", "require"]


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


def read_entries(path: str | Path, what: str) -> list[dict[str, Any]]:
    """The entries of a benchmark file: a JSON array of objects.

    Raises:
        InvalidInput: the file is missing or unreadable, not UTF-8 JSON, or not an
            array of objects (the message says which entry and what is wrong).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidInput(f"cannot read the {what} file {str(path)!r}: {reason}") from exc
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path} is not JSON ({exc.msg} at line {exc.lineno}); a "
                           f"{what} file is a JSON array") from exc
    if not isinstance(entries, list):
        raise InvalidInput(f"{path} is not a {what} file: it holds a JSON "
                           f"{type(entries).__name__}, not an array")
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InvalidInput(f"{path}: entry {number} is not a JSON object")
    return entries


def require(entry: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str
          ) -> Any:
    """``entry[key]`` when it is of ``kind``; InvalidInput naming ``where`` otherwise."""
    value = entry.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join({"str": "text", "list": "an array", "dict": "an object",
                                "int": "a number"}.get(k.__name__, k.__name__) for k in names)
        raise InvalidInput(f"{where}: {key!r} must be {expected}, not {value!r:.60}")
    return value
