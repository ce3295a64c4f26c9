"""`ql-bridge import-legacy`: 2.x's RunningInstances history as Runs (docs/legacy-2x.md#runninginstances,
#startup-reset, #time-units, docs/run-state.md#adopting-a-2x-database).

2.x's database is never read in place for long and never written: a consistent copy is taken with SQLite's
Online Backup API in short steps (docs/run-state.md#adopting-a-2x-database), checked to be a 2.x database, streamed in
keyset batches, and deleted afterwards. A batch's Runs are built first (RunChange and the opening ladder, outside any
transaction), then written in one short bridge-store transaction that re-checks their keys and also advances the
``import_cursor`` setting, so an interrupted import resumes after its last committed batch; idempotency keys make
a re-run (even without the cursor) import nothing twice. The writes go through the import's storage port
(bridge/service/imports.py), which the composition root opens on the store: its bulk apply writes the rows
RunStore.apply would, with the same row mappers.

A store with one writer at a time (SQLite) is shared with a serving bridge whose shadow writes have 50 ms
before the shell is answered: there each write batch is sized so that its transaction holds the store's write
lock for about ``write_budget_ms`` (measured, batch after batch), and the next one begins no sooner than
IMPORT_GAP_MS after it, long enough for a writer polling in SQLite's busy handler to get in between.

One Run per execution: the rows of a batch are grouped by the execution identity the reconciler uses (cron id,
pid, log path, begin second; replayed start callbacks give 2.x more than one row), and the row that speaks for
the execution is chosen by ``legacy_adapters.identity.speaking_row``, the rule startup recovery and the
reconciler follow. The others are counted as ``replayed``. Every row of the execution names the same key
(``instance_import_key``), so a row of it in a later batch, or a rescan, finds the Run already there (as a
reconcile pass, the first batch an execution appears in decides). For that row:

- finished / error / stopped: a terminal Run + Attempt 1 in mode ``legacy_import`` (key
  ``legacy-import:<cron>:<pid>:<log digest>:<start ms>``, or ``legacy-import:<instance id>`` for a row with no
  usable cron id or start; origin unknown, actor system, every step marked synthesized): succeeded,
  failed (``process_exit_error``), cancelled (``cancelled_by_user``, exit code kept). A stopped row without
  ``finished_at`` is 2.x's boot reset (docs/legacy-2x.md#startup-reset): cancelled with error_code
  ``finish_time_unknown`` and no finish time.
- running: handed to the shadow path, i.e. an active shadow Run under the exact key ShadowRecorder uses, so the
  shell's end callback (or reconciliation) closes it as usual.
- an instance whose Run already exists (any of its keys, the row-id key of earlier imports included) is skipped.

Seconds become milliseconds only through ``legacy_adapters.timeconv``.

The package exposes the job's entry point, ``run_import``. Its parts: ``backup`` (the private copy), ``plan``
(an instance as its Run, pure), ``pacing`` (write batches on a one-writer store), ``summary`` (what was done)
and ``job`` (the batch loop).
"""

from __future__ import annotations

from bridge.jobs.import_legacy.job import run_import

__all__ = ["run_import"]
