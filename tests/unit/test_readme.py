"""The README's cluster file reference is the one generated from the schema (run `invoke reference`)."""

from pathlib import Path

from clusterbook.model.schema import Cluster
from clusterbook.pure.reference import END, START, reference_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_reference_is_current():
    text = README.read_text()
    block = text.split(START, 1)[1].split(END, 1)[0]
    assert block.strip() == reference_markdown().strip(), "README reference is stale: run `invoke reference`"


def test_reference_covers_every_field():
    ref = reference_markdown()
    for name in Cluster.model_fields:
        assert f"| `{name}` |" in ref
    assert "| `tensor_split` |" in ref and "| `carries_rpc` |" in ref
