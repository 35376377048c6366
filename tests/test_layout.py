"""The repository's shape, checked so that it cannot drift: the layer order (import-linter), ruff,
module/function/script sizes, docs that cite only files of this repository, and the README's
Python example."""
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


def test_experiment_scripts_are_thin_and_every_config_has_a_smoke_variant():
    scripts = sorted((ROOT / "experiments").glob("*.py"))
    assert len(scripts) >= 4
    for script in scripts:
        assert script.read_text().count("\n") <= MAX_SCRIPT_LINES, script.name
        assert "sys.path" not in script.read_text(), script.name
    configs = [c for c in sorted((ROOT / "anisotropy_jax" / "configs").glob("*.py"))
               if re.search(r"^def get_config\(arg[^,]*\)", c.read_text(), re.M)]
    assert {c.stem for c in configs} >= {"bias_sweep", "train_clm", "train_mlm", "qk_dynamics",
                                         "pretrained_anisotropy"}
    for config in configs:  # loaded as ml_collections loads them: by path
        module = _load_by_path(config)
        assert module.__doc__ and "--config=" in module.__doc__, config.name
        smoke, default = module.get_config("smoke"), module.get_config(None)
        assert smoke.to_dict() != default.to_dict(), config.name
        with pytest.raises(ValueError, match="variant"):
            module.get_config("no_such_variant")
        # experiments/configs/ re-exports it: the same configs, so old --config paths still work
        old = _load_by_path(ROOT / "experiments" / "configs" / config.name)
        assert old.get_config("smoke").to_dict() == smoke.to_dict(), config.name
        assert old.VARIANTS == module.VARIANTS and "--config=" in old.__doc__, config.name
    assert sorted(p.name for p in (ROOT / "experiments" / "configs").glob("*.py")) == \
        sorted(c.name for c in configs)


def _load_by_path(path):
    spec = importlib.util.spec_from_file_location(f"config_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
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


def test_readme_python_example_runs():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## In a Python shell")[1].split("```python\n")[1].split("```")[0]
    proc = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert "resid_post" in lines[0] and "attn_logits" in lines[0]
    assert abs(float(lines[1]) - 64.0 ** 2 / (64.0 ** 2 + 768)) < 5e-3  # F1
