"""The pure domain (docs/run-state.md): Runs, Attempts, StepRuns, their events and transition rules as data.

Imports the standard library and ``bridge.domain`` only: no SQLAlchemy, Flask, I/O, clock or randomness
(ids and times are passed in).
"""
