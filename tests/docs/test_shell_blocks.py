"""Every shell block on the site parses (`bash -n` on each block the site shows) and every Python block compiles,
for the production cluster, the lab and the SLURM lab (a comment on a continued line or a broken quote would fail
here, not in an operator's hands)."""

import html
import re
import subprocess

import pytest

from .test_site import build, needs_mermaid

BLOCK = re.compile(r'<div class="language-(?:bash|sh|shell) highlight"><pre>(.*?)</pre></div>', re.S)
PYTHON = re.compile(r'<div class="language-python highlight"><pre>(.*?)</pre></div>', re.S)


def shell_blocks(site, pattern=BLOCK):
    for page in sorted(site.rglob("*.html")):
        for match in pattern.finditer(page.read_text(errors="replace")):
            yield page.relative_to(site), html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


@needs_mermaid
@pytest.mark.parametrize("cluster", ["cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"])
def test_every_shell_block_on_the_site_parses(cluster, tmp_path):
    build(cluster, tmp_path)
    blocks = list(shell_blocks(tmp_path))
    assert len(blocks) > 20, f"expected the site's shell blocks, found {len(blocks)}"
    broken = [f"{page}: {problem}\n{text[:400]}" for page, text in blocks for problem in problems(text)]
    assert not broken, "\n\n".join(broken)
    python = list(shell_blocks(tmp_path, PYTHON))
    assert len(python) >= 4, "expected the API page's Python examples"  # two per tier: a reply and a stream
    for page, text in python:
        compile(text, f"{page}", "exec")  # a SyntaxError names the page


def problems(text: str) -> list[str]:
    """bash -n's complaints, and comments inside a continued command: valid syntax that cuts the command short
    (the rest runs as a command of its own), as the lab's quick-start curl once did."""
    check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    found = [check.stderr.strip()] if check.returncode != 0 else []
    lines = text.splitlines()
    found += [f"line {i + 2}: a comment inside a command continued with \\" for i, line in enumerate(lines[:-1])
              if line.rstrip().endswith("\\") and lines[i + 1].lstrip().startswith("#")]
    found += [f"line {i + 1}: a comment swallows the line's continuation \\" for i, line in enumerate(lines)
              if re.search(r"(^|\s)#[^'\"]*\\$", line.rstrip())]
    return found


def test_the_check_catches_what_it_should():
    assert problems("curl -s http://x \\\n  # with the key\n  -d '{}'\n")  # the curl runs without its body
    assert problems('curl -s http://x \\\n  -H "Authorization: Bearer $KEY"  # the key \\\n  -d \'{}\'\n')
    assert problems("echo 'unclosed\n")
    assert not problems("curl -s http://x \\\n  -d '{}'  # a comment at the end is fine\n")
