"""Where the package finds its own data through itself, never through a checkout's tests/: the acceptance folder,
the runbooks and clusterbook's patch series (in a checkout at its top, in an installed package inside it)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from clusterbook import DATA_ROOT

PACKAGE = Path(str(files("clusterbook")))
ACCEPTANCE = PACKAGE / "acceptance"  # what pytest runs for `invoke verify` and `apply`
RUNBOOKS = DATA_ROOT / "runbooks"  # the folder clusterbook/__init__.py finds: the checkout's top, or the package
FEATURES = ACCEPTANCE / "features"  # the scenarios, one .feature file per subject
