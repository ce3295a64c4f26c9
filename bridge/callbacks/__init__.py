"""The callback use case: a 2.x task shell's status callback, seen on its way through the bridge.

``routes`` is the one table of the intercepted routes; ``interception`` records each callback in the new model
(shadow, fail-open, within its time budget, its writes on the ``lanes``) and, for origins in primary mode,
``primary`` answers it in 2.x's shape (``answers``). Everything here receives
its collaborators from ``bridge.bootstrap``; it may import the jobs' peers below it (storage, projections,
legacy_adapters, service, domain), never ``bridge.jobs``, ``bridge.bootstrap``, ``bridge.web`` or
``bridge.cli``.
"""
