"""MismatchKind is the one list of kinds: every kind the reconciler builds a finding of is a member, every
member is counted by the open-mismatches gauge, and the store's lists are derived from it."""

from __future__ import annotations

import ast
import inspect
import uuid
from types import ModuleType

import pytest
from sqlalchemy import insert

import bridge.jobs.reconcile
import projections.reconcile
from bridge.domain.mismatches import CALLBACK_MISMATCH_KINDS, CRON_KINDS, RECONCILER_KINDS, MismatchKind
from bridge.storage import reconcile_queries
from bridge.storage.gauge_queries import MISMATCH_KINDS, open_mismatches
from bridge.storage.schema import mismatches_table
from projections.reconcile import Finding
from tests.conftest import Backend

_EMITTERS = (projections.reconcile, bridge.jobs.reconcile)


def _finding_kinds(module: ModuleType) -> list[tuple[int, ast.expr]]:
    """The first argument of every ``Finding(...)`` the module builds, with its line."""
    tree = ast.parse(inspect.getsource(module))
    return [(node.lineno, node.args[0]) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding"
            and node.args]


@pytest.mark.parametrize("module", _EMITTERS, ids=lambda m: m.__name__)
def test_every_kind_the_reconciler_builds_a_finding_of_is_a_member(module: ModuleType) -> None:
    kinds = _finding_kinds(module)
    assert kinds, f"{module.__name__} builds no Finding: the scan is looking in the wrong place"
    for line, arg in kinds:
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "MismatchKind":
            assert arg.attr in MismatchKind.__members__, f"{module.__name__}:{line}"
        elif isinstance(arg, ast.Name) and hasattr(module, arg.id):  # a module constant: it must be a member
            assert isinstance(getattr(module, arg.id), MismatchKind), f"{module.__name__}:{line} {arg.id}"
        else:  # a parameter (``kind``): Finding itself holds it to the enum, below
            assert isinstance(arg, ast.Name), f"{module.__name__}:{line}: a kind spelled as a literal"


def test_a_finding_of_a_kind_outside_the_enum_is_refused_and_a_stored_spelling_becomes_the_member() -> None:
    with pytest.raises(ValueError):
        Finding("exit_codes", 1)
    assert Finding("exit_code", 1).kind is MismatchKind.EXIT_CODE


def test_the_store_lists_are_the_enum_split_in_two() -> None:
    assert set(RECONCILER_KINDS) | set(CALLBACK_MISMATCH_KINDS) == set(MismatchKind)
    assert not set(RECONCILER_KINDS) & set(CALLBACK_MISMATCH_KINDS)
    assert reconcile_queries.RECONCILER_KINDS == tuple(kind.value for kind in RECONCILER_KINDS)
    assert CRON_KINDS <= set(RECONCILER_KINDS)
    assert sorted(MISMATCH_KINDS) == sorted(kind.value for kind in MismatchKind)


def test_the_gauge_counts_an_open_mismatch_of_every_kind(sql_backend: Backend) -> None:
    assert sql_backend.engine is not None
    rows = [{"kind": kind.value, "origin": "manual", "legacy_cron_id": 1, "dedupe_key": f"{kind}:{uuid.uuid4()}",
             "first_seen_ms": 1, "last_seen_ms": 1, "diff": "{}", "resolved_at_ms": None} for kind in MismatchKind]
    with sql_backend.engine.begin() as conn:
        conn.execute(insert(mismatches_table), rows)
    with sql_backend.engine.connect() as conn:
        counted = open_mismatches(conn)
    assert counted == {(kind.value, "manual"): 1 for kind in MismatchKind}
