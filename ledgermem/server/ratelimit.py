"""Per-key rate limits: a token bucket per API key, in the server process.

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second; a
request takes one, and a request that finds none is answered 429 with
``Retry-After``, the whole seconds until a token is back. The buckets live in each
process: with several server processes behind one address a key may get up to that
many times the rate, which is what a limit against runaway clients needs (a quota
shared across processes would cost a database write per request).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidInput

__all__ = ["FAILED_KEYS", "RateLimit", "RateLimiter"]


@dataclass(frozen=True)
class RateLimit:
    """How many requests one key may make.

    Attributes:
        rate: tokens added per second (the sustained requests per second).
        burst: the bucket's size (requests that may come at once after a pause).
    """

    rate: float = 50.0
    burst: int = 100

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, int | float) and math.isfinite(self.rate)
                and self.rate > 0):
            raise InvalidInput(f"a rate limit's rate must be a positive number, not "
                               f"{self.rate!r}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise InvalidInput(f"a rate limit's burst must be a positive whole number, not "
                               f"{self.burst!r}")


FAILED_KEYS = RateLimit(rate=1.0, burst=20)
"""How many requests with an unknown or revoked key one client address may make: 20 at
once, then one a second. Keys are long random secrets, but an operator's
``LEDGERMEM_ADMIN_KEY`` is chosen by a person, and guessing it must stay slow."""


class RateLimiter:
    """Token buckets by key id. Thread-safe; at most ``max_keys`` buckets are kept
    (the least recently used go, and come back full).

    Args:
        limit: the rate and burst every key gets.
        clock: monotonic seconds (inject one in tests).
        max_keys: buckets kept at most.
    """

    def __init__(self, limit: RateLimit, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 100_000) -> None:
        self.limit = limit
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take a token for ``key``. Returns 0 when the request may go ahead, else the
        seconds until a token is back (nothing is taken then)."""
        now = self._clock()
        rate, burst = self.limit.rate, float(self.limit.burst)
        with self._lock:
            tokens, last = self._buckets.pop(key, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        return wait
