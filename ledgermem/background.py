"""The thread loop shared by ledgermem's background workers (embedding, extraction).

A worker's queue lives in the store, so the thread only needs waking: ``notify``
starts it on first use and wakes it, the loop drains ``run_once`` until it returns 0,
and a failure is logged and retried with backoff instead of killing the thread. A
store closed under a running worker ends it (with a warning): no retry can succeed.

At interpreter exit every started worker is stopped as ``close`` stops it (its batch in
flight finishes, the rest stays queued in the store): a daemon thread still inside native
code when the interpreter finalises is ended as it takes the GIL back, and onnxruntime's
C++ frames turn that into an abort ("terminate called without an active exception").
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import weakref

from .errors import StoreClosed

__all__ = ["BackgroundWorker"]

_started: weakref.WeakSet[BackgroundWorker] = weakref.WeakSet()
"""Workers whose thread was started, for ``_close_at_exit``."""


def _close_at_exit() -> None:
    """Stop every started worker, then wait for the batches in flight (10 s in all)."""
    workers = list(_started)
    for worker in workers:
        worker._stop.set()
        worker._wake.set()
    deadline = time.monotonic() + 10
    for worker in workers:
        if worker._thread is not None:
            worker._thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(_close_at_exit)


def lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value by ``nice`` on Linux, so that it runs when
    the threads serving callers leave a core idle; elsewhere (or if refused), nothing."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + nice)
    except OSError:
        pass


class BackgroundWorker:
    """Subclasses implement ``run_once`` (work done, 0 when idle) and set ``thread_name``."""

    thread_name = "ledgermem-worker"
    log_name = "ledgermem"
    idle_wake_s: float | None = None
    """Wake up this often even when nobody calls ``notify`` (None: only when notified)."""
    drains = True
    """Whether a wake runs ``run_once`` until it returns 0 (a backlog worked through), or
    once: work noted meanwhile then waits for the next wake (``RecallWorker``)."""
    nice = 0
    """How much lower than the caller's the thread's CPU priority is (Linux, where
    each thread has its own; threads it starts inherit it)."""

    def __init__(self) -> None:
        self.failures = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._busy = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._log = logging.getLogger(self.log_name)

    def run_once(self) -> int:
        raise NotImplementedError

    def notify(self) -> None:
        """Something was written: do the work soon, in the background thread."""
        self.start()
        self._wake.set()

    def start(self) -> None:
        """Start the thread if it is not running, without waking it: it first runs
        after ``idle_wake_s`` (or the next ``notify``)."""
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._loop, name=self.thread_name,
                                                daemon=True)
                self._thread.start()
                _started.add(self)

    def _loop(self) -> None:
        lower_priority(self.nice)
        delay = 0.5
        while not self._stop.is_set():
            self._wake.wait(timeout=self.idle_wake_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                with self._busy:
                    while not self._stop.is_set() and self.run_once() and self.drains:
                        pass
                delay = 0.5
            except StoreClosed:  # closed under a worker not closed first: nothing can succeed
                self._log.warning("%s stopped: its store was closed", self.thread_name)
                return
            except Exception:  # the worker must outlive a failing model, store or batch
                if self._stop.is_set():  # closing: the store may be gone; work stays queued
                    self._log.debug("%s stopped mid-batch", self.thread_name, exc_info=True)
                    return
                self.failures += 1
                self._log.exception("%s failed; retrying in %.1fs", self.thread_name, delay)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, 30.0)
                self._wake.set()

    def close(self) -> None:
        """Stop the thread; pending work stays pending in the store."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
