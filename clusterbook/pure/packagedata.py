"""Where the package finds its own data through itself, never through a checkout's tests/: the acceptance folder."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

ACCEPTANCE = Path(str(files("clusterbook") / "acceptance"))  # what pytest runs for `invoke verify` and `apply`
FEATURES = ACCEPTANCE / "features"  # the scenarios, one .feature file per subject
