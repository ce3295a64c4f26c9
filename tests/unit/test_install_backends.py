"""Which install a 2.x backend process serves and the port it listens on, resolved as back/config/index.ts does
(QL_DATA_DIR, else <QL_DIR>/data; BACK_PORT from the environment, else .env, else the release's default)."""

from __future__ import annotations

from pathlib import Path

from bridge.cli.doctor_release import install_backends
from legacy_adapters.install import BackendProcess, backend_probe, read_dotenv
from legacy_adapters.releases import profile_for


def test_the_data_directory_follows_ql_data_dir_then_ql_dir_then_the_scripts_place(tmp_path: Path) -> None:
    script = ("node", "static/build/app.js")
    assert BackendProcess(1, {"QL_DATA_DIR": "/srv/ql/data/"}, script, tmp_path).data_dir() == Path("/srv/ql/data")
    assert BackendProcess(1, {"QL_DIR": "/ql"}, script, tmp_path).data_dir() == Path("/ql/data")
    assert BackendProcess(1, {}, script, tmp_path).data_dir() == tmp_path / "data"  # relative: from its cwd
    assert BackendProcess(1, {}, ("node", "/opt/ql/static/build/app.js")).data_dir() == Path("/opt/ql/data")
    assert BackendProcess(1, {}, script, None).data_dir() is None  # relative, and the cwd unreadable
    # v2.17.0–v2.17.5 never read QL_DATA_DIR
    assert BackendProcess(1, {"QL_DATA_DIR": "/x", "QL_DIR": "/ql"}, script).data_dir(
        reads_ql_data_dir=False) == Path("/ql/data")


def test_the_port_is_back_port_then_dotenv_then_the_releases_default_never_qlport(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text('# ports\nexport PUBLIC_PORT=5400\nBACK_PORT="5650"\n')
    from_env = BackendProcess(1, {"BACK_PORT": "5602", "QlPort": "5700", "QL_DIR": str(tmp_path)})
    from_dotenv = BackendProcess(1, {"QlPort": "5700", "QL_DIR": str(tmp_path)})
    default = BackendProcess(1, {"QlPort": "5700", "QL_DIR": str(tmp_path / "nothing")})

    assert from_env.listen_port_or(5600) == 5602
    assert from_dotenv.listen_port_or(5600) == 5650
    assert default.listen_port_or(profile_for("2.18.3", "t").default_backend_port) == 5600
    assert default.listen_port_or(profile_for("2.20.2", "t").default_backend_port) == 5700
    assert read_dotenv(tmp_path / ".env") == {"PUBLIC_PORT": "5400", "BACK_PORT": "5650"}


def test_only_the_backends_of_the_fronted_install_are_taken(tmp_path: Path) -> None:
    ours = BackendProcess(1, {"QL_DIR": str(tmp_path / "a")})
    other = BackendProcess(2, {"QL_DATA_DIR": str(tmp_path / "b" / "data")})
    hidden = BackendProcess(3, None)

    chosen = install_backends([ours, other, hidden], tmp_path / "a" / "data", profile_for("2.19.2", "t"))

    assert chosen.ours == [ours] and [b for b, _ in chosen.others] == [other]
    assert "pid 2" in chosen.note(5600) and str(tmp_path / "b" / "data") in chosen.note(5600)
    assert install_backends([ours, other], None, None).ours == [ours, other]


def test_the_probe_is_the_health_route_from_v2_19_and_api_system_before() -> None:
    assert backend_probe(None).path == backend_probe(profile_for("2.19.0", "t")).path == "/api/health"
    old = backend_probe(profile_for("2.18.3", "t"))
    assert old.path == "/api/system" and old.why is not None and "public.js" in old.why


def test_the_processes_of_one_other_install_are_named_as_one_install(tmp_path: Path) -> None:
    """A 2.x backend runs as a cluster (a primary and its workers): three processes, one install to ignore."""
    ours = BackendProcess(1, {"QL_DIR": str(tmp_path / "a")})
    cluster = [BackendProcess(pid, {"QL_DATA_DIR": str(tmp_path / "b" / "data"), "BACK_PORT": "5801"})
               for pid in (30, 10, 20)]
    chosen = install_backends([ours, *cluster], tmp_path / "a" / "data", profile_for("2.21.0", "t"))
    assert chosen.note(5700) == (f"; ignored another 2.x install (not BRIDGE_LEGACY_DATA_DIR's): "
                                 f"data {tmp_path / 'b' / 'data'}, port 5801 (pid 10, 20, 30)")
