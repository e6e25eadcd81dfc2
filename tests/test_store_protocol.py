"""Both stores implement every role of the ``Store`` protocol, with the protocol's
signatures, and every protocol method declares whose rows it touches (``RowScope``),
which ``PostgresStore`` enforces with row-level security."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager
from typing import Any, get_args, get_origin

import pytest

from ledgermem.memory import Memory, open_store
from ledgermem.store import base
from ledgermem.store.base import ROLES, RowScope, Store, protocol_methods, row_scope
from ledgermem.store.postgres import PostgresStore
from ledgermem.store.sqlite import SQLiteStore

STORES = (SQLiteStore, PostgresStore)


def _shape(method: Callable[..., Any]) -> tuple[Any, ...]:
    """What a caller relies on: parameter names, kinds, defaults and types (``self``
    left out), and the return type; a ``@contextmanager`` generator's ``Iterator[T]``
    reads as the ``AbstractContextManager[T]`` it returns."""
    signature = inspect.signature(method, eval_str=True)
    params = [(p.name, p.kind, p.default, p.annotation)
              for p in list(signature.parameters.values())[1:]]
    returns = signature.return_annotation
    manager = get_origin(returns) is AbstractContextManager or (
        inspect.isgeneratorfunction(inspect.unwrap(method))
        and get_origin(returns) in (Iterator, Generator))
    if manager:
        returns = (AbstractContextManager, get_args(returns)[0])
    return params, returns


def test_every_method_belongs_to_exactly_one_role() -> None:
    names = [name for role in ROLES for name in vars(role)
             if not name.startswith("_") and callable(vars(role)[name])]
    assert len(names) == len(set(names))
    assert set(names) == {name for name in dir(Store)
                          if not name.startswith("_") and callable(getattr(Store, name))}


@pytest.mark.parametrize("store_class", STORES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
def test_store_has_the_roles_signatures(store_class: type[Any], role: type[Any]) -> None:
    for name, declared in vars(role).items():
        if name.startswith("_") or not callable(declared):
            continue
        implemented = getattr(store_class, name, None)
        assert implemented is not None, f"{store_class.__name__} lacks {role.__name__}.{name}"
        assert _shape(implemented) == _shape(declared), (
            f"{store_class.__name__}.{name} drifted from {role.__name__}.{name}")


def test_store_is_every_role(db_url: str) -> None:
    store = open_store(db_url)
    try:
        assert isinstance(store, STORES)
        roles: tuple[type[Any], ...] = (*ROLES, Store)
        for role in roles:
            assert isinstance(store, role), role.__name__
    finally:
        store.close()


# row scopes ---------------------------------------------------------------------------
def test_every_protocol_method_declares_its_row_scope() -> None:
    undeclared = [name for name, method in protocol_methods().items()
                  if row_scope(method) is None]
    assert undeclared == []


def test_a_user_scoped_method_takes_the_user_first() -> None:
    """``RowScope.USER`` means the user is the first argument, named ``user_id``."""
    for name, method in protocol_methods().items():
        if row_scope(method) is RowScope.USER:
            first = list(inspect.signature(method).parameters)[1]
            assert first == "user_id", name
    append = protocol_methods()["append"]
    assert list(inspect.signature(append).parameters)[1] == "events"


def test_a_method_takes_one_row_scope() -> None:
    def method(self: Any, user_id: str) -> None: ...

    base.scoped_to_user(base.scoped_to_user(method))  # the same twice is one declaration
    with pytest.raises(TypeError, match="two row scopes"):
        base.across_users(method)


def test_postgres_runs_each_method_in_its_declared_scope() -> None:
    """``PostgresStore`` wraps each protocol method in the scope the protocol declares,
    and leaves ``RowScope.NONE`` methods (meta, transaction boundaries) alone."""
    for name, method in protocol_methods().items():
        declared = row_scope(method)
        enforced = row_scope(getattr(PostgresStore, name))
        assert enforced is (None if declared is RowScope.NONE else declared), name


def test_a_call_sees_the_rows_of_its_declared_scope(mem: Memory) -> None:
    """On PostgreSQL a call sees only what its scope lets row-level security show: the
    user of its first argument, given by position or as ``user_id=``; or everyone."""
    item = mem.for_user("alice").remember("Alice's kettle is blue")
    mem.for_user("bob").remember("Bob's kettle is red")
    store = mem.store
    found = [store.get_item("alice", item.id), store.get_item(user_id="alice", item_id=item.id)]
    assert [i and i.content for i in found] == ["Alice's kettle is blue"] * 2
    assert store.get_item("bob", item.id) is None
    assert [e.user_id for e in store.events(user_id="bob")] == ["bob"]
    assert store.user_ids() == ["alice", "bob"]
    assert [e.user_id for _, e in store.ledger(0, 10)] == ["alice", "bob"]
