"""A converged `invoke deploy.reasoning` against an Ansible playbook that does the same on the same lab, alternated
in one run (issue 34: a no-op deploy in 0.5 s or less, and 10 times Ansible's speed or more).

The playbook is written from the same rendered files: every file of the reasoning tier copied where the deploy puts
it (env, units, nftables rules), the worker and head units enabled and started, the workers' port and the head's
/health waited for. Ansible runs as its documentation advises for speed: no fact gathering, SSH pipelining, one
persistent SSH connection per node (ControlPersist). Both are whole processes, start to exit.

Run as root from the project root, with the systemd lab deployed (`invoke demo`):
    .venv/bin/python benchmarks/noop_vs_ansible.py --ansible-playbook /path/to/ansible-playbook [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterbook.model.loader import load_cluster  # noqa: E402
from clusterbook.pure import topology as topo  # noqa: E402
from clusterbook.pure.render.artifacts import render_artifacts  # noqa: E402

CLUSTER = "lab/cluster.yaml"
TIER = "reasoning"


def playbook(out: Path) -> tuple[Path, Path]:
    """The inventory and the playbook, written under out; the rendered files beside them."""
    c = load_cluster(ROOT / CLUSTER)
    tier = c.tier(TIER)
    units = topo.units(tier)
    state = ROOT / ".clusterbook/lab"
    hosts = {}
    for name in tier.nodes:
        hosts[name] = {"ansible_host": topo.address(c, name, "management"), "ansible_user": "root",
                       "ansible_ssh_private_key_file": str(state / "id_ed25519"),
                       "ansible_ssh_common_args": f"-o UserKnownHostsFile={state / 'known_hosts'} "
                                                  "-o StrictHostKeyChecking=yes",
                       "ansible_python_interpreter": "/usr/bin/python3"}
    inventory = out / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    plays = []
    for name in tier.nodes:
        tasks = []
        for a in render_artifacts(c):
            if a.node == name and a.tier == TIER:
                src = out / "files" / name / a.path.lstrip("/")
                src.parent.mkdir(parents=True, exist_ok=True)
                src.write_text(a.text)
                tasks.append({"name": f"put {a.path}", "ansible.builtin.copy": {
                    "src": str(src), "dest": a.path, "mode": f"{a.mode:o}"}})
        if name in tier.workers:
            tasks += [{"name": f"{unit} enabled and started", "ansible.builtin.systemd_service": {
                "name": unit, "state": "started", "enabled": True}} for unit in (units.firewall, units.worker)]
            # a worker serving its head refuses a second connection: look for the listening socket, as the deploy does
            tasks.append({"name": "the worker listens",
                          "ansible.builtin.command": f"ss -Hltn 'sport = :{tier.rpc_port}'",
                          "register": "listening", "until": "listening.stdout != ''", "retries": 60, "delay": 1,
                          "changed_when": False})
        if name == tier.head:
            tasks.append({"name": f"{units.head} enabled and started", "ansible.builtin.systemd_service": {
                "name": units.head, "state": "started", "enabled": True}})
            tasks.append({"name": "the head answers /health", "ansible.builtin.uri": {
                "url": f"{topo.endpoint_url(c, tier)}/health", "status_code": 200}})
        plays.append({"hosts": name, "gather_facts": False, "tasks": tasks})
    # the workers' play before the head's, as the deploy orders them
    plays.sort(key=lambda p: p["hosts"] == tier.head)
    book = out / "deploy-reasoning.yml"
    book.write_text(yaml.safe_dump(plays, sort_keys=False))
    (out / "ansible.cfg").write_text("[defaults]\nhost_key_checking = True\nstdout_callback = default\n"
                                     "[ssh_connection]\npipelining = True\n"
                                     "ssh_args = -o ControlMaster=auto -o ControlPersist=60s\n")
    return inventory, book


def timed(argv: list[str], env: dict, cwd: Path) -> float:
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    if "changed=" in proc.stdout and any(f"changed={n}" in proc.stdout for n in range(1, 100)):
        sys.exit(f"the playbook changed something on a converged lab:\n{proc.stdout[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ansible-playbook", required=True, help="the ansible-playbook command (ansible-core)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/noop-vs-ansible.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inventory, book = playbook(work)
        ansible_env = {**os.environ, "ANSIBLE_CONFIG": str(work / "ansible.cfg")}
        invoke_env = {**os.environ, "INVOKE_CLUSTERBOOK_CLUSTER": CLUSTER}
        ansible_argv = [args.ansible_playbook, "-i", str(inventory), str(book)]
        invoke_argv = [sys.executable, "-m", "invoke", "deploy.reasoning"]
        timed(ansible_argv, ansible_env, work)  # the first run of each opens its connections: not counted
        timed(invoke_argv, invoke_env, ROOT)
        ours, theirs = [], []
        for i in range(args.runs):  # alternated, so a slower minute of the machine hits both
            ours.append(timed(invoke_argv, invoke_env, ROOT))
            theirs.append(timed(ansible_argv, ansible_env, work))
            print(f"run {i + 1}: invoke deploy.reasoning {ours[-1]:.2f} s, ansible-playbook {theirs[-1]:.2f} s",
                  flush=True)
        version = subprocess.run([args.ansible_playbook, "--version"], capture_output=True, text=True).stdout
    ratio = statistics.median(theirs) / statistics.median(ours)
    print(f"median: invoke deploy.reasoning {statistics.median(ours):.2f} s, ansible-playbook "
          f"{statistics.median(theirs):.2f} s ({ratio:.1f}x)")
    Path(args.out).write_text(json.dumps({"invoke_s": ours, "ansible_s": theirs, "ratio": round(ratio, 2),
                                          "ansible": version.splitlines()[0] if version else "?",
                                          "machine": f"{os.uname().nodename} ({os.cpu_count()} cores)",
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
                                         indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
