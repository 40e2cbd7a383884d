"""The seeds' hand-made setup, in the SLURM lab: what beefcake2 ran before clusterbook, in small. lab/cluster-slurm.yaml
names only part of it (its `legacy` section): seed 004's daemon and updater timer are found by what they run.

- slab2: an RPC worker as a systemd unit (seeds 000-003's llama-rpc.service), on the reasoning tier's port;
- slab3: an RPC worker started by hand with nohup (what seed 000 replaced), on the same port;
- slab1: seed 004's job script, the daemon that submits it whenever it is not queued ("auto-start"), and the endpoint
  updater run by a timer every 30 s; the job serves the fast tier's model on the fast tier's port.

slab1-3 are the SLURM lab's first, second and third node (`on`: another SLURM lab's names them otherwise)."""

from __future__ import annotations

import hashlib
import shlex

RPC_PORT = 50152  # the reasoning tier's: stop.legacy must free it, restore.legacy must give it back
JOB_PORT = 8180  # the fast tier's
JOB = "llama-legacy"
SCRIPT = "/cluster/shared/scripts/llama-cpp/run-legacy.slurm"
UPDATER = "/usr/local/bin/ai-inference-upstream.sh"
BIN = "/opt/llama.cpp/bin"  # the lab build names its worker ggml-rpc-server (the seeds: rpc-server)

FILES = {
    ("slab2", "/etc/systemd/system/llama-rpc.service"): f"""[Unit]
Description=llama.cpp RPC worker (seed 000)
After=network-online.target

[Service]
Environment=LD_LIBRARY_PATH={BIN}
ExecStart={BIN}/ggml-rpc-server -H 0.0.0.0 -p {RPC_PORT}
Restart=always

[Install]
WantedBy=multi-user.target
""",
    ("slab1", SCRIPT): f"""#!/bin/bash
#SBATCH --job-name={JOB}
#SBATCH --partition=ai
#SBATCH --mem=512M
#SBATCH --output=/tmp/{JOB}-%j.log
# seed 004's fast tier job, in small
export LD_LIBRARY_PATH={BIN}
exec {BIN}/llama-server -m /srv/models/lab-fast-a.gguf --host 0.0.0.0 --port {JOB_PORT} -c 512 -t 1
""",
    ("slab1", UPDATER): f"""#!/bin/bash
# seed 004's endpoint updater: where the job runs, for nginx
squeue -h -n {JOB} -u root -t RUNNING -o %N > /run/ai-inference-upstream.new &&
  mv /run/ai-inference-upstream.new /run/ai-inference-upstream
""",
}
UNFILED = {  # on the nodes, and in no list of the cluster file
    ("slab1", "/etc/systemd/system/ai-upstream.service"):
        f"[Unit]\nDescription=endpoint updater (seed 004)\n[Service]\nType=oneshot\nExecStart={UPDATER}\n",
    ("slab1", "/etc/systemd/system/ai-upstream.timer"):
        "[Unit]\nDescription=every 30 s\n[Timer]\nOnActiveSec=1\nOnUnitActiveSec=30\n[Install]\n"
        "WantedBy=timers.target\n",
    ("slab1", "/etc/systemd/system/ai-autostart.service"):
        "[Unit]\nDescription=starts the tiers when no VASP job runs (seed 004)\n[Service]\n"
        f"ExecStart=/bin/bash -c 'while :; do squeue -h -n {JOB} -u root | grep -q . || sbatch {SCRIPT}; sleep 5; done'"
        "\n[Install]\nWantedBy=multi-user.target\n",
}
NOHUP = (f"cd /root; LD_LIBRARY_PATH={BIN} setsid -f nohup {BIN}/ggml-rpc-server -H 0.0.0.0 -p {RPC_PORT} "
         "> /root/rpc-server.log 2>&1 < /dev/null")  # -f: it forks, and nothing of the ssh session waits for it


def on(ssh, node: str) -> str:
    """The name of slabN in the lab ssh reaches: its N-th node."""
    return ssh.cluster.nodes[int(node.removeprefix("slab")) - 1].name


def put(ssh) -> dict[tuple[str, str], str]:
    """Set the seeds' setup up and wait until it serves; the sha256 of each file the cluster file names."""
    for (node, path), text in {**FILES, **UNFILED}.items():
        mode = "755" if path.endswith((".sh", ".slurm")) else "644"
        done = ssh.run(on(ssh, node), f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && cat > {shlex.quote(path)} && "
                             f"chmod {mode} {shlex.quote(path)}", stdin=text.encode())
        assert done.ok, done.tail()
    for node, command in (("slab2", "systemctl daemon-reload && systemctl enable --now llama-rpc"),
                          ("slab3", NOHUP),
                          ("slab1", "systemctl daemon-reload && systemctl enable --now ai-upstream.timer "
                                    "ai-autostart.service")):
        done = ssh.run(on(ssh, node), command)
        assert done.ok, done.tail()
    serving(ssh)
    return digests(ssh)


def digests(ssh) -> dict[tuple[str, str], str]:
    found = {}
    for node, path in FILES:
        out = ssh.run(on(ssh, node), f"cat {shlex.quote(path)}")
        found[(node, path)] = hashlib.sha256(out.stdout.encode()).hexdigest() if out.ok else "absent"
    return found


def serving(ssh, timeout: int = 90) -> None:
    """Wait until each part serves: both RPC workers listen, the job answers /health, the updater wrote its node
    (run once then, rather than waited for: its timer's next turn can be 30 s away)."""
    check = (f"for i in $(seq {timeout}); do n=$(squeue -h -n {JOB} -u root -t RUNNING -o %N); "
             "a=$(scontrol show node \"$n\" 2>/dev/null | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p'); "
             f"[ -n \"$a\" ] && curl -sf http://$a:{JOB_PORT}/health >/dev/null && "
             "{ [ -s /run/ai-inference-upstream ] || systemctl start ai-upstream.service; } && "
             "[ -s /run/ai-inference-upstream ] && exit 0; sleep 1; done; "
             f"echo \"job {JOB}: $(squeue -h -n {JOB} -o '%i %T %R')\" >&2; exit 1")
    done = ssh.run(on(ssh, "slab1"), check, timeout=timeout + 10)
    assert done.ok, done.tail()
    for node in ("slab2", "slab3"):
        listens = ssh.run(on(ssh, node), f"for i in $(seq 30); do ss -Hltn 'sport = :{RPC_PORT}' | grep -q . && "
                                         "exit 0; sleep 1; done; exit 1", timeout=40)
        assert listens.ok, f"{node}: nothing listens on {RPC_PORT}"
