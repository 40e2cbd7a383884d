"""The planner's measured defaults: each one's value is the schema's default, its evidence lives in one place
(model/measured.py, not the field's description) and the generated reference shows it beside the field."""

from clusterbook.model.measured import PLANNER
from clusterbook.model.siteschema import Planner
from clusterbook.pure.reference import reference_markdown


def test_every_measured_default_is_the_schemas_and_its_evidence_is_in_the_reference():
    reference = reference_markdown()
    for name, measured in PLANNER.items():
        field = Planner.model_fields[name]
        assert field.default == measured.value, name
        assert "measured" not in (field.description or ""), f"{name}: the evidence belongs in model/measured.py"
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{name}` |"))
        assert measured.source in row, row
