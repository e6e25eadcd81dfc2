"""The background worker loop: failures are retried, and a close mid-batch is quiet."""

from __future__ import annotations

import logging
import threading

import pytest

from ledgermem.background import BackgroundWorker


class _Failing(BackgroundWorker):
    thread_name = "ledgermem-test-worker"
    log_name = "ledgermem.test-worker"

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def run_once(self) -> int:
        self.started.set()
        self.release.wait(5)
        raise RuntimeError("the store is closed")


def test_a_batch_failing_because_of_close_is_not_logged_as_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    worker = _Failing()
    with caplog.at_level(logging.DEBUG, logger="ledgermem.test-worker"):
        worker.notify()
        assert worker.started.wait(5)
        closing = threading.Thread(target=worker.close)
        closing.start()
        while not worker._stop.is_set():
            pass
        worker.release.set()  # the batch now fails, as it would on a closed store
        closing.join(10)
    assert worker.failures == 0
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_a_failing_batch_is_logged_and_retried() -> None:
    worker = _Failing()
    worker.release.set()
    worker.notify()
    deadline = threading.Event()
    for _ in range(100):
        if worker.failures:
            break
        deadline.wait(0.01)
    worker.close()
    assert worker.failures >= 1
