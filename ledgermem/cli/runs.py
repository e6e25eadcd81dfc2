"""``ledgermem`` commands that run something: the benchmarks, maintenance, status,
doctor and chat."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from ..memory import Memory
from .core import (
    Context,
    _fields_table,
    _one_line,
    _registered,
    _utf8,
    command,
    main,
    shown,
    shown_url,
)


# benchmarks -------------------------------------------------------------------------
@main.group()
def bench() -> None:
    """Retrieval-quality and scale benchmarks."""


def _json_flag(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(Context).as_json = True  # type: ignore[union-attr]


json_option = click.option("--json", "as_json_flag", is_flag=True, expose_value=False,
                           callback=_json_flag, help="Print one JSON object.")


def _ks(value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError as exc:
        raise click.BadParameter("use whole numbers separated by commas, e.g. 5,10,20") from exc
    if not ks or min(ks) < 1:
        raise click.BadParameter("give at least one k ≥ 1")
    return ks


def _print_result(obj: Context, result: dict[str, Any], metrics: list[str]) -> None:
    table = Table(title=f"{result['benchmark']} — {result.get('questions', '')} questions")
    table.add_column("group")
    for metric in metrics:
        table.add_column(metric, justify="right")
    table.add_row("all", *[f"{result.get(m, 0):.4f}" for m in metrics])
    for group, values in (result.get("by_category") or result.get("by_type") or {}).items():
        table.add_row(str(group), *[f"{values.get(m, 0):.4f}" for m in metrics])
    obj.console.print(table)
    obj.console.print(f"latency ms: {result['latency_ms']}  ingest: {result['ingest_s']} s")


def _bench_db(obj: Context, db: str | None) -> str | None:
    """The database a benchmark runs in: its own --db, else the global --db when it was
    given on the command line (never LEDGERMEM_DB: a benchmark should not write into
    the memory the environment points at), else None (a temporary file)."""
    if db is not None:
        return db
    root = click.get_current_context().find_root()
    given = root.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE
    return obj.db if given else None


bench_db_option = click.option(
    "--db", "db", default=None,
    help="Run in this database (a path or postgresql://… URL) instead of a temporary "
         "file; the run's users are unique and forgotten at the end. Default: the "
         "global --db when given on the command line.")


@command(bench, "locomo")
@json_option
@click.option("--data", type=click.Path(exists=True, dir_okay=False), required=True)
@click.option("--k", "ks", default="5,10,20", show_default=True, help="Cut-offs, e.g. 5,10,20.")
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid",
              show_default=True)
@click.option("--embedder", default="default", show_default=True)
@bench_db_option
@click.option("--store-per-sample", is_flag=True,
              help="Each sample in a store of its own (a new file, or a new schema of a "
                   "postgresql:// --db): no BM25 corpus statistics shared between samples.")
def bench_locomo(obj: Context, data: str, ks: str, mode: str, embedder: str,
                 db: str | None, store_per_sample: bool) -> None:
    """Evidence recall@k on a LoCoMo-format file (categories 1–4)."""

    from ..benchmarks.locomo import run_locomo

    cutoffs = _ks(ks)
    _registered(embedder)
    result = run_locomo(Path(data), ks=cutoffs, mode=mode, embedder=embedder,
                        db=_bench_db(obj, db), quiet=obj.as_json,
                        store_per_sample=store_per_sample)
    obj.emit(result, lambda: _print_result(obj, result, [f"recall@{k}" for k in cutoffs]))


@command(bench, "longmemeval")
@json_option
@click.option("--data", type=click.Path(exists=True, dir_okay=False), required=True)
@click.option("--granularity", type=click.Choice(["session", "turn"]), default="session",
              show_default=True)
@click.option("--mode", type=click.Choice(["hybrid", "keyword", "vector"]), default="hybrid",
              show_default=True)
@click.option("--embedder", default="default", show_default=True)
def bench_longmemeval(obj: Context, data: str, granularity: str, mode: str,
                      embedder: str) -> None:
    """recall_any / recall_all / ndcg_any @k on a LongMemEval-format file."""

    from ..benchmarks.longmemeval import run_longmemeval

    _registered(embedder)
    result = run_longmemeval(Path(data), granularity=granularity,  # type: ignore[arg-type]
                             mode=mode, embedder=embedder, quiet=obj.as_json)
    metrics = [f"{m}@{k}" for k in (5, 10) for m in ("recall_any", "recall_all", "ndcg_any")]
    obj.emit(result, lambda: _print_result(obj, result, metrics))


@command(bench, "scale")
@json_option
@click.option("--items", default="10000,100000", show_default=True,
              help="Store sizes to measure, comma-separated.")
@click.option("--queries", type=int, default=200, show_default=True)
@click.option("--db", "db", default=None,
              help="A postgresql://… URL to measure instead of SQLite: each size runs in a "
                   "new schema there, dropped at the end. Default: the global --db when "
                   "it is such a URL given on the command line.")
def bench_scale(obj: Context, items: str, queries: int, db: str | None) -> None:
    """Add throughput, recall latency, peak RSS and file size at several sizes. Searches
    use the defaults a user gets (recall bookkeeping on); each also runs with
    touch=False, interleaved, to show what the bookkeeping costs."""
    from ..benchmarks.scale import run_scale

    url = _bench_db(obj, db)
    if db is None and url is not None and not url.startswith(("postgresql:", "postgres:")):
        url = None  # a global SQLite --db: scale measures new files, as it always did
    result = run_scale(_ks(items), queries=queries, db=url, quiet=obj.as_json)

    def render() -> None:
        table = Table(title="scale")
        for column in ("items", "add/s", "hybrid p50/p95", "keyword p50/p95",
                       "vector p50/p95", "RSS MiB", "file MiB"):
            table.add_column(column, justify="right")
        for run in result["runs"]:
            lat = run["latency_ms"]
            table.add_row(str(run["items"]), f"{run['add_per_s']:.0f}",
                          *[f"{lat[m]['p50']:.1f} / {lat[m]['p95']:.1f}"
                            for m in ("hybrid", "keyword", "vector")],
                          f"{run['peak_rss_mib']:.0f}", f"{run['file_mib']:.0f}")
        obj.console.print(table)

    obj.emit(result, render)


def _memory_with_llm(obj: Context) -> Memory:
    from ..pipeline.extraction import ExtractionOptions

    return obj.open(llm=obj.llm(), extraction=ExtractionOptions(background=False))


@command(main)
@click.option("--all-users", is_flag=True, help="Maintain every user, not only --user.")
def maintain(obj: Context, all_users: bool) -> None:
    """Finish pending extraction, then decay, reconcile, consolidate and prune.

    The LLM comes from LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (and
    LEDGERMEM_LLM_API_KEY); without them the LLM steps are skipped and say so.
    """
    memory = _memory_with_llm(obj)
    memory.flush()
    result = memory.maintain() if all_users else memory.for_user(obj.user).maintain()

    def render() -> None:
        table = Table(title="maintenance" + (" (all users)" if all_users
                                             else f" of {shown(obj.user)}"))
        table.add_column("step")
        table.add_column("result", overflow="fold")
        for step in ("decay", "reconcile", "consolidate", "prune"):
            counts = result.get(step, {})
            table.add_row(step, ", ".join(f"{k}={v}" for k, v in counts.items()))
        for step, why in result.get("skipped", {}).items():
            table.add_row(step, f"skipped: {shown(why)}")
        obj.console.print(table)

    obj.emit(result, render)


@command(main)
@click.option("--probe", is_flag=True, help="Also send the LLM one small extraction "
                                            "(what `doctor` does).")
def status(obj: Context, probe: bool) -> None:
    """Which mode is on (LLM, embedder, none) and what waits for extraction or embedding."""
    memory = _memory_with_llm(obj)
    data = {"database": shown_url(memory.store.url), **memory.for_user(obj.user).status()}
    if probe:
        from ..doctor import probe_any

        data["probe"] = probe_any(memory.llm)
    obj.emit(data, lambda: obj.console.print(_fields_table(f"status of {shown(obj.user)}",
                                                           data)))


@command(main)
def doctor(obj: Context) -> None:
    """Check the set-up: one small extraction sent to the configured LLM (reachable?
    which model and structured-output mode? how fast?) and the embedding model in use.
    Exit 2 when misconfigured, 1 when the model answers nothing usable."""
    from ..doctor import diagnose, render

    report = diagnose(obj.settings, db=obj.db, embedder=obj.embedder,
                      config_error=obj.config_error)
    obj.emit(report.as_dict(), lambda: render(obj.console, report))
    if report.verdict in ("misconfigured", "degraded"):
        click.echo(f"error: {_one_line(report.llm.problem or report.verdict)}", err=True)
        raise click.exceptions.Exit(2 if report.verdict == "misconfigured" else 1)


# chat -------------------------------------------------------------------------------
@command(main)
@click.option("--channel", default="cli", show_default=True,
              help="Where the conversation happens; the session is USER:CHANNEL.")
@click.option("--context", default="global", show_default=True,
              help="The active context (work, personal…).")
def chat(obj: Context, channel: str, context: str) -> None:
    """A terminal chat with memory on, against the configured OpenAI-compatible model.

    The model comes from LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (and
    LEDGERMEM_LLM_API_KEY) or the config file; without one only the slash commands run
    (/remember, /memory, /forget, /reset, /help). /exit or Ctrl-D leaves.
    """
    import httpx

    from ..agent.chat import run_chat, setup_hint
    from ..agent.sessions import Sessions, UserDirectory
    from ..agent.wrapper import MemoryAgent
    from ..config import SettingsWatcher, memory_options, prompt_options, session_options

    _utf8(channel, "--channel")
    _utf8(context, "--context")
    settings = obj.settings
    user = obj.user
    if settings.users_file is not None:
        user = UserDirectory.from_file(settings.users_file).resolve(channel, obj.user)
    memory = obj.open(create=True, **memory_options(settings))
    sessions = Sessions(memory, session_options(settings))
    llm = settings.llm
    client, watcher = None, None
    if llm.configured and llm.base_url is not None:
        headers = {"Authorization": f"Bearer {llm.api_key}"} if llm.api_key else {}
        client = httpx.Client(base_url=llm.base_url, headers=headers, timeout=120.0)
    try:
        sessions.start()
        with MemoryAgent(memory, user=user, channel=channel, sessions=sessions,
                         options=prompt_options(settings), context=context) as agent:
            if obj.config_path is not None:  # an edit rebuilds the prompt; the session stays
                watcher = SettingsWatcher(obj.config_path, os.environ, lambda new: (
                    agent.reconfigure(prompt_options(new))))
            run_chat(obj.console, agent, client, model=llm.model, hint=setup_hint())
        obj.settle()
    finally:
        if watcher is not None:
            watcher.close()
        sessions.close()
        if client is not None:
            client.close()


