"""A real `bridge serve` process in front of the 2.x test double, over real HTTP, on each store backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from bridge.cli.demo import Shell, migrated, serving_bridge
from bridge.storage.engine import make_engine
from legacy_adapters.testing.datadir import LegacyDataDir, create_legacy_data_dir
from legacy_adapters.testing.double import Legacy2xDouble
from tests.conftest import POSTGRES_URL_VAR, postgres_required


@dataclass
class LiveBridge:
    url: str
    data: LegacyDataDir
    double: Legacy2xDouble
    database_url: str
    schema: str | None
    store_path: Path | None

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10)

    def shell(self, client: httpx.Client) -> Shell:
        return Shell(client, self.data.system_token)

    def engine(self):  # type: ignore[no-untyped-def]
        return make_engine(self.database_url, pg_search_path=self.schema)

    def metric(self, name: str, **labels: str) -> float:
        with self.client() as client:
            body = client.get("/metrics").text
        total = 0.0
        for line in body.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                if all(f'{k}="{v}"' in line for k, v in labels.items()):
                    total += float(line.rsplit(" ", 1)[1])
        return total


def _postgres_store() -> tuple[str, str] | None:
    url = os.environ.get(POSTGRES_URL_VAR)
    if not url:
        if postgres_required():
            pytest.fail(f"{POSTGRES_URL_VAR} must be set in CI")
        pytest.skip(f"{POSTGRES_URL_VAR} not set")
    return url, f"it_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", params=[pytest.param("sqlite", id="sqlite"),
                                        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBridge]:
    root = tmp_path_factory.mktemp(f"live-{request.param}")
    data = create_legacy_data_dir(root / "ql-data")
    schema = None
    store_path = None
    if request.param == "sqlite":
        store_path = root / "bridge.sqlite"
        database_url = f"sqlite:///{store_path}"
    else:
        database_url, schema = _postgres_store()  # type: ignore[misc]
        admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    migrated(database_url, schema=schema)
    with Legacy2xDouble(data).start() as double:
        with serving_bridge(double.url, data.root, database_url, BRIDGE_SHADOW_BUDGET_MS="2000",
                            BRIDGE_DATA_DIR=str(root), schema=schema) as url:
            yield LiveBridge(url, data, double, database_url, schema, store_path)
    if schema:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
