"""A cluster file with a few fields changed, for tests that need one: the edits, not a second copy of the file."""

from __future__ import annotations

from pathlib import Path

import yaml

from clusterbook.model.loader import load_cluster
from tests.conftest import whole_data

ROOT = Path(__file__).resolve().parents[2]
# beefcake2 if slurm-ctl (gateway and monitoring node) runs Rocky 8.10 like the GPU nodes: the seeds do not say
SLURM_CTL_ON_ROCKY = {
    "nodes.3.os": {"family": "el", "id": "rocky", "version": "8.10"},
    "monitoring.el_releases": {
        "prometheus": {"url": "https://github.com/prometheus/prometheus/releases/download/v2.53.3/"
                              "prometheus-2.53.3.linux-amd64.tar.gz", "sha256": "1" * 64},
        "alertmanager": {"url": "https://github.com/prometheus/alertmanager/releases/download/v0.27.0/"
                                "alertmanager-0.27.0.linux-amd64.tar.gz", "sha256": "2" * 64}},
}


def edited_cluster(relative: str, edits: dict, folder: Path):
    """The repository's cluster file at `relative` with each edit made (a dotted path, list items by index -> the
    value), written to `folder` and loaded as clusterbook loads any file."""
    data = whole_data(ROOT / relative)
    for dotted, value in edits.items():
        *parents, last = [int(k) if k.isdigit() else k for k in dotted.split(".")]
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    edited = folder / "edited-cluster.yaml"
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_cluster(edited)
