"""The pure domain (ADR-0001, ADR-0156): Runs, Attempts, StepRuns, their events and transition rules as data.

Imports the standard library and ``bridge.domain`` only: no SQLAlchemy, Flask, I/O, clock or randomness
(ids and times are passed in).
"""
