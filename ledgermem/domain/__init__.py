"""The domain layer: what events mean, and how a request becomes events.

- ``events``: the ledger's vocabulary (``Kind``, payload dataclasses, ``new_event``);
- ``projection``: the one pure function from an event to view row changes, and
  ``replay`` for ``as_of``;
- ``dedup``: when a new text restates an existing item;
- ``planners`` / ``writer``: pure planners turn a request and the current rows into
  events; the writer runs them inside the transaction that appends them.

``events`` and ``projection`` are pure and import nothing above ``types``, so every
layer (the stores included) can share them; this package imports no submodule itself.
"""
