"""The docs a user reads: no path outside the repository, no ticket numbers, results filed under
docs/results/<study>/ with an index, and the layer order the docs state equal to `.importlinter`'s.
Every check reads the tracked files (`git ls-files`)."""
import configparser
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The one name per study (docs/results/<study>/, docs/<STUDY>.md).
STUDIES = {"sweep", "depth", "train", "pretrained", "cross_modal", "extreme", "normalizations",
           "embeddings", "series", "report"}
ISSUE_NUMBER = re.compile(r"(?<![a-z])issue ?#?\d+", re.I)
URL = re.compile(r"https?://\S+")
LAYERS_LINE = re.compile(r"^Layers, top to bottom: (.+)$", re.M)


def _tracked() -> list[str]:
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: " + proc.stderr.decode()[-200:])
    return [name for name in proc.stdout.decode().split("\0") if name]


def _texts():
    """(path, text) of every tracked text file (a NUL byte marks a binary one)."""
    for name in _tracked():
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        yield name, data.decode("utf-8", errors="replace")


def _hits(pattern, strip=None):
    found = []
    for name, text in _texts():
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(strip.sub("", line) if strip else line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    return found


def test_no_file_cites_a_path_outside_the_repository():
    # the project brief lives beside the checkout, not in it: docs/SCIENCE.md is the reader's copy
    assert not _hits(re.compile(r"\.\./shared\b")), _hits(re.compile(r"\.\./shared\b"))


def test_no_file_names_a_ticket_number():
    """Code and docs say what a thing is, not which ticket made it; a URL (another project's
    issue tracker) is the one place such a number may stand."""
    hits = _hits(ISSUE_NUMBER, strip=URL)
    assert not hits, "\n".join(hits)


def test_the_ticket_pattern_catches_the_forms_it_must():
    word = "issue"  # spelt apart so that this file passes the check above
    for text in (f"Extreme tokens ({word} 22)", f"after_{word}11", f"{word.title()} #24's loop",
                 f"{word}24_cpu"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("see the issue tracker", "tissue 3", "https://github.com/o/r/issues/12"):
        assert not ISSUE_NUMBER.search(URL.sub("", text)), text


def test_results_are_filed_by_study_and_indexed():
    results = ROOT / "docs" / "results"
    tracked = {pathlib.PurePosixPath(n).parts[2] for n in _tracked()
               if n.startswith("docs/results/") and len(pathlib.PurePosixPath(n).parts) > 3}
    assert tracked <= STUDIES, sorted(tracked - STUDIES)
    index = (results / "README.md").read_text()
    missing = [name for name in sorted(tracked) if f"]({name}/" not in index]
    assert not missing, f"docs/results/README.md does not link {missing}"
    # nothing outside docs/results/ and docs/benchmarks/ holds results: the docs/ top level is pages
    stray = {pathlib.PurePosixPath(n).parts[1] for n in _tracked()
             if n.startswith("docs/") and len(pathlib.PurePosixPath(n).parts) > 2}
    assert stray <= {"results", "benchmarks", "notebooks"}, sorted(stray)


def test_study_docs_use_the_one_study_names():
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    names = {s.upper() for s in STUDIES if s != "series"}
    assert names <= pages, sorted(names - pages)
    assert not pages & {"BIAS_SWEEP", "TRAINING", "MODALITIES", "EXTREME_TOKENS"}


def _importlinter_layers() -> list[set[str]]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    lines = [line.strip() for line in parser["importlinter:contract:layers"]["layers"].splitlines()]
    return [{m.strip().removeprefix("anisotropy_jax.") for m in line.split("|")}
            for line in lines if line]


def _stated_layers(text: str) -> list[set[str]]:
    match = LAYERS_LINE.search(text)
    assert match, "no line 'Layers, top to bottom: a > b | c > ...'"
    return [{m.strip() for m in layer.split("|")} for layer in match.group(1).split(">")]


@pytest.mark.parametrize("doc", ["EXTENDING.md", "LIBRARY.md"])
def test_the_docs_state_the_importlinter_layer_order(doc):
    contract = _importlinter_layers()
    assert len(contract) > 5 and {"commands", "doc_tables"} in contract  # the parse found the contract
    assert _stated_layers((ROOT / "docs" / doc).read_text()) == contract


def test_a_reordered_layer_line_is_caught():
    contract = _importlinter_layers()
    line = " > ".join(" | ".join(sorted(layer)) for layer in contract)
    assert _stated_layers(f"Layers, top to bottom: {line}\n") == contract
    swapped = line.replace("models > metrics", "metrics > models")
    assert swapped != line and _stated_layers(f"Layers, top to bottom: {swapped}\n") != contract
