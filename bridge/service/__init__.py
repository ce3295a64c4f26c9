"""The service layer: the ports storage implements (``ports``, ``outbox``, ``seam``), the transaction-shaped
write API (``run_service``), the shadow recorder's rules, flags, and the read models of the v3 API.

Imports ``bridge.domain``, ``bridge.config`` and the standard library; never SQLAlchemy, Flask, storage,
the adapters or anything above.
"""
