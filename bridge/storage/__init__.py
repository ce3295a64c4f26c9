"""The bridge store behind the service ports: SQLAlchemy Core on SQLite (default) and PostgreSQL, plus the
in-memory store the contract suite also runs; schema, migrations runner, and the one place driver errors
become bridge errors (``errors``).

Imports ``bridge.service``, ``bridge.domain``, ``bridge.config`` and the libraries; never projections,
legacy_adapters, jobs, callbacks, bootstrap, web or cli.
"""
