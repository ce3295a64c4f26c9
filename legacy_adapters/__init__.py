"""Adapters to a running QingLong 2.x install: its callbacks' bytes, its database (read, and written only by
the status writer), its auth cache, its processes on this host, its time units, and the bridge's identity of
its crons and executions.

Imports ``bridge.service``, ``bridge.domain`` and the standard library; never storage, projections, jobs,
callbacks, bootstrap, web or cli. ``legacy_adapters.testing`` holds the doubles of 2.x that tests use.
"""
