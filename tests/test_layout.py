"""The repository's shape, checked so that it cannot drift: the layer order (import-linter), ruff,
module/function/script sizes, and docs that cite only files of this repository (the docs' Python
examples run in tests/test_doc_examples.py)."""
import ast
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_SCRIPT_LINES = 60
# No function is exempt any more (the training loop's step loop is shared with the vmapped
# seeds and fits the limit).
LONG_FUNCTIONS_ALLOWED: set[tuple[str, str]] = set()


def _library_modules():
    return sorted((ROOT / "anisotropy_jax").rglob("*.py"))


def test_import_contracts_hold():
    """.importlinter: each layer imports only the layers below it; no torch in the library."""
    proc = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-2000:]


def test_ruff_is_clean():
    proc = subprocess.run([str(BIN / "ruff"), "check", "anisotropy_jax", "experiments",
                           "benchmarks", "tests", "setup.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_library_modules_and_functions_stay_small():
    too_long = []
    for path in _library_modules():
        rel = str(path.relative_to(ROOT))
        lines = path.read_text().count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and (rel, node.name) not in LONG_FUNCTIONS_ALLOWED:
                    too_long.append(f"{rel}: {node.name}() {length} lines")
    assert not too_long, too_long


def test_experiment_scripts_are_one_call_of_their_command():
    from anisotropy_jax import commands

    scripts = sorted((ROOT / "experiments").glob("*.py"))
    assert len(scripts) >= 4
    assert not (ROOT / "experiments" / "configs").exists()  # one settings file per study
    for script in scripts:
        text = script.read_text()
        assert text.count("\n") <= MAX_SCRIPT_LINES, script.name
        assert "sys.path" not in text, script.name
        assert script.stem in commands.COMMANDS, script.name
        assert re.search(rf'^    commands\.script\("{script.stem}"\)$', text, re.M), script.name


def test_every_config_has_a_smoke_variant():
    from anisotropy_jax import configs

    for name in configs.names():  # loaded as ml_collections loads them: by path
        module = _load_by_path(configs.path(name))
        assert module.__doc__ and f"--config={name}" in module.__doc__, name
        smoke, default = module.get_config("smoke"), module.get_config(None)
        assert smoke.to_dict() != default.to_dict(), name
        with pytest.raises(ValueError, match="variant"):
            module.get_config("no_such_variant")


def _study_places():
    """The places EXTENDING.md's "Add a study" lists, as path templates of NAME."""
    text = (ROOT / "docs" / "EXTENDING.md").read_text()
    listed = text.split("<!-- study places: the layout test reads this list -->")[1]
    listed = listed.split("\n\n")[0]
    items = re.findall(r"^\d+\. `([^`]+)`", listed, re.M)
    return items


def test_a_study_has_one_name_in_five_places():
    """Every study's command, settings, package, doc and test carry its name, and adding one
    touches at most the five places EXTENDING.md lists."""
    from anisotropy_jax import commands, configs

    places = _study_places()
    assert 1 <= len(places) <= 5, places
    studies = {commands.study_name(name) for name in commands.COMMANDS}
    for study in sorted(studies):
        for template in places:
            if template.endswith(".py") and "#" not in template and "NAME" not in template:
                continue  # a shared file (the table of commands), not one per study
            path = template.replace("NAME_IN_CAPITALS", study.upper()).replace("NAME", study)
            assert (ROOT / path).exists(), f"study {study}: {path} is missing"
    # Nothing else lists the studies: the configs are the studies' own, and so are the packages
    # (besides the training loop that several studies share).
    assert set(configs.names()) == studies
    packages = {p.parent.name for p in (ROOT / "anisotropy_jax" / "studies").glob("*/__init__.py")}
    assert packages - {"training"} == studies
    for name in commands.COMMANDS:
        assert commands.study(name) is not None


def _load_by_path(path):
    name = f"config_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def _cited_files(text):
    """Repository-style paths a text cites: `docs/X.md`, SCIENCE.md, DESIGN.md, markdown links."""
    cited = set(re.findall(r"\b((?:docs|tests|experiments|benchmarks|anisotropy_jax|scripts)/"
                           r"[\w./-]+\.(?:md|py|json|sh|png))", text))
    bare = re.findall(r"(?<![\w/.-])((?:SCIENCE|DESIGN|STYLE)\.md)", text)
    return cited, bare


def test_docs_and_docstrings_cite_only_files_of_this_repository():
    texts = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *_library_modules(),
             *(ROOT / "experiments").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "tests").glob("*.py")]
    missing, bare = [], []
    for path in texts:
        if path.name == "test_layout.py":
            continue
        text = path.read_text()
        cited, loose = _cited_files(text)
        base = path.parent if path.suffix == ".md" else ROOT
        for ref in cited:
            if "NAME" in ref:  # a template of EXTENDING.md's recipes, not a file
                continue
            if not ((ROOT / ref).exists() or (base / ref).exists()):
                missing.append(f"{path.relative_to(ROOT)} cites {ref}")
        bare += [f"{path.relative_to(ROOT)}: {name} (cite docs/SCIENCE.md)" for name in loose
                 if not (path.parent == ROOT / "docs" and name == "SCIENCE.md")]
        if path.suffix == ".md":
            for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
                if "://" not in link and not (path.parent / link).exists():
                    missing.append(f"{path.relative_to(ROOT)} links {link}")
    assert not missing, missing
    assert not bare, bare
