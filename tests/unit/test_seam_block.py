"""The ql-bridge block's text, and putting it into and taking it out of config.sh's text (the pure half)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from legacy_adapters.seam_block import (
    BEGIN,
    END,
    SeamBlockError,
    find_blocks,
    qlport_outside_block,
    render_block,
    with_block,
    without_block,
)

AT = datetime(2026, 12, 5, 6, 40, tzinfo=UTC)
BLOCK = render_block(5701, AT)
SAMPLE = '## 2.x\'s sample\nAutoDelCron="true"\nexport PUSH_KEY=""\n'


def test_the_block_names_ql_bridge_and_its_time_and_sends_callbacks_to_its_port_never_touching_qlport() -> None:
    lines = BLOCK.splitlines()

    assert lines[0].startswith(BEGIN) and "2026-12-05T06:40:00Z" in lines[0] and "ql-bridge seam remove" in lines[0]
    assert lines[-1].startswith(END) and BLOCK.endswith("\n")
    pointing = [line.strip() for line in lines if "127.0.0.1:5701" in line and not line.startswith("#")]
    assert pointing == ['ql_bridge_url="http://127.0.0.1:5701$path"']
    assert "QlPort" not in BLOCK and "--connect-timeout 1" in BLOCK
    assert [b.sets_qlport for b in find_blocks(BLOCK)] == [False]


@pytest.mark.parametrize("original", [SAMPLE, SAMPLE.rstrip("\n"), "", "\n", "a\r\nb\r\n"],
                         ids=["newline at end", "no newline at end", "empty", "only a newline", "crlf"])
def test_taking_the_block_out_gives_back_the_text_it_was_put_into_byte_for_byte(original: str) -> None:
    installed = with_block(original, BLOCK)

    assert [b.port for b in find_blocks(installed)] == [5701]
    assert without_block(installed) == original


def test_installing_again_leaves_one_block_in_the_same_place_with_the_new_port() -> None:
    once = with_block(SAMPLE, BLOCK) + "export LATER=1\n"

    twice = with_block(once, render_block(5700, AT))

    assert [b.port for b in find_blocks(twice)] == [5700]
    assert twice.endswith("export LATER=1\n") and without_block(twice) == SAMPLE + "export LATER=1\n"


def test_a_second_copy_of_the_block_is_folded_into_one() -> None:
    doubled = with_block(SAMPLE, BLOCK) + BLOCK

    assert len(find_blocks(with_block(doubled, BLOCK))) == 1
    assert without_block(doubled) == SAMPLE


def test_edits_made_around_the_block_since_install_are_kept_when_it_is_taken_out() -> None:
    installed = with_block(SAMPLE, BLOCK)
    edited = "# added on top\n" + installed.replace('PUSH_KEY=""', 'PUSH_KEY="abc"') + "export NEW=1\n"

    assert without_block(edited) == '# added on top\n## 2.x\'s sample\nAutoDelCron="true"\nexport PUSH_KEY="abc"\n' \
                                    "export NEW=1\n"


@pytest.mark.parametrize("text, message", [
    (f"{BEGIN}: x >>>\nexport QlPort=1\n", "line 1 opens a ql-bridge block that no line closes"),
    (f"a\n{END} <<<\n", "line 2 closes a ql-bridge block that no line opened"),
    (f"{BEGIN} >>>\n{BEGIN} >>>\n{END} <<<\n", "line 1 opens a ql-bridge block that line 2 opens again"),
])
def test_a_marker_without_its_partner_is_refused_rather_than_guessed_at(text: str, message: str) -> None:
    with pytest.raises(SeamBlockError, match=message):
        with_block(text, BLOCK)
    with pytest.raises(SeamBlockError):
        without_block(text)


@pytest.mark.parametrize("line", ["export QlPort=5700", "QlPort=5700", "  declare -x QlPort=5700",
                                  "[ -n \"$X\" ] && QlPort=1", "a=1; QlPort=2", "unset QlPort", "unset A QlPort",
                                  "QlPort+=0"])
def test_a_line_setting_qlport_outside_the_block_is_found_by_its_number(line: str) -> None:
    text = with_block(SAMPLE, BLOCK) + line + "\n"

    assert qlport_outside_block(text) == (len(text.splitlines()), line)


@pytest.mark.parametrize("line", ["# export QlPort=5700", "  # QlPort=1", '[[ $QlPort == 5700 ]] && echo y',
                                  'echo "$QlPort"', "MyQlPort=1", "export QlPortWithoutBridge=1"])
def test_lines_that_do_not_set_qlport_and_the_blocks_own_lines_are_not_counted(line: str) -> None:
    assert qlport_outside_block(with_block(SAMPLE + line + "\n", BLOCK)) is None


def test_the_block_module_is_pure_text_work() -> None:
    import ast

    import legacy_adapters.seam_block as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported == {"__future__", "re", "dataclasses", "datetime"}


def test_the_seam_page_shows_the_block_the_command_writes() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "seam.md").read_text()
    shown = page.split(f"```sh\n{BEGIN}", 1)[1].split("```", 1)[0].splitlines()[1:]
    code = [line for line in shown if not line.startswith("# ")]
    written = render_block(5700, AT).splitlines()

    assert code and all(line in written for line in code)
    assert [line for line in written if not line.startswith("# ")] == code
