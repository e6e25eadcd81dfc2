"""``python -m examples.village [--db FILE] [--turns N]``: play the village scene.

The model is the scripted server of ``ledgermem.testing`` on loopback, unless
``LEDGERMEM_LLM_BASE_URL`` and ``LEDGERMEM_LLM_MODEL`` (and ``LEDGERMEM_LLM_API_KEY``
when the server needs a key) name an OpenAI-compatible endpoint. The ledger is a
SQLite file in a temporary folder, removed afterwards, unless ``--db`` names a new one
to keep.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from ledgermem import LLM, ConfigError, LedgermemError, OpenAICompatibleLLM
from ledgermem.testing import ScriptedLLMServer

from .scene import open_village, play
from .story import CHAPTERS, ScriptedVillage


@contextmanager
def model(environ: dict[str, str]) -> Iterator[tuple[LLM, str]]:
    """The configured endpoint's model, or the scripted one; and a line saying which."""
    base_url = environ.get("LEDGERMEM_LLM_BASE_URL")
    name = environ.get("LEDGERMEM_LLM_MODEL")
    if base_url or name:
        if not (base_url and name):
            raise ConfigError("set both LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL "
                              "(and LEDGERMEM_LLM_API_KEY if the server needs a key)")
        llm = OpenAICompatibleLLM(name, base_url,
                                  api_key=environ.get("LEDGERMEM_LLM_API_KEY") or None)
        try:
            yield llm, f"model {name} at {base_url}"
        finally:
            llm.close()
        return
    with ScriptedLLMServer(default=ScriptedVillage()) as server:
        llm = OpenAICompatibleLLM("scripted-village", server.url, timeout=10, retries=0,
                                  validation_retries=0)
        try:
            yield llm, f"the scripted model of ledgermem.testing at {server.url}"
        finally:
            llm.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.village",
                                     description="Villagers and a judge solve a mystery "
                                                 "over one ledger.")
    parser.add_argument("--db", type=Path,
                        help="a new SQLite file to keep the ledger in (default: a "
                             "temporary one, removed afterwards)")
    parser.add_argument("--turns", type=int, default=len(CHAPTERS),
                        help=f"turns to play, 1 to {len(CHAPTERS)} (default: all)")
    args = parser.parse_args(argv)
    if not 1 <= args.turns <= len(CHAPTERS):
        parser.error(f"--turns must be from 1 to {len(CHAPTERS)}")
    try:
        with ExitStack() as stack:
            llm, which = stack.enter_context(model(dict(os.environ)))
            db = args.db
            if db is None:
                db = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "village.db"
            village = stack.enter_context(open_village(db, llm))
            turns = f"{args.turns} turn{'s' if args.turns > 1 else ''}"
            print(f"The village: {turns}, played by {which}; ledger {db}\n")
            play(village, turns=args.turns, echo=print)
    except LedgermemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
