"""The user's documents hold together: the README stays short, every relative link in it, in
bench/README.md and in docs/ reaches a file or folder of the checkout (and, with an anchor, a
heading of that file), and every page of docs/ is reachable from the README."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
DOCUMENTS = [README, REPO / "bench" / "README.md", *DOCS]
MAX_README_LINES = 300

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"[a-z][a-z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose(path: Path) -> str:
    """The text outside fenced code blocks: a `# comment` in a shell block is not a heading."""
    kept: list[str] = []
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            kept.append("")
        else:
            kept.append("" if in_fence else line)
    return "\n".join(kept)


def relative_links(path: Path) -> list[str]:
    links: list[str] = []
    for paragraph in prose(path).split("\n\n"):  # a code span or a link may wrap, not a paragraph
        # Code spans become plain letters: a sample like `[a](b)` is then no link, while a link
        # whose text holds code (its target never does) still is.
        text = CODE_SPAN.sub(lambda m: "x" * len(m.group()), paragraph)
        links += [t for t in LINK.findall(text) if not EXTERNAL.match(t)]
    return links


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    for line in prose(path).splitlines():
        match = HEADING.match(line)
        if match:
            slug = github_slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    broken: list[str] = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file or folder")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    return broken


def test_the_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_reaches_a_file_and_its_heading() -> None:
    broken = {str(p.relative_to(REPO)): b for p in DOCUMENTS if (b := broken_links(p))}
    assert broken == {}


def test_the_readme_links_every_docs_page_and_the_bench_notes() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README)}
    unlinked = [p.relative_to(REPO) for p in [*DOCS, REPO / "bench" / "README.md"]
                if p.resolve() not in linked]
    assert unlinked == []


def test_a_heading_anchor_follows_githubs_rules() -> None:
    assert github_slug("Confirmation: the finalists head to head") == (
        "confirmation-the-finalists-head-to-head")
    assert github_slug("vLLM's CPU build") == "vllms-cpu-build"
    assert github_slug("`loadgen_vs_vllm_bench.py`") == "loadgen_vs_vllm_benchpy"
    assert github_slug("GPU nodes: gpt-oss-120b on Hopper and Blackwell") == (
        "gpu-nodes-gpt-oss-120b-on-hopper-and-blackwell")
