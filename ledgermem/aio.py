"""The async API: ``AsyncMemory`` and ``AsyncUserMemory``.

The sync core run off the event loop: each method that does I/O runs the ``Memory`` or
``UserMemory`` method of the same name in a worker thread (``anyio.to_thread.run_sync``),
under one ``anyio.CapacityLimiter`` per ``AsyncMemory``. Nothing is reimplemented: the
async methods are made from the sync ones when this module is imported, with their
names, parameters, docstrings and errors, so a parameter added to a sync method is on
its async twin at once (``tests/test_async.py`` checks the method sets match).

Cancellation: a call whose thread has started runs to its end, and the caller waits
for it, whichever way it is cancelled (an anyio or trio cancel scope, or asyncio's
``task.cancel()``, which ``asyncio.timeout`` uses and which anyio's own waiting does
not stop): a write is whole or not made, and no thread goes on behind the caller or
under ``close``. A cancel scope's call then returns its result and the cancellation
comes at the next wait; ``task.cancel()`` raises ``CancelledError`` once the call has
ended, its result dropped. A call cancelled before its thread started never runs.
``close()`` waits for the calls already made; later calls raise ``StoreClosed``.

Example:
    >>> async with AsyncMemory.open("memory.db") as mem:          # doctest: +SKIP
    ...     alice = mem.for_user("alice")
    ...     await alice.remember("Prefers green tea", category="preference")
    ...     hits = await alice.search("what does she drink?")
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Coroutine, Generator
from datetime import datetime
from pathlib import Path
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

import anyio
import anyio.to_thread

from .clock import Clock, DateOrder
from .errors import InvalidInput, StoreClosed
from .memory import Memory
from .pipeline.maintenance import MaintenanceOptions
from .providers.llm import LLM
from .store.base import Store
from .types import Scope
from .user_memory import UserMemory
from .validation import Limits
from .views import MemoryIndex, ViewConfig

__all__ = ["DEFAULT_THREADS", "AsyncMemory", "AsyncUserMemory"]

DEFAULT_THREADS = 8
"""Worker threads one ``AsyncMemory`` uses at most: enough to overlap searches and
writes (SQLite serialises writes anyway), below PostgreSQL's default pool of 10."""

S = TypeVar("S", covariant=True)
P = ParamSpec("P")
R = TypeVar("R")

_POLL_S = 0.005
"""How often a caller that must wait out a worker thread (its call was cancelled
while running, or ``close`` waits for the calls under way) looks again."""


class _Call(Generic[R]):
    """One call handed to a worker thread: it runs unless its caller gave it up first
    (``drop``), and says when it has ended."""

    def __init__(self, function: Callable[[], R]) -> None:
        self._function = function
        self._lock = threading.Lock()
        self._started = False
        self._dropped = False
        self.ended = threading.Event()
        self.result: R | None = None

    def __call__(self) -> R:
        with self._lock:
            if self._dropped:
                return cast(R, None)  # its caller is gone, and so is anyio's future
            self._started = True
        try:
            self.result = self._function()
            return self.result
        finally:
            self.ended.set()

    def drop(self) -> bool:
        """Give the call up: True when it had not started (and now never will)."""
        with self._lock:
            self._dropped = not self._started
            return self._dropped


async def _wait_out(done: Callable[[], bool]) -> BaseException | None:
    """Wait until ``done()``, whatever cancels the caller meanwhile; return the first
    cancellation that came (for the caller to raise once it may)."""
    cancelled: BaseException | None = None
    with anyio.CancelScope(shield=True):  # anyio's cancellations wait outside
        while not done():
            try:
                await anyio.sleep(_POLL_S)
            except anyio.get_cancelled_exc_class() as exc:  # asyncio's task.cancel()
                cancelled = cancelled or exc
    return cancelled


async def _in_thread(call: _Call[R], limiter: anyio.CapacityLimiter | None) -> R:
    """Run ``call`` in a worker thread. Cancelled, the caller waits for the thread
    if it had started: anyio's ``run_sync`` does (it shields its wait), but asyncio's
    ``task.cancel()`` reaches through and would leave the thread running alone."""
    try:
        return await anyio.to_thread.run_sync(call, limiter=limiter)
    except anyio.get_cancelled_exc_class():
        if not call.drop():
            await _wait_out(call.ended.is_set)
        raise


class _Offloading(Generic[S]):
    """What the method descriptors need of their owner: the sync object and a way to
    run a call on a worker thread."""

    @property
    def sync(self) -> S:
        """The sync object underneath (``Memory`` or ``UserMemory``)."""
        raise NotImplementedError

    async def _run(self, call: Callable[[], R]) -> R:
        raise NotImplementedError


class _InThread(Generic[S, P, R]):
    """An async method that runs the sync method it is made from in a worker thread.

    ``search = _InThread(UserMemory.search)`` gives ``AsyncUserMemory.search`` the
    sync method's parameters (for mypy, through ``P``; at run time, through
    ``functools.wraps``) and returns a coroutine of its result.
    """

    def __init__(self, method: Callable[Concatenate[S, P], R]) -> None:
        self._name = getattr(method, "__name__", "")
        self.__doc__ = method.__doc__
        self.__wrapped__ = method

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _InThread[S, P, R]: ...
    @overload
    def __get__(self, obj: _Offloading[S], owner: type[Any]
                ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(self, obj: _Offloading[S] | None, owner: type[Any]
                ) -> _InThread[S, P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if obj is None:
            return self
        method: Callable[P, R] = getattr(obj.sync, self._name)  # its override, if any

        @functools.wraps(method)
        async def in_thread(*args: P.args, **kwargs: P.kwargs) -> R:
            return await obj._run(functools.partial(method, *args, **kwargs))

        vars(obj)[self._name] = in_thread  # made once per object
        return in_thread


class _Opening:
    """What ``AsyncMemory.open`` returns: await it, or use it with ``async with``
    (which closes the memory on the way out)."""

    def __init__(self, opener: Callable[[], Memory], threads: int) -> None:
        self._opener = opener
        self._threads = threads
        self._memory: AsyncMemory | None = None

    async def _open(self) -> AsyncMemory:
        opening = _Call(self._opener)
        try:
            memory = await _in_thread(opening, None)
        except anyio.get_cancelled_exc_class():
            if opening.result is not None:   # opened for a caller no longer there
                await AsyncMemory.from_sync(opening.result).close()
            raise
        return AsyncMemory.from_sync(memory, threads=self._threads)

    def __await__(self) -> Generator[Any, None, AsyncMemory]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncMemory:
        self._memory = await self._open()
        return self._memory

    async def __aexit__(self, *exc: object) -> None:
        if self._memory is not None:
            await self._memory.close()


class AsyncMemory(_Offloading[Memory]):
    """``Memory`` for asyncio and trio: the same methods, awaited, each run in a worker
    thread so that the event loop never waits on the store, the embedder or the LLM.

    Takes ``Memory``'s arguments, and ``threads``, and builds a ``Memory`` (which reads
    the store's embedding model, briefly, on the calling thread);
    ``AsyncMemory.open(url)`` opens the store in a worker thread;
    ``AsyncMemory.from_sync(memory)`` wraps a ``Memory`` already built. Use one
    ``AsyncMemory`` from one event loop.

    Args:
        store: where the ledger and its views live (see ``Memory``).
        threads: how many calls of this memory (and its users' handles) run at once;
            the others wait their turn without blocking the loop.
        **options: ``Memory``'s other arguments (``embedder``, ``llm``, ``clock``…).

    Example:
        >>> async with AsyncMemory.open("memory.db") as mem:      # doctest: +SKIP
        ...     hits = await mem.for_user("alice").search("tea")
    """

    def __init__(self, store: Store, *, threads: int = DEFAULT_THREADS, **options: Any
                 ) -> None:
        # ``options`` are Memory's keyword arguments; the signature says which
        # (``_signature_with_threads``). For a construction mypy checks, use
        # ``AsyncMemory.from_sync(Memory(store, ...))``.
        self._init(Memory(store, **options), threads)

    def _init(self, memory: Memory, threads: int) -> None:
        self._sync = memory
        self._limiter = anyio.CapacityLimiter(_check_threads(threads))
        # The threads' own limiter: ``_limiter`` is taken first, so this one never
        # waits (anyio's default one, shared with the rest of the program, could).
        self._unlimited = anyio.CapacityLimiter(math.inf)
        self._calls = 0
        """Calls made and not ended (running, or waiting for a thread)."""
        self._closing = False
        self._closed: threading.Event | None = None
        self._close_error: BaseException | None = None

    @classmethod
    def from_sync(cls, memory: Memory, *, threads: int = DEFAULT_THREADS) -> AsyncMemory:
        """An ``AsyncMemory`` over an existing ``Memory`` (which stays usable as is)."""
        self = cls.__new__(cls)
        self._init(memory, threads)
        return self

    @classmethod
    def open(cls, url: str | Path | None = None, *, embedder: Any = "default",
             threads: int = DEFAULT_THREADS, **kwargs: Any) -> _Opening:
        """Open the store at ``url`` in a worker thread (see ``Memory.open``):
        ``mem = await AsyncMemory.open(url)``, or ``async with AsyncMemory.open(url)
        as mem:`` to close it on the way out."""
        return _Opening(functools.partial(Memory.open, url, embedder=embedder, **kwargs),
                        _check_threads(threads))

    @property
    def sync(self) -> Memory:
        """The ``Memory`` underneath, for sync code and for what is not a method here."""
        return self._sync

    @property
    def threads(self) -> int:
        """How many calls run in worker threads at once."""
        return int(self._limiter.total_tokens)

    @property
    def store(self) -> Store:
        return self._sync.store

    @property
    def embedder(self) -> Any:
        return self._sync.embedder

    @property
    def llm(self) -> LLM | None:
        return self._sync.llm

    @property
    def clock(self) -> Clock:
        return self._sync.clock

    @property
    def limits(self) -> Limits:
        return self._sync.limits

    @property
    def date_order(self) -> DateOrder | None:
        return self._sync.date_order

    @property
    def views(self) -> ViewConfig:
        return self._sync.views

    @property
    def memory_index(self) -> MemoryIndex | None:
        return self._sync.memory_index

    @property
    def extraction_instructions(self) -> str | None:
        return self._sync.extraction_instructions

    @property
    def maintenance(self) -> MaintenanceOptions:
        return self._sync.maintenance

    @property
    def skipped(self) -> dict[str, str]:
        return self._sync.skipped

    async def _run(self, call: Callable[[], R]) -> R:
        if self._closing:
            raise StoreClosed("the store is closed")
        self._calls += 1
        try:
            async with self._limiter:
                return await _in_thread(_Call(call), self._unlimited)
        finally:
            self._calls -= 1

    def for_user(
        self, user_id: str, agent_id: str | None = None, context: str = "global",
        session_id: str | None = None,
    ) -> AsyncUserMemory:
        """A handle bound to one user (see ``Memory.for_user``); no I/O, so not awaited."""
        return AsyncUserMemory(self, self._sync.for_user(user_id, agent_id, context,
                                                         session_id))

    def report_skipped(self, step: str, why: str | None = None) -> None:
        """Log that a pipeline step is skipped (see ``Memory.report_skipped``)."""
        self._sync.report_skipped(step, why)

    def now(self) -> datetime:
        return self._sync.now()

    flush = _InThread(Memory.flush)
    embed_pending = _InThread(Memory.embed_pending)
    maintain = _InThread(Memory.maintain)
    rebuild = _InThread(Memory.rebuild)
    verify = _InThread(Memory.verify)

    async def close(self) -> None:
        """Close the memory (see ``Memory.close``) once the calls already made have
        ended; a call made after this one began raises ``StoreClosed``. Closing twice
        is harmless. Cancelled, it still closes, and its caller waits for that."""
        self._closing = True
        cancelled = await _wait_out(lambda: not self._calls)
        if self._closed is None:
            self._closed = threading.Event()
            # A thread of its own, which starts at once: a pool's thread could be given
            # up by a cancellation before it starts, leaving the store open.
            threading.Thread(target=self._close_sync, args=(self._closed,),
                             name="ledgermem-close", daemon=True).start()
        cancelled = await _wait_out(self._closed.is_set) or cancelled
        if cancelled is not None:
            raise cancelled
        if self._close_error is not None:
            raise self._close_error

    def _close_sync(self, closed: threading.Event) -> None:
        try:
            self._sync.close()
        except BaseException as exc:  # for close()'s caller, not threading.excepthook
            self._close_error = exc
        finally:
            closed.set()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncUserMemory(_Offloading[UserMemory]):
    """``UserMemory`` for async code: ``mem.for_user(…)`` of an ``AsyncMemory``.

    Every method of ``UserMemory`` is here under the same name and parameters,
    awaited, and runs in one of the memory's worker threads; ``scope``, ``user_id``
    and ``memory`` (the ``AsyncMemory``) are plain attributes.
    """

    def __init__(self, memory: AsyncMemory, handle: UserMemory) -> None:
        self._memory = memory
        self._sync = handle

    @property
    def sync(self) -> UserMemory:
        """The ``UserMemory`` underneath."""
        return self._sync

    @property
    def memory(self) -> AsyncMemory:
        """The ``AsyncMemory`` this handle belongs to."""
        return self._memory

    @property
    def scope(self) -> Scope:
        return self._sync.scope

    @property
    def user_id(self) -> str:
        return self._sync.user_id

    async def _run(self, call: Callable[[], R]) -> R:
        return await self._memory._run(call)

    # knowledge
    remember = _InThread(UserMemory.remember)
    remember_many = _InThread(UserMemory.remember_many)
    update = _InThread(UserMemory.update)
    revise = _InThread(UserMemory.revise)
    invalidate = _InThread(UserMemory.invalidate)
    restore = _InThread(UserMemory.restore)
    update_confidence = _InThread(UserMemory.update_confidence)
    mark_reminded = _InThread(UserMemory.mark_reminded)
    forget = _InThread(UserMemory.forget)
    forget_by_source = _InThread(UserMemory.forget_by_source)
    forget_all = _InThread(UserMemory.forget_all)
    forget_user = _InThread(UserMemory.forget_user)
    get = _InThread(UserMemory.get)
    search = _InThread(UserMemory.search)
    recall = _InThread(UserMemory.recall)
    search_all = _InThread(UserMemory.search_all)
    by_category = _InThread(UserMemory.by_category)
    by_entity = _InThread(UserMemory.by_entity)
    upcoming = _InThread(UserMemory.upcoming)
    history = _InThread(UserMemory.history)
    all_knowledge = _InThread(UserMemory.all_knowledge)
    # conversations
    add_turn = _InThread(UserMemory.add_turn)
    add_turns = _InThread(UserMemory.add_turns)
    session_history = _InThread(UserMemory.session_history)
    search_conversations = _InThread(UserMemory.search_conversations)
    recent_conversations = _InThread(UserMemory.recent_conversations)
    sessions = _InThread(UserMemory.sessions)
    # tools
    log_tool_call = _InThread(UserMemory.log_tool_call)
    tool_errors = _InThread(UserMemory.tool_errors)
    tool_stats = _InThread(UserMemory.tool_stats)
    tool_summary = _InThread(UserMemory.tool_summary)
    # observability and housekeeping
    stats = _InThread(UserMemory.stats)
    llm_usage = _InThread(UserMemory.llm_usage)
    status = _InThread(UserMemory.status)
    activity_timeline = _InThread(UserMemory.activity_timeline)
    recent_errors = _InThread(UserMemory.recent_errors)
    entities = _InThread(UserMemory.entities)
    contexts = _InThread(UserMemory.contexts)
    requeue_extraction = _InThread(UserMemory.requeue_extraction)
    maintain = _InThread(UserMemory.maintain)
    apply_confidence_decay = _InThread(UserMemory.apply_confidence_decay)
    prune = _InThread(UserMemory.prune)
    flush = _InThread(UserMemory.flush)
    # ledger and views
    record = _InThread(UserMemory.record)
    ledger_events = _InThread(UserMemory.ledger_events)
    episodic = _InThread(UserMemory.episodic)
    salient = _InThread(UserMemory.salient)
    reflection_due = _InThread(UserMemory.reflection_due)
    reflect = _InThread(UserMemory.reflect)
    beliefs = _InThread(UserMemory.beliefs)
    # the review queue
    propose = _InThread(UserMemory.propose)
    proposals = _InThread(UserMemory.proposals)
    proposal = _InThread(UserMemory.proposal)
    approve = _InThread(UserMemory.approve)
    edit_and_approve = _InThread(UserMemory.edit_and_approve)
    reject = _InThread(UserMemory.reject)
    reset_discovery = _InThread(UserMemory.reset_discovery)


def _check_threads(threads: int) -> int:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InvalidInput(f"threads must be a positive integer, not {threads!r}")
    return threads


def _signature_with_threads(method: Callable[..., Any]) -> inspect.Signature:
    """``method``'s signature with ``threads`` added before its ``**kwargs``, if any."""
    signature = inspect.signature(method)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    rest = [p for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]
    threads = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY,
                                default=DEFAULT_THREADS, annotation="int")
    return signature.replace(parameters=[*params, threads, *rest])


# ``AsyncMemory(store, ...)`` takes what ``Memory(store, ...)`` takes, as that is now.
AsyncMemory.__init__.__signature__ = _signature_with_threads(  # type: ignore[attr-defined]
    Memory.__init__)
