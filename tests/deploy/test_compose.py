"""compose.yaml: the bridge beside the official 2.x image, read with the YAML-subset reader (no PyYAML here)
and its bridge environment parsed by the bridge's own Settings."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bridge.config import Settings
from tests.deploy.files import (
    COMPOSE,
    UnsupportedYamlError,
    dockerfile_instructions,
    duration_s,
    env_of,
    load_yaml_subset,
)

TEXT = COMPOSE.read_text()
DOC: dict[str, Any] = load_yaml_subset(TEXT)
SERVICES: dict[str, dict[str, Any]] = DOC["services"]
(LEGACY_NAME,) = [name for name, service in SERVICES.items() if service.get("image", "").startswith("whyour/qinglong")]
(BRIDGE_NAME,) = [name for name, service in SERVICES.items() if service.get("build") == "."]
LEGACY, BRIDGE = SERVICES[LEGACY_NAME], SERVICES[BRIDGE_NAME]
DEFAULT_DRAIN_S = 8
RESTARTING = {"always", "unless-stopped", "on-failure"}


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """target -> (source, options) of the short volume syntax."""
    result = {}
    for entry in service.get("volumes") or []:
        source, target, *options = entry.split(":")
        result[target] = (source, ",".join(options))
    return result


def test_the_bridge_shares_qinglongs_network_and_pid_namespaces():
    assert BRIDGE["network_mode"] == f"service:{LEGACY_NAME}"
    assert BRIDGE["pid"] == f"service:{LEGACY_NAME}"
    assert LEGACY_NAME in BRIDGE["depends_on"]


def test_qinglong_is_pinned_to_a_2x_release():
    tag = LEGACY["image"].rpartition(":")[2]
    assert re.fullmatch(r"2\.\d+\.\d+(-debian)?", tag), LEGACY["image"]


def test_the_public_port_belongs_to_qinglong_and_the_bridge_listens_there():
    assert "ports" not in BRIDGE, "a service in another's network namespace cannot publish ports"
    assert [port.rpartition(":")[2] for port in LEGACY["ports"]] == ["5700"]
    assert BRIDGE["environment"]["BRIDGE_LISTEN"] == "0.0.0.0:5700"


def test_2x_moves_to_5701_and_the_bridge_forwards_there():
    assert LEGACY["environment"]["QlPort"] == LEGACY["environment"]["BACK_PORT"] == "5701"
    assert BRIDGE["environment"]["BRIDGE_LEGACY_URL"] == "http://127.0.0.1:5701"


def test_the_seam_install_command_mounts_2xs_data_read_write_over_the_bridges_read_only_mount():
    (command,) = re.findall(r"^#\s+(docker compose run --rm .* seam install)$", TEXT, re.MULTILINE)
    legacy_source, _ = mounts(LEGACY)["/ql/data"]
    bridge_source, bridge_options = mounts(BRIDGE)["/ql/data"]
    # compose keys a service's mounts by target: the -v given to `run` replaces the read-only one for that container
    assert command == f"docker compose run --rm --user 0:0 -v {legacy_source}:/ql/data {BRIDGE_NAME} seam install"
    assert bridge_source == legacy_source and bridge_options == "ro"
    assert "data/config/config.sh" in TEXT and f"docker compose run --rm {BRIDGE_NAME} doctor" in TEXT


def test_2x_data_is_mounted_read_only_into_the_bridge_and_read_write_into_qinglong():
    legacy_source, legacy_options = mounts(LEGACY)["/ql/data"]
    source, options = mounts(BRIDGE)["/ql/data"]
    assert source == legacy_source
    assert options == "ro" and "ro" not in legacy_options.split(",")
    assert BRIDGE["environment"]["BRIDGE_LEGACY_DATA_DIR"] == "/ql/data"
    assert re.search(r"read-write only\s+#?\s*for an origin in primary mode", TEXT)


def test_the_bridge_store_is_a_named_volume_on_the_images_data_dir():
    image_env = env_of(dockerfile_instructions(), max(i.stage for i in dockerfile_instructions()))
    data_dir = BRIDGE["environment"].get("BRIDGE_DATA_DIR", image_env["BRIDGE_DATA_DIR"])
    assert data_dir == image_env["BRIDGE_DATA_DIR"]
    source, options = mounts(BRIDGE)[data_dir]
    assert source in DOC["volumes"] and not source.startswith((".", "/", "~"))
    assert "ro" not in options.split(",")


def test_the_stop_grace_period_outlasts_the_drain():
    drain = int(BRIDGE["environment"].get("BRIDGE_DRAIN_TIMEOUT_S", DEFAULT_DRAIN_S))
    assert duration_s(BRIDGE["stop_grace_period"]) > drain >= DEFAULT_DRAIN_S


def test_both_services_come_back_after_a_crash():
    assert LEGACY["restart"] in RESTARTING and BRIDGE["restart"] in RESTARTING


def test_no_health_check_in_compose_probes_readiness():
    for service in SERVICES.values():
        assert not re.search(r"healthz|readyz", str(service.get("healthcheck", ""))), service


def test_the_bridge_environment_is_one_the_bridge_accepts():
    settings = Settings.from_env(BRIDGE["environment"])
    assert (settings.listen_host, settings.listen_port) == ("0.0.0.0", 5700)
    assert settings.legacy_tz == "Asia/Shanghai"
    assert settings.legacy_scheduler != "auto", "auto would look for crond in the bridge's image, not 2.x's"
    assert settings.shadow_origins


@pytest.mark.parametrize("text", ["a: [1, 2]\n", "a: &x 1\n", "a: |\n  x\n", "- a: 1\n", "a:\n\tb: 1\n",
                                  "---\na: 1\n", "a: 1\na: 2\n", "a: 'open\n"])
def test_the_yaml_reader_refuses_what_it_does_not_read(text: str):
    with pytest.raises(UnsupportedYamlError):
        load_yaml_subset(text)


def test_the_yaml_reader_reads_nested_blocks_and_quoted_scalars():
    text = "a:\n  b: 'x # y'\n  c:\n    - \"5700:5700\"\n    - v:/d:ro  # note\n  d:\nz: 8\n"
    assert load_yaml_subset(text) == {"a": {"b": "x # y", "c": ["5700:5700", "v:/d:ro"], "d": None}, "z": "8"}
