"""The server's access log (``ledgermem serve --access-log``), without query strings.

A request's query string can hold what a user's memory holds (an entity, a session
id, a user's name in an admin call), and an access log is kept and shipped with far
less care than the database: each logged path keeps its ``?`` and drops what follows.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

__all__ = ["WithoutQuery", "log_config"]


class WithoutQuery(logging.Filter):
    """Drops the query string from uvicorn's access records (client, method, path,
    HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, asked, _ = args[2].partition("?")
            if asked:
                record.args = (args[0], args[1], f"{path}?...", args[3], args[4])
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration with ``WithoutQuery`` on the access log (a
    configuration, not a filter added in this process: ``--workers`` processes build
    their logging from it)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["without_query"] = {"()": f"{__name__}.WithoutQuery"}
    config["handlers"]["access"]["filters"] = ["without_query"]
    return config
