"""The scheduled and on-demand jobs: reconcile, startup recovery, stop decisions, housekeeping, the
projector that writes 2.x's status for primary origins, the legacy import and the reports, plus the
APScheduler schedule that runs them.

Jobs receive their stores, readers and settings from ``bridge.bootstrap``; they may import storage,
projections, legacy_adapters, service and domain, never ``bridge.callbacks``, ``bridge.bootstrap``,
``bridge.web`` or ``bridge.cli``.
"""
