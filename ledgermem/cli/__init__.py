"""The ``ledgermem`` command: a thin click layer over ``Memory``.

What a user sees when something fails is decided in one place, ``Group.main``: one
line on stderr and an exit code (2 bad input, 3 not found, 1 anything else), never a
traceback (``LEDGERMEM_DEBUG=1`` shows it). A store is opened with the embedding
model it records, unless ``--embedder`` / ``LEDGERMEM_EMBEDDER`` names one; commands
that only read never create a database.
"""

from ..bootstrap.commands import bootstrap_command, review_command
from ..mcp.command import mcp_command
from ..server.cli import serve as serve_command
from . import memory, runs, stores  # noqa: F401  (their commands join main)
from .core import EXIT_CODES, build_embedder, failure, main, recorded_embedder, shown_url

__all__ = ["EXIT_CODES", "build_embedder", "failure", "main", "recorded_embedder",
           "shown_url"]

main.add_command(bootstrap_command)
main.add_command(review_command)
main.add_command(mcp_command)
main.add_command(serve_command)
