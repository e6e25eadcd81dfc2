"""LoCoMo recall on a tiny LoCoMo-format sample, in a temporary file and in a given
database of either backend (where the run's users are unique and forgotten after)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledgermem import InvalidInput, Memory
from ledgermem.benchmarks.locomo import run_locomo

SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey kitten named Pixel"},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! Where did you find her?"},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "At the shelter on Harbour Street"},
        ],
        "session_2_date_time": "10:00 am on 20 May, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "I started rowing on the river"},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Pixel knocked my mug off the desk",
             "blip_caption": "a kitten on a desk"},
        ],
    },
    "qa": [
        {"question": "What is the name of Ana's kitten?", "evidence": ["D1:1"], "category": 1},
        {"question": "Where did Ana find the kitten?", "evidence": ["D1:3; D1:1"],
         "category": 4},
        {"question": "Which sport did Ben start?", "evidence": ["D2:1"], "category": 2},
        {"question": "An adversarial one", "evidence": ["D2:2"], "category": 5},
    ],
}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "locomo-tiny.json"
    path.write_text(json.dumps([SAMPLE]))
    return path


def test_recall_in_a_temporary_file(data: Path) -> None:
    result = run_locomo(data, ks=(1, 5), mode="keyword", quiet=True)
    assert (result["questions"], result["backend"]) == (3, "sqlite")
    assert result["recall@5"] == 1.0


def test_a_given_database_is_left_as_it_was_found(db_url: str, data: Path) -> None:
    with Memory.open(db_url, embedder=None) as memory:
        memory.for_user("someone").remember("Already here before the benchmark")
    results = [run_locomo(data, ks=(1, 5), mode="keyword", db=db_url, quiet=True)
               for _ in range(2)]                  # unique users per run: no clash
    assert results[0]["recall@5"] == results[1]["recall@5"] == 1.0
    assert results[0]["recall@1"] == run_locomo(data, ks=(1, 5), mode="keyword",
                                                quiet=True)["recall@1"]
    with Memory.open(db_url, embedder=None) as memory:
        assert memory.store.user_ids() == ["someone"]


def test_the_cli_runs_in_the_global_db_only_when_given_on_the_command_line(
        data: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ledgermem.cli import main

    runner = CliRunner()
    given, from_env = tmp_path / "given.db", tmp_path / "env.db"
    bench = ["bench", "locomo", "--data", str(data), "--mode", "keyword", "--json"]
    done = runner.invoke(main, ["--db", str(given), *bench])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["recall@5"] == 1.0 and given.exists()
    done = runner.invoke(main, bench, env={"LEDGERMEM_DB": str(from_env)})
    assert done.exit_code == 0, done.output
    assert not from_env.exists()             # a benchmark never writes into LEDGERMEM_DB


def test_each_sample_in_a_store_of_its_own(backend: str, db_url: str, data: Path) -> None:
    """A new file per sample, or a new schema per sample (dropped after) on PostgreSQL."""
    db = db_url if backend == "postgres" else None
    result = run_locomo(data, ks=(1, 5), mode="keyword", db=db, quiet=True,
                        store_per_sample=True)
    assert result["recall@5"] == 1.0
    if backend == "postgres":
        import psycopg

        with psycopg.connect(db_url) as conn:
            assert conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE "
                                "'locomo%'").fetchall() == []
    else:
        with pytest.raises(InvalidInput):
            run_locomo(data, mode="keyword", db=db_url, store_per_sample=True)
