"""Every table the docs embed between `<!-- table: KIND PATH -->` markers is exactly what its
study's formatter makes of the committed raw result (anisotropy_jax/doc_tables.py): a doc cannot
drift from its results, and REPORT.md's claims cannot drift from today's verdicts.py."""

import pytest

from anisotropy_jax import doc_tables

DOCS = sorted((doc_tables.ROOT / "docs").glob("*.md"))


def test_the_docs_bind_their_tables():
    kinds = {kind for doc in DOCS for kind, _, _ in doc_tables.embedded(doc.read_text())}
    assert kinds >= {"claims", "depth", "control", "default", "closed_forms", "seeds",
                     "modalities", "embeddings_gain"}, kinds


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_embedded_table_matches_its_results(doc):
    assert doc_tables.drifted(doc) == []


def test_drift_is_detected_and_update_repairs_it(tmp_path):
    doc = tmp_path / "DOC.md"
    table = doc_tables.render("depth", "docs/results/depth/smoke/results.json")
    tampered = table.replace("| post D=32 | 0 |", "| post D=32 | 1 |", 1)
    assert tampered != table
    doc.write_text(f"intro\n<!-- table: depth docs/results/depth/smoke/results.json -->\n"
                   f"{tampered}<!-- end table -->\nrest\n")
    assert len(doc_tables.embedded(doc.read_text())) == 1
    assert doc_tables.embedded(doc.read_text())[0][2] != doc_tables.render(
        "depth", "docs/results/depth/smoke/results.json")
    assert doc_tables.update(doc) == 1
    assert doc.read_text() == (f"intro\n<!-- table: depth docs/results/depth/smoke/results.json "
                               f"-->\n{table}<!-- end table -->\nrest\n")
    assert doc_tables.update(doc) == 0


def test_unknown_kind_and_missing_results_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown table 'sideways'"):
        doc_tables.render("sideways", "docs/results/depth/smoke/results.json")
    with pytest.raises(FileNotFoundError, match="no such results"):
        doc_tables.render("depth", "no/such/results.json")
