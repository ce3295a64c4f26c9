"""Citations of docs/ pages resolve: every ``docs/<page>.md#<anchor>`` named in a comment, docstring or string of
the code, and every Markdown link between the pages, names a page that exists and a heading on it. The notes the
code once cited (a design file, a 2.x notes file, ADRs by number) are not in the repository, so no citation may
lead there: an ADR number may only stand beside the docs page that explains it."""

from __future__ import annotations

import io
import re
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("bridge", "legacy_adapters", "projections", "migrations", "tests")
PAGES_WITH_ADR_MAP = {"docs/run-state.md", "docs/legacy-2x.md"}  # they name the old numbers on purpose
THIS_FILE = Path(__file__).resolve()

# docs/<page>.md, an optional #anchor, then more anchors of the same page: "docs/a.md#x, #y".
CITATION = re.compile(r"(?<![\w/.-])docs/(?P<page>[\w.-]+\.md)(?:#(?P<anchor>[\w-]+))?(?P<more>(?:,\s*#[\w-]+)*)")
MORE_ANCHOR = re.compile(r"#([\w-]+)")
MD_LINK = re.compile(r"\]\((?P<target>[^)\s#]*\.md)?(?:#(?P<anchor>[^)\s]+))?\)")
OLD_NOTES = re.compile(r"(?<![\w/.-])(?<!\]\()(?:DESIGN|legacy-2x)\.md(?!#)")
ADR_NUMBER = re.compile(r"\bADR-\d+")
DOCS_LINK = re.compile(r"(?<![\w/.-])docs/[\w.-]+\.md|\]\((?:\.\./)*(?:docs/)?[\w.-]+\.md")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of a Markdown page's headings (duplicates numbered as GitHub numbers them)."""
    found: list[str] = []
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6}\s+(.*?)\s*$", line)):
            base = slug(heading.group(1))
            n, key = 0, base
            while key in found:
                n += 1
                key = f"{base}-{n}"
            found.append(key)
    return frozenset(found)


def code_text(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment, docstring and string of a module: where a citation can stand. A one-line
    string counts only when it names an anchor (``docs/a.md#x``): a bare path there is test data, not a citation."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string.lstrip("#")))
        elif tok.type == tokenize.STRING and (re.match(r"(?i)[rbuf]*(\'\'\'|\"\"\")", tok.string)
                                              or re.search(r"docs/[\w.-]+\.md#", tok.string)
                                              or OLD_NOTES.search(tok.string) or ADR_NUMBER.search(tok.string)):
            out.append((tok.start[0], tok.string))
    return out


def code_files() -> list[Path]:
    return [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py")) if p.resolve() != THIS_FILE]


def markdown_files() -> list[Path]:
    return [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "reports" / "README.md"]


def code_blocks() -> list[tuple[str, str]]:
    """(where, text): the comments and strings of each module, one block per module so a citation wrapped
    across comment lines stays whole, plus pyproject.toml (its contract names cite too)."""
    blocks = []
    for path in code_files():
        rel = path.relative_to(ROOT).as_posix()
        blocks.append((rel, "\n".join(text for _, text in code_text(path))))
    blocks.append(("pyproject.toml", (ROOT / "pyproject.toml").read_text(encoding="utf-8")))
    return blocks


def broken_citations(where: str, text: str) -> list[str]:
    broken = []
    for m in CITATION.finditer(text):
        page = ROOT / "docs" / m.group("page")
        wanted = [a for a in [m.group("anchor"), *MORE_ANCHOR.findall(m.group("more"))] if a]
        if not page.exists():
            broken.append(f"{where}: docs/{m.group('page')} does not exist")
            continue
        broken += [f"{where}: docs/{m.group('page')}#{a} names no heading" for a in wanted if a not in anchors(page)]
    return broken


def test_every_docs_citation_in_the_code_names_an_existing_page_and_heading() -> None:
    broken = [problem for where, text in code_blocks() for problem in broken_citations(where, text)]
    assert not broken, "\n".join(broken)


def test_every_link_between_the_markdown_pages_names_an_existing_page_and_heading() -> None:
    broken = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT).as_posix()
        broken += broken_citations(where, re.sub(r"\]\([^)]*\)", "]()", text))  # plain docs/… paths
        for m in MD_LINK.finditer(text):
            target = (path.parent / m.group("target")).resolve() if m.group("target") else path
            if m.group("target") and not target.exists():
                broken.append(f"{where}: {m.group('target')} does not exist")
            elif m.group("anchor") and m.group("anchor") not in anchors(target):
                broken.append(f"{where}: {m.group(0)} names no heading")
    assert not broken, "\n".join(broken)


def test_no_citation_leads_to_notes_outside_the_repository() -> None:
    found = []
    for path in code_files():
        for line, text in code_text(path):
            for n, piece in enumerate(text.splitlines()):
                if OLD_NOTES.search(piece) or (ADR_NUMBER.search(piece) and not DOCS_LINK.search(piece)):
                    found.append(f"{path.relative_to(ROOT)}:{line + n}: {piece.strip()}")
    for path in [*markdown_files(), ROOT / "pyproject.toml"]:
        if path.relative_to(ROOT).as_posix() in PAGES_WITH_ADR_MAP:
            continue
        for n, piece in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OLD_NOTES.search(piece) or (ADR_NUMBER.search(piece) and not DOCS_LINK.search(piece)):
                found.append(f"{path.relative_to(ROOT)}:{n}: {piece.strip()}")
    assert not found, "cite a docs/ page instead:\n" + "\n".join(found)


def test_the_slug_rule_matches_githubs_for_the_headings_the_code_cites() -> None:
    assert slug("Adopting a 2.x database") == "adopting-a-2x-database"
    assert slug("Instance closure ignores log_path") == "instance-closure-ignores-log_path"
    assert slug("Why `config.sh`") == "why-configsh"
    assert slug("From 3.0's plan for shadowing 2.x") == "from-30s-plan-for-shadowing-2x"
    assert slug("Who [links](x.md) here") == "who-links-here"


def test_a_missing_page_or_heading_and_a_citation_of_outside_notes_are_each_caught() -> None:
    assert broken_citations("x", "see docs/run-state.md#durable-cancellation, #records") == []
    assert broken_citations("x", "see docs/run-state.md#no-such-heading") != []
    assert broken_citations("x", "see docs/run-state.md#records, #no-such-heading") != []
    assert broken_citations("x", "see docs/no-such-page.md") != []
    assert OLD_NOTES.search("as " + "legacy-2x" + ".md 3.3 says")
    assert not OLD_NOTES.search("docs/legacy-2x.md#callback-bytes")
    assert not DOCS_LINK.search("ADR-0001 " + "6.2 says so")
    assert DOCS_LINK.search("docs/run-state.md (ADR-0001 6.2)")
