"""Every Python code block of README.md and docs/*.md runs as written (each in its own process,
from the repository's root). A block that needs a GPU, a large model or minutes says so in a
comment on the line before it, `<!-- no-test: REASON -->`, and is left out; the reason must be
given."""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
NO_TEST = re.compile(r"<!--\s*no-test:(.*?)-->\s*$")


def code_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, reason) of every ```python block of a Markdown text; `reason` is the text of a
    `<!-- no-test: REASON -->` comment on the last non-empty line before it, else None."""
    blocks = []
    for match in BLOCK.finditer(text):
        before = [line for line in text[:match.start()].splitlines() if line.strip()]
        marked = NO_TEST.search(before[-1]) if before else None
        blocks.append((text[:match.start()].count("\n") + 1, match.group(1),
                       marked.group(1).strip() if marked else None))
    return blocks


def _blocks():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line, code, reason in code_blocks(path.read_text()):
            yield pytest.param(code, reason, id=f"{path.relative_to(ROOT)}:{line}")


def test_the_parser_finds_blocks_and_their_marks():
    text = ("x\n```python\nprint(1)\n```\n<!-- no-test: needs a GPU -->\n\n```python\na()\n```\n"
            "<!-- no-test: -->\n```python\nb()\n```\n```bash\nls\n```\n")
    assert code_blocks(text) == [(2, "print(1)\n", None), (7, "a()\n", "needs a GPU"),
                                 (11, "b()\n", "")]


@pytest.mark.parametrize("code,reason", list(_blocks()))
def test_python_blocks_of_the_docs_run(code, reason):
    if reason is not None:
        assert reason, "a no-test mark must say why"
        return
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if "probes[\"attn_logits\"]" in code:  # README, "In a Python shell": what it says it prints
        lines = proc.stdout.strip().splitlines()
        assert "resid_post" in lines[0] and "attn_logits" in lines[0]
        assert abs(float(lines[1]) - 64.0 ** 2 / (64.0 ** 2 + 768)) < 5e-3  # F1
