"""BRIDGE_LOG_FORMAT: one format, text or JSON lines, for every line a serving process logs."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.cli.demo import bridge_process, free_port, read_log
from bridge.config import ConfigError, Settings
from bridge.web.server import ClientDataFilter
from tests.cli.conftest import Cli


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


def test_the_setting_is_text_by_default_json_on_request_and_nothing_else() -> None:
    assert Settings.from_env({}).log_format == "text"
    assert Settings.from_env({"BRIDGE_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="BRIDGE_LOG_FORMAT"):
        Settings.from_env({"BRIDGE_LOG_FORMAT": "xml"})


@pytest.mark.usefixtures("restore_root_logging")
def test_json_lines_carry_time_level_logger_message_and_pid() -> None:
    from bridge.logging_setup import configure_logging

    stream = io.StringIO()
    configure_logging("json", stream=stream)

    logging.getLogger("bridge.test").warning("store %s is %s", "x", "slow")

    line = json.loads(stream.getvalue().splitlines()[-1])
    assert set(line) == {"ts", "level", "logger", "message", "pid"}
    assert (line["level"], line["logger"], line["message"], line["pid"]) == ("WARNING", "bridge.test",
                                                                            "store x is slow", os.getpid())
    assert line["ts"].endswith("Z") and "T" in line["ts"]


@pytest.mark.usefixtures("restore_root_logging")
def test_text_lines_keep_the_servers_format() -> None:
    from bridge.logging_setup import configure_logging

    stream = io.StringIO()
    configure_logging("text", stream=stream)

    logging.getLogger("bridge.test").info("hello")

    assert stream.getvalue().rstrip().endswith(f"[{os.getpid()}] INFO bridge.test: hello")


@pytest.mark.usefixtures("restore_root_logging")
def test_the_filters_given_see_every_record_and_a_second_call_replaces_the_handler() -> None:
    from bridge.logging_setup import configure_logging

    first, second = io.StringIO(), io.StringIO()
    configure_logging("text", stream=first)
    configure_logging("json", [ClientDataFilter()], stream=second)

    try:
        raise ValueError("/open/crons?t=secret")
    except ValueError:
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application\n")

    assert first.getvalue() == ""
    line = json.loads(second.getvalue().splitlines()[-1])
    assert line["message"] == "Exception in ASGI application: ValueError" and "secret" not in second.getvalue()


def test_a_serving_process_logs_every_line_as_json(cli: Cli, store: Path) -> None:
    port = free_port()
    env = {**cli.env, "BRIDGE_LISTEN": f"127.0.0.1:{port}", "BRIDGE_LOG_FORMAT": "json"}

    with bridge_process(env, f"http://127.0.0.1:{port}") as proc:
        pass
    lines = read_log(proc).strip().splitlines()

    records = [json.loads(line) for line in lines]  # every line, the bridge's own and the server's
    assert {"bridge.cli", "bridge.server"} <= {r["logger"] for r in records}, lines
