"""The Dockerfile read instruction by instruction, its health check run against a local HTTP server, and the
build context that .dockerignore leaves (Docker's matching rules, modelled in tests.deploy.files)."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.files import (
    ROOT,
    Instruction,
    dockerfile_instructions,
    dockerignore_rules,
    env_of,
    in_build_context,
)

INSTRUCTIONS = dockerfile_instructions()
FINAL = max(item.stage for item in INSTRUCTIONS)
ROOT_USERS = {"root", "0"}


def final(keyword: str) -> list[Instruction]:
    return [item for item in INSTRUCTIONS if item.keyword == keyword and item.stage == FINAL]


def only(keyword: str) -> Instruction:
    (item,) = final(keyword)
    return item


def test_every_base_image_is_pinned_to_a_version_tag():
    stage_names: set[str] = set()
    for item in (i for i in INSTRUCTIONS if i.keyword == "FROM"):
        words = [w for w in item.args.split() if not w.startswith("--platform=")]
        image = words[0]
        if len(words) == 3 and words[1].upper() == "AS":
            stage_names.add(words[2])
        if image in stage_names:
            continue
        name, _, digest = image.partition("@")
        tag = name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else ""
        assert digest.startswith("sha256:") or re.search(r"\d", tag), f"{image}: no version tag"
        assert tag != "latest" and "$" not in image, image


def test_the_final_stage_runs_as_a_user_that_is_not_root():
    users = final("USER")
    assert users, "the final stage never leaves root"
    user, _, group = users[-1].args.partition(":")
    assert user not in ROOT_USERS and group not in ROOT_USERS, users[-1].args


def test_entrypoint_and_cmd_are_exec_form_and_start_the_copied_entrypoint_with_serve():
    entrypoint, cmd = only("ENTRYPOINT").exec_form(), only("CMD").exec_form()
    assert entrypoint is not None and cmd is not None, "exec form (JSON arrays), so no shell sits in between"
    copies = [item.args.split() for item in final("COPY")]
    destinations = {words[-1] for words in copies if "docker/entrypoint.sh" in words[:-1]}
    assert entrypoint == [next(iter(destinations))]
    assert cmd == ["serve"]


def test_the_health_check_probes_liveness_with_the_images_python_only():
    command = only("HEALTHCHECK").exec_form()
    assert command is not None and command[:2] == ["python", "-c"]
    code = command[2]
    assert "/livez" in code
    assert not re.search(r"healthz|readyz|curl|wget", code)


def test_nothing_is_added_from_a_url():
    for item in (i for i in INSTRUCTIONS if i.keyword in ("ADD", "COPY")):
        assert not re.search(r"\w+://|git@", item.args), f"{item.keyword} {item.args}"


def test_the_package_is_installed_as_a_regular_install_not_an_editable_one():
    installs = [item.args for item in INSTRUCTIONS if item.keyword == "RUN" and "pip install" in item.args]
    assert installs
    for args in installs:
        assert not re.search(r"(^|\s)(-e|--editable)(\s|$)", args), args


def test_the_store_is_a_volume_and_the_bridge_listens_on_the_exposed_port_without_forwarding_to_itself():
    env = env_of(INSTRUCTIONS, FINAL)
    assert env["BRIDGE_DATA_DIR"] == "/var/lib/ql-bridge"
    assert env["BRIDGE_DATA_DIR"] in only("VOLUME").args
    listen_port = env["BRIDGE_LISTEN"].rpartition(":")[2]
    assert only("EXPOSE").args.split() == [listen_port] == ["5700"]
    assert env["BRIDGE_LEGACY_URL"].rstrip("/").rpartition(":")[2] != listen_port


# --- the health check, executed ------------------------------------------------------------------------------


class LivezServer(http.server.ThreadingHTTPServer):
    status = 200
    paths: list[str]


class LivezHandler(http.server.BaseHTTPRequestHandler):
    server: LivezServer

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        self.server.paths.append(self.path)
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def livez() -> Iterator[LivezServer]:
    server = LivezServer(("127.0.0.1", 0), LivezHandler)
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def health_check(listen: str) -> int:
    command = only("HEALTHCHECK").exec_form()
    assert command is not None
    # A proxy in the environment must not carry the probe away (nothing listens on port 9).
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env.update(BRIDGE_LISTEN=listen, HTTP_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
               NO_PROXY="", no_proxy="")
    return subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, timeout=30).returncode


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_the_health_check_passes_when_livez_answers_200_on_the_listen_port(livez: LivezServer, host: str):
    assert health_check(f"{host}:{livez.server_address[1]}") == 0
    assert livez.paths == ["/livez"]


def test_the_health_check_fails_when_livez_answers_otherwise(livez: LivezServer):
    livez.status = 503
    assert health_check(f"0.0.0.0:{livez.server_address[1]}") == 1


def test_the_health_check_fails_when_nothing_listens(livez: LivezServer):
    port = livez.server_address[1]
    livez.shutdown()
    livez.server_close()
    assert health_check(f"0.0.0.0:{port}") == 1


# --- the build context ------------------------------------------------------------------------------------


def project_files() -> Iterator[str]:
    skip = {".git", ".venv", ".hypothesis", ".pytest_cache", ".ruff_cache"}
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if path.is_file() and relative.parts[0] not in skip:
            yield relative.as_posix()


def test_the_build_context_holds_what_the_package_installs_and_nothing_else():
    rules, files = dockerignore_rules(), list(project_files())
    sent = {name for name in files if in_build_context(name, rules)}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    needed = {"pyproject.toml", project["project"]["readme"], "docker/entrypoint.sh"}

    assert needed <= sent
    for package in packages:
        sources = {name for name in files if name.startswith(f"{package}/") and name.endswith(".py")}
        assert sources and sources <= sent, package
    assert {name.split("/")[0] for name in sent} <= packages | needed | {"docker"}
    assert not [name for name in sent if "__pycache__" in name or name.endswith(".pyc")]


@pytest.mark.parametrize("name", [".git/HEAD", ".venv/bin/python", "var/bridge.sqlite", "var/demo/db/x.sqlite",
                                  "tests/conftest.py", "reports/mismatch-1.json", "ql_bridge.egg-info/PKG-INFO",
                                  "bridge/__pycache__/cli.cpython-311.pyc", ".env", "compose.yaml"])
def test_local_state_and_secrets_stay_out_of_the_build_context(name: str):
    assert not in_build_context(name, dockerignore_rules())


def test_every_copied_source_is_in_the_build_context():
    rules = dockerignore_rules()
    for item in (i for i in INSTRUCTIONS if i.keyword == "COPY" and "--from=" not in i.args):
        sources = [word for word in item.args.split()[:-1] if not word.startswith("--")]
        for source in sources:
            assert in_build_context(source, rules), source
            assert (ROOT / source).exists(), source


@pytest.mark.parametrize(("patterns", "name", "sent"), [
    ("*.md\n!README.md", "README.md", True),
    ("*.md\n!README.md", "NOTES.md", False),
    ("*.md", "docs/NOTES.md", True),  # `*` stops at a slash
    ("docs", "docs/a/b.txt", False),  # a matched directory takes its contents with it
    ("**/__pycache__", "__pycache__/x.pyc", False),
    ("**/__pycache__", "a/b/__pycache__/x.pyc", False),
    ("**/*.py[cod]", "a/x.pyo", False),
    ("*\n!docker/entrypoint.sh", "docker/entrypoint.sh", True),
    ("*\n!docker/entrypoint.sh", "docker/other.sh", False),
    ("!keep\n*", "keep", False),  # the last matching line wins
])
def test_the_dockerignore_model_follows_dockers_rules(tmp_path: Path, patterns: str, name: str, sent: bool):
    ignore = tmp_path / ".dockerignore"
    ignore.write_text(patterns + "\n")
    assert in_build_context(name, dockerignore_rules(ignore)) is sent
