"""`bridge report`: 2.x's RunningInstances set against the shadow Runs, per execution origin, over a window.

Composition-level, like ``bridge/callbacks/interception.py``: ``scan`` reads 2.x through its records port
(legacy_adapters/ports.py) in keyset batches and tallies each instance against its Run; ``build`` adds what only the
bridge store knows (through the ReportReads port, bridge.service.reports) and has the pure ``projections.gates`` /
``projections.report`` turn the figures into the versioned document; ``command`` checks the arguments and writes the
JSON and ``projections.report_html``'s page. The package exposes the job's entry point, ``run_report``.
"""

from __future__ import annotations

from bridge.jobs.report.command import run_report

__all__ = ["run_report"]
