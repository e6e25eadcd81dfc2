"""API keys: who a request is, and which user's memory it may touch.

A key reads ``lm_<key id>_<secret>``. The store keeps the key id in the clear (so a
key is found by id) and only the SHA-256 of the secret (so a copy of the database
does not hand out keys); the secret is compared by its hash in constant time. Keys
live in the store's database (``KeyStore``), so every server process on one
PostgreSQL database accepts the same keys, and a revocation made through one process
holds at once on the others: nothing is cached.

A user key acts for its user only (and for one agent of that user when bound to it).
The admin key acts for no user by itself: it creates users' keys, lists and revokes
keys, and acts for a user it names explicitly (the server's ``X-Ledgermem-User``
header). The admin key is made at the first start and shown once, or given by the
operator (``LEDGERMEM_ADMIN_KEY``), in which case it is kept in memory only.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Protocol

from ..clock import Clock, iso, system_clock
from ..errors import InvalidInput, LedgermemError, NotFound
from ..store.base import KeyStore, Ledger, StoredKey
from ..validation import check_name, check_optional_name, check_optional_text

__all__ = ["ENV_ADMIN_KEY_ID", "MIN_ADMIN_KEY_CHARS", "KeyInfo", "KeyRing", "KeyStoreWithLedger",
           "Principal", "UserExists"]

PREFIX = "lm_"
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_TOKEN = re.compile(r"lm_([0-9a-f]{16})_([A-Za-z0-9_-]{20,200})")
ENV_ADMIN_KEY_ID = "env-admin"
"""The key id of an admin key given by the operator (never stored)."""
MIN_ADMIN_KEY_CHARS = 24
"""Shortest admin key an operator may give: guessing must stay out of reach."""
MAX_LABEL_CHARS = 200
_DUMMY_HASH = hashlib.sha256(b"no such key").hexdigest()


class UserExists(LedgermemError):
    """A new user was asked for, but the user has memory or a live key already."""


class KeyStoreWithLedger(KeyStore, Ledger, Protocol):
    """What a ``KeyRing`` needs of a store: its keys, and its ledger, to tell whether a
    user exists and to hold off other writers while a user's first key is made."""


@dataclass(frozen=True)
class Principal:
    """Who a verified key speaks for.

    Attributes:
        key_id: the key's id (``env-admin`` for an operator-given admin key).
        user: the user whose memory the key reaches; None only for the admin key.
        agent: the agent the key is bound to, if any.
        admin: whether this is the admin key.
    """

    key_id: str
    user: str | None
    agent: str | None
    admin: bool


@dataclass(frozen=True)
class KeyInfo:
    """A key as it may be shown: everything but the key itself.

    Attributes:
        key_id: the id, which is also the visible part of the key (``lm_<key_id>_…``).
        user: the user the key acts for (None for an admin key).
        agent: the agent it is bound to, if any.
        label: a free note (``"laptop"``, ``"support bot"``).
        admin: whether it is an admin key.
        created_at: when it was made (ISO 8601).
        revoked_at: when it was revoked, or None while it is live.
    """

    key_id: str
    user: str | None
    agent: str | None
    label: str
    admin: bool
    created_at: str
    revoked_at: str | None

    @property
    def active(self) -> bool:
        """Whether the key still opens the API."""
        return self.revoked_at is None


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of a key's secret: what the store keeps.

    One round of SHA-256 is enough for a 256-bit random secret (no dictionary to try);
    slow password hashes exist for secrets people choose.
    """
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _info(key: StoredKey) -> KeyInfo:
    return KeyInfo(key.key_id, key.user_id, key.agent_id, key.label, key.admin,
                   key.created_at, key.revoked_at)


class KeyRing:
    """Create, verify, list and revoke API keys kept in a store.

    Args:
        store: any store (its ``KeyStore`` role holds the hashed keys).
        clock: the time stamped on new and revoked keys (inject one in tests).

    Example:
        >>> ring = KeyRing(memory.store)  # doctest: +SKIP
        >>> token, info = ring.create("alice", label="laptop")  # doctest: +SKIP
        >>> ring.verify(token)  # doctest: +SKIP
        Principal(key_id='…', user='alice', agent=None, admin=False)
    """

    def __init__(self, store: KeyStoreWithLedger, *, clock: Clock = system_clock) -> None:
        self._store = store
        self._clock = clock
        self._env_admin_hash: str | None = None

    # checking -------------------------------------------------------------------
    def verify(self, token: str) -> Principal | None:
        """The principal a presented key speaks for, or None for a key that is
        malformed, unknown or revoked (callers answer all three alike)."""
        if not isinstance(token, str) or len(token) > 512:
            return None
        if self._env_admin_hash is not None and hmac.compare_digest(
                hash_secret(token), self._env_admin_hash):
            return Principal(ENV_ADMIN_KEY_ID, None, None, True)
        match = _TOKEN.fullmatch(token)
        if match is None:
            return None
        key_id, secret = match.groups()
        stored = self._store.api_key(key_id)
        # The hash is compared even for an unknown id, so timing does not tell ids apart.
        expected = stored.secret_hash if stored is not None else _DUMMY_HASH
        if not hmac.compare_digest(hash_secret(secret), expected) or stored is None:
            return None
        if stored.revoked_at is not None:
            return None
        return Principal(stored.key_id, stored.user_id, stored.agent_id, stored.admin)

    # managing -------------------------------------------------------------------
    def create(self, user: str, *, agent: str | None = None, label: str = "") -> tuple[
            str, KeyInfo]:
        """A new key for ``user`` (bound to ``agent`` when given).

        Returns:
            The key itself, shown this once (only its hash is kept), and its info.

        Raises:
            InvalidInput: a user or agent id that is not a storable identifier, or a
                label that is too long.
        """
        check_name(user, "user")
        check_optional_name(agent, "agent")
        return self._create(user, agent, label, admin=False)

    def create_user(self, user: str, *, label: str = "") -> tuple[str, KeyInfo]:
        """A new user's first key, made only while the user has no memory and no live
        key. The check and the new key are one transaction that no other writer of the
        user interleaves with, so of several processes asking at once exactly one gets
        the key. An erased user (memory gone, keys revoked) may be created again.

        Returns:
            The key itself, shown this once, and its info.

        Raises:
            InvalidInput: a user id that is not a storable identifier, or a label that
                is too long.
            UserExists: the user has memory or a live key; give it another key with
                ``create``.
        """
        check_name(user, "user")
        with self._store.writing_for(user):
            if (any(key.revoked_at is None for key in self._store.api_keys(user))
                    or self._store.events(user, limit=1)):
                raise UserExists(f"user {user!r} already exists")
            return self._create(user, None, label, admin=False)

    def _create(self, user: str | None, agent: str | None, label: str, *, admin: bool
                ) -> tuple[str, KeyInfo]:
        label = check_optional_text(label, "label", MAX_LABEL_CHARS) or ""
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        stored = StoredKey(key_id, user, agent, label, admin, hash_secret(secret),
                           iso(self._clock()))
        self._store.add_api_key(stored)
        return f"{PREFIX}{key_id}_{secret}", _info(stored)

    def list(self, user: str | None = None) -> list[KeyInfo]:
        """Every key (of ``user`` when given), oldest first, revoked ones included."""
        if user is not None:
            check_name(user, "user")
        return [_info(key) for key in self._store.api_keys(user)]

    def get(self, key_id: str) -> KeyInfo:
        """One key's info.

        Raises:
            NotFound: no key has this id.
        """
        stored = self._store.api_key(key_id) if _KEY_ID.fullmatch(key_id) else None
        if stored is None:
            raise NotFound(f"no API key {key_id!r}")
        return _info(stored)

    def revoke(self, key_id: str) -> None:
        """Revoke a key: from now on it opens nothing, on every server process.

        Raises:
            NotFound: no live key has this id.
        """
        if not (_KEY_ID.fullmatch(key_id)
                and self._store.revoke_api_key(key_id, iso(self._clock()))):
            raise NotFound(f"no live API key {key_id!r}")

    def ensure_admin(self, env_token: str | None = None) -> str | None:
        """Make sure an admin key exists.

        Args:
            env_token: an admin key chosen by the operator (``LEDGERMEM_ADMIN_KEY``):
                accepted as given, kept in memory only, never stored. Every process
                started with it accepts it.

        Returns:
            The plaintext of an admin key created now (the first start: shown once),
            or None when one already existed or ``env_token`` was given.

        Raises:
            InvalidInput: an ``env_token`` shorter than ``MIN_ADMIN_KEY_CHARS``.
        """
        if env_token is not None:
            if len(env_token) < MIN_ADMIN_KEY_CHARS or len(env_token) > 512:
                raise InvalidInput(f"the admin key must be {MIN_ADMIN_KEY_CHARS} to 512 "
                                   "characters long")
            self._env_admin_hash = hash_secret(env_token)
            return None
        if any(key.revoked_at is None for key in self._store.api_keys(admin=True)):
            return None
        token, _ = self._create(None, None, "admin", admin=True)
        return token

    def create_admin(self, label: str = "admin") -> tuple[str, KeyInfo]:
        """Another admin key (a lost one is replaced by a new one, then revoked)."""
        return self._create(None, None, label, admin=True)
