"""The gateway's tailscale serve script, rendered for beefcake2 and run here with a fake tailscale that keeps what it
serves: --check fails until every route's path (and the docs) is served, the script serves them, --check then
passes; a node without tailscale is told what to do."""

import json
import os
import subprocess
from pathlib import Path

from clusterbook.model.loader import load_cluster
from clusterbook.pure.render.artifacts import render_artifacts

ROOT = Path(__file__).resolve().parents[2]
FAKE = """#!/usr/bin/env python3
import json, sys
state = sys.argv[0] + ".json"
try:
    handlers = json.load(open(state))
except FileNotFoundError:
    handlers = {}
args = sys.argv[1:]
if args[:2] == ["serve", "status"]:
    print(json.dumps({"Web": {"slurm-ctl:443": {"Handlers": handlers}}}) if "--json" in args else handlers)
elif args[:2] == ["serve", "--bg"]:
    path = next((a.split("=", 1)[1] for a in args if a.startswith("--set-path=")), "/")
    handlers[path] = {"Proxy": args[-1]}
    json.dump(handlers, open(state, "w"))
"""


def test_the_tailnet_paths_are_served_once_and_checked(tmp_path):
    script = next(a for a in render_artifacts(load_cluster(ROOT / "cluster.yaml")) if a.id == "tailscale_serve").text
    (tmp_path / "serve").write_text(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tailscale").write_text(FAKE)
    (bin_dir / "tailscale").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(*args):
        return subprocess.run(["bash", str(tmp_path / "serve"), *args], env=env, capture_output=True, text=True)

    assert run("--check").returncode == 1
    assert run().returncode == 0
    assert run("--check").returncode == 0
    served = json.loads((bin_dir / "tailscale.json").read_text())
    assert served == {"/": {"Proxy": "http://127.0.0.1:8080"}, "/reasoning/": {"Proxy": "http://127.0.0.1:8081"},
                      "/docs": {"Proxy": "http://127.0.0.1:8082"}}
    (bin_dir / "tailscale").unlink()
    missing = subprocess.run(["bash", str(tmp_path / "serve")], capture_output=True, text=True,
                             env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert missing.returncode == 1 and "tailscale is not installed" in missing.stderr
