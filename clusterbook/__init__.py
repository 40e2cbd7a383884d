"""clusterbook: a cluster file as the single source of truth for a llama.cpp inference cluster."""

__version__ = "0.1.0"

from pathlib import Path as _Path

_PACKAGE = _Path(__file__).resolve().parent
# the folder that holds runbooks/ and clusterbook's patches/: the checkout's top (the package's runbooks and patches
# are links to them there), or the package itself once installed from a wheel (which carries them)
DATA_ROOT = (_PACKAGE / "runbooks").resolve().parent
