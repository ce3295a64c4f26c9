"""ql-bridge: a sidecar in front of QingLong 2.x that records every execution in the 3.0 run-state model.

Rooms, from the edges in (the import-linter ``layers`` contract in pyproject.toml enforces the order: a room
imports only rooms below it, never one above, directly or through another module):

- ``cli``, then ``web``: the edges a user meets (the commands, ``demo``, ``doctor`` and ``seam`` among them;
  the HTTP views).
- ``bootstrap``: the composition root, the only place that builds engines, stores, readers and services.
- ``callbacks`` | ``jobs``: the use cases (the status callback's path; reconcile, recovery, stop decisions,
  projection, import, reports), independent of each other; they receive what they need from bootstrap.
- ``metrics``: the Prometheus vocabulary, and the store gauges read through a storage read at scrape time.
- ``storage`` | ``projections``: the repository behind the service ports; the pure rules of the 2.x projection.
- ``legacy_adapters``: QingLong 2.x's own facts (files, bytes, tokens, time units).
- ``service``: ports and the transaction-shaped write API.  ``config``: settings.  ``domain``: pure rules.
"""
