"""Pure rules about 2.x's view of executions: the ``Crontabs`` / ``RunningInstances`` projection
(``legacy_status``, applied by ``projector``), reconcile findings (``reconcile``), cutover gates and reports
(``gates``, ``report``, ``report_html``), and the seam rule (``seam``).

Imports ``legacy_adapters`` (2.x's vocabulary), ``bridge.service`` ports and ``bridge.domain``; never storage,
jobs, callbacks, bootstrap, web or cli. The only I/O is through the ports handed in (the projector's outbox and
2.x writer).
"""
