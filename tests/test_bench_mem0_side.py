"""The mem0 side-by-side benchmark's parts that need no mem0: the rules its runner copies
from ledgermem's LoCoMo benchmark, reading the runner's output, the table, and the skip
path. The suite never builds the mem0 virtualenv; fake runners are small scripts."""

from __future__ import annotations

import io
import json
import re
import stat
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console

from bench import mem0_runner, mem0_side
from ledgermem.benchmarks.locomo import normalise_evidence, run_locomo, turn_text
from ledgermem.store.sql import EMBED_TEXT

from .test_bench_locomo import SAMPLE

RAW_EVIDENCE = [["D1:1"], ["D8:6; D9:17"], ["D:11:26"], ["D30:05"], ["D1:3", "D1:3"],
                ["X7"], ["D2:2, D1:1"], ["D99:1"], []]
CONVERSATION = cast(dict[str, Any], SAMPLE["conversation"])
KNOWN = {"D1:1", "D1:3", "D2:2", "D8:6", "D11:26", "D30:5"}


@pytest.mark.parametrize("raw", RAW_EVIDENCE)
def test_the_runner_cleans_evidence_as_ledgermem_does(raw: list[str]) -> None:
    ours = normalise_evidence(raw, KNOWN)
    assert mem0_runner.normalise_evidence(raw, KNOWN) == (ours.ids, ours.fixed, ours.skipped)


def test_the_runner_embeds_a_turn_as_ledgermem_does() -> None:
    turns = mem0_runner.sample_turns(CONVERSATION)
    assert [t["dia_id"] for t in turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert [mem0_runner.turn_text(t) for t in turns] == [turn_text(t) for t in turns]
    assert "name || ': '" in EMBED_TEXT["conversations"]
    assert mem0_runner.embedded_text(turns[-1]) == (
        "Ana: Pixel knocked my mug off the desk [shares an image: a kitten on a desk]")


def test_the_runner_asks_the_questions_ledgermem_asks(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps([SAMPLE]))
    known = {t["dia_id"] for t in mem0_runner.sample_turns(CONVERSATION)}
    asked, fixed, skipped = mem0_runner.questions(SAMPLE, known)
    ours = run_locomo(data, ks=(5,), mode="keyword", quiet=True)
    assert (len(asked), fixed, skipped) == (
        ours["questions"], ours["evidence_fixed"], ours["evidence_skipped"])
    assert [q["category"] for q in asked] == [1, 4, 2]   # category 5 is left out


def test_recall_and_summary() -> None:
    rows = [mem0_runner.recall_row(["D1", None, "D2"], ["D2", "D3"], 1, (1, 3)),
            mem0_runner.recall_row(["D5"], ["D5"], 3, (1, 3))]
    assert rows[0] == {"category": 1, 1: 0.0, 3: 0.5}
    result = mem0_runner.summary(rows, (1, 3), [10.0, 20.0, 30.0], 1.234)
    assert (result["recall@1"], result["recall@3"], result["ingest_s"]) == (0.5, 0.75, 1.23)
    assert result["by_category"]["3"] == {"questions": 1, "recall@1": 1.0, "recall@3": 1.0}
    assert result["latency_ms"] == {"p50": 20.0, "p95": 29.0, "mean": 20.0}


def test_mem0_is_configured_offline(tmp_path: Path) -> None:
    config = mem0_runner.mem0_config(tmp_path, "/models/minilm")
    assert config["embedder"]["config"]["model"] == "/models/minilm"
    assert config["vector_store"]["provider"] == "faiss"
    assert config["vector_store"]["config"]["path"].startswith(str(tmp_path))
    assert config["llm"]["config"]["openai_base_url"].startswith("http://127.0.0.1:")
    assert mem0_runner.OFFLINE_ENV["MEM0_TELEMETRY"] == "False"


@pytest.mark.parametrize(("code", "stdout", "why"), [
    (3, "", "exit 3): Traceback … | boom"),
    (0, "not json\n", "printed no result"),
    (0, '{"skipped": "x"}', "printed no result"),
])
def test_a_bad_runner_output_is_a_skip(code: int, stdout: str, why: str) -> None:
    with pytest.raises(mem0_side.Skipped, match=re.escape(why)):
        mem0_side.parse_runner_output(code, stdout, ["Traceback …", "boom"])


def _script(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_a_runner_that_fails_is_skipped_with_its_message(tmp_path: Path) -> None:
    runner = _script(tmp_path / "runner.py",
                     "import sys\nprint('ModuleNotFoundError: mem0', file=sys.stderr)\n"
                     "sys.exit(1)\n")
    with pytest.raises(mem0_side.Skipped, match="ModuleNotFoundError: mem0"):
        mem0_side.run_mem0(Path(sys.executable), tmp_path / "data.json", runner=runner,
                           console=Console(file=io.StringIO()))


def test_a_runner_result_is_read_past_its_progress(tmp_path: Path) -> None:
    result = {"recall@10": 0.5, "latency_ms": {"p50": 1.0, "p95": 2.0}}
    runner = _script(tmp_path / "runner.py",
                     "import json, sys\n"
                     "print('@progress ingest 1 2', file=sys.stderr)\n"
                     "print('a warning', file=sys.stderr)\n"
                     f"print(json.dumps({result!r}))\n")
    assert mem0_side.run_mem0(Path(sys.executable), tmp_path / "data.json", runner=runner,
                              console=Console(file=io.StringIO())) == result


def test_a_virtualenv_that_cannot_be_made_is_a_skip(tmp_path: Path) -> None:
    with pytest.raises(mem0_side.Skipped, match="cannot build the mem0 virtualenv"):
        mem0_side.venv_python(tmp_path / "venv", base_python=str(tmp_path / "no-python"),
                              console=Console(file=io.StringIO()))
    assert not (tmp_path / "venv" / ".mem0-side-requirements").exists()


def _fake_venv(tmp_path: Path, python_body: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _script(venv / "bin" / "python", python_body)
    (venv / ".mem0-side-requirements").write_text("\n".join(mem0_side.MEM0_REQUIREMENTS))
    return venv


def test_a_built_virtualenv_is_reused(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path, "#!/bin/sh\nexit 1\n")
    assert mem0_side.venv_python(venv) == venv / "bin" / "python"


def test_main_skips_with_a_message_and_exits_0(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    venv = _fake_venv(tmp_path, "#!/bin/sh\necho 'torch: cannot import' >&2\nexit 1\n")
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps([SAMPLE]))
    assert mem0_side.main(["--venv", str(venv), "--locomo", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "torch: cannot import" in result["skipped"]
    assert "ledgermem" not in result and "load_before" in result
    assert mem0_side.main(["--venv", str(venv), "--locomo", str(data)]) == 0
    assert "mem0 side by side skipped" in capsys.readouterr().out


def _result(system: str, p50: float, p95: float, r10: float) -> dict[str, Any]:
    return {"system": system, "recall@5": r10 - 0.1, "recall@10": r10, "recall@20": r10 + 0.1,
            "by_category": {"1": {"recall@10": r10 / 2}, "3": {"recall@10": r10 / 3}},
            "latency_ms": {"p50": p50, "p95": p95}, "ingest_s": 12.0,
            "versions": {"mem0ai": "2.2.1"}}


def test_the_table_shows_both_systems_and_the_ratio() -> None:
    mem0, ours = _result("mem0", 16.0, 18.0, 0.4), _result("ledgermem", 4.0, 6.0, 0.8)
    result = {"mem0": mem0, "ledgermem": ours, "ratio": mem0_side.ratios(mem0, ours),
              "load_before": [0.5, 0, 0], "load_after": [1.25, 0, 0]}
    assert result["ratio"] == {"p50": 4.0, "p95": 3.0}
    console = Console(record=True, width=200)
    console.print(mem0_side.table(result))
    text = console.export_text()
    assert "mem0 2.2.1" in text and "0.400" in text and "0.800" in text
    assert "0.200" in text and "0.267" in text          # multi-hop, open-domain R@10
    assert "p50 4.0×, p95 3.0×" in text and "1.25 after" in text
