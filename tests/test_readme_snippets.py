"""The README's first snippets run as written, with the default embedder, and find what
the prose says they find."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def snippet(heading: str) -> str:
    """The first ```python block after ``## heading``."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(heading)}\n.*?```python\n(.*?)```", text,
                      re.MULTILINE | re.DOTALL)
    assert found, f"the README has no python block under {heading!r}"
    return found.group(1)


def run(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_ten_lines_find_the_preference_by_meaning(tmp_path: Path) -> None:
    out = run(snippet("Ten lines"), tmp_path).splitlines()
    assert "Prefers green tea over coffee" in out[0]
    assert "'vector_rank': 1" in out[0]      # found by the embedder too, not words alone
    assert "memory.added" in out[-1]          # the history line
    assert (tmp_path / "memory.db").exists()


def test_the_async_snippet_finds_it_too(tmp_path: Path) -> None:
    body = textwrap.indent(snippet("Async"), "    ")
    out = run(f"import asyncio\n\nasync def main():\n{body}\n"
              "    print([hit.content for hit in hits])\n\nasyncio.run(main())\n", tmp_path)
    assert out.strip() == "['Prefers green tea over coffee']"
