"""invoke tasks: parse arguments, call clusterbook.commands. No logic lives here. tasks.py (under `invoke`) and the
`clusterbook` command take their task list from collection()."""


from invoke import Collection, Program, task

from clusterbook import __version__, commands
from clusterbook.adapters.command_line import (
    COMMAND,
    CommandLine,
    ParsedLine,
    parsed_line,
    quiet_when_the_reader_leaves,
    running,
)
from clusterbook.effects.console import exits_cleanly

quiet_when_the_reader_leaves()  # `invoke --list | head` ends without a traceback

CLUSTER_HELP = "cluster file (default: the configuration's clusterbook.cluster, i.e. cluster.yaml)"


def command(fn):
    """A task body: bad input exits 2 and failures exit 1, with a message and no traceback. (One --cluster and one
    --dry for the whole command line: clusterbook/adapters/command_line.py, which invoke.yaml names.)"""
    return exits_cleanly(fn)


def cfg(c):
    """This command line's settings: invoke's configuration key `clusterbook` (clusterbook/commands/settings.py)."""
    return commands.settings_of(c.config.get("clusterbook", {}))


def offline(fn):
    """A task that contacts nothing, so it may stay on a command line that says --dry."""
    fn.contacts_nothing = True
    return fn


@task(help={"cluster": CLUSTER_HELP, "out": "output directory (default: build)"})
@command
@offline
def render(c, cluster=None, out="build"):
    """Render systemd units, scripts, SLURM jobs, nginx and nftables files into OUT/<node>/<path>."""
    commands.render(cluster or cfg(c).cluster, out)


@task(help={"cluster": CLUSTER_HELP})
@command
@offline
def check(c, cluster=None):
    """Validate the cluster file and check every rendered file with systemd-analyze, shellcheck, nginx -t, nft."""
    commands.check(cluster or cfg(c).cluster)


STATIC = Collection(render, check)  # the tasks every cluster file has; collection() adds the file's own
STATIC.configure({"clusterbook": commands.SETTINGS_DEFAULTS})  # overridable: invoke.yaml, INVOKE_CLUSTERBOOK_*


@task(help={"cluster": CLUSTER_HELP, "tier": "only this tier", "json": "print JSON instead of tables",
            "models_dir": "local directory with the GGUF files: read exact tensor sizes from their headers",
            "solve": "search the placements the cluster allows (heads, workers, splits, router nodes, smaller "
                     "contexts) and show the best beside the file's, with the change to the file",
            "min_ctx": "with --solve: the smallest context a request may be given; the solver tries smaller contexts "
                       "and more server slots, each slot keeping it (default: each tier keeps its own)",
            "cache_types": "with --solve: KV cache types an RPC tier may be given, comma-separated (e.g. f16,q8_0; "
                           "a quantized V cache only where every GPU has flash attention); default: each keeps its "
                           "own"})
@command
@offline
def plan(c, cluster=None, tier=None, json=False, models_dir=None, solve=False, min_ctx=None, cache_types=None):
    """Capacity plan: memory per device, largest context, decode bound and prompt estimate per tier."""
    commands.plan(cluster or cfg(c).cluster, tier, json, models_dir, solve,
                  int(min_ctx) if min_ctx else None, cache_types.split(",") if cache_types else None)


@task
@command
@offline
def reference(c):
    """Rewrite the cluster file reference in README.md from the schema."""
    commands.write_reference("README.md")


STATIC.add_task(reference)
STATIC.add_task(plan)


@task(name="ssh-config", help={"cluster": CLUSTER_HELP,
                               "out": "write it to this file (e.g. ~/.ssh/clusterbook-NAME) instead of printing it"})
@command
@offline
def ssh_config(c, cluster=None, out=None):
    """The ssh_config clusterbook connects with: a Host entry per node by its name (jump hosts, key, checked host
    keys, connect timeout), for `Include` in ~/.ssh/config; the docs' `ssh NODE ...` lines use these names."""
    commands.ssh_config(cluster or cfg(c).cluster, out)


STATIC.add_task(ssh_config)


LAB_HELP = "lab cluster file (default: lab/cluster.yaml)"


@task(name="up", help={"cluster": LAB_HELP + "; with --slurm: lab/cluster-slurm.yaml",
                       "slurm": "also configure SLURM (slurmctld on its controller, slurmd on all) for SLURM tiers"})
@command
def lab_up(c, cluster=None, slurm=False):
    """Boot the lab: containers with systemd and sshd on bridges, llama.cpp build and models served (cached)."""
    commands.lab_up(cfg(c), cluster or (commands.LAB_SLURM_CLUSTER if slurm else commands.LAB_CLUSTER), slurm)


@task(name="down", help={"cluster": LAB_HELP})
@command
def lab_down(c, cluster=commands.LAB_CLUSTER):
    """Stop the lab and remove its containers, bridges and veths (build and root file system caches stay)."""
    commands.lab_down(cluster)


@task(name="status", help={"cluster": LAB_HELP})
@command
def lab_status(c, cluster=commands.LAB_CLUSTER):
    """Show every lab node: container running, reachable over SSH, system state and addresses."""
    commands.lab_status(cluster)


@task(name="restart", help={"node": "node name", "cluster": LAB_HELP})
@command
def lab_restart(c, node, cluster=commands.LAB_CLUSTER):
    """Power a lab node off and boot it again; wait until SSH answers."""
    commands.lab_restart(cluster, node)


@task(name="ssh", help={"node": "node name", "cluster": LAB_HELP})
@command
def lab_ssh(c, node, cluster=commands.LAB_CLUSTER):
    """Open a shell on a lab node (host key checked against the lab's known_hosts)."""
    c.run(" ".join(commands.ssh_command(cluster, node)), pty=True)


lab = Collection("lab", lab_up, lab_down, lab_status, lab_restart, lab_ssh)
STATIC.add_collection(lab)


RUN_HELP = {"cluster": CLUSTER_HELP,
            "dry": "print the plan (commands and files per step and host) and contact nothing",
            "only": "only these nodes (comma-separated)"}


DEPLOY_HELP = {**RUN_HELP, "preflight": "check the nodes this deploy touches first (invoke preflight's checks: "
                                         "GPUs, driver, free space, RPC interface, clock); --no-preflight skips it"}


def _operation_task(op):
    """An invoke task for one operation of the configured cluster file (clusterbook/pure/operations.py); it runs
    the operation of that name in the file the command line uses, and a deploy checks its nodes first."""
    if op.collection == "deploy":
        @task(name=op.name, help=DEPLOY_HELP)
        @command
        def run(c, cluster=None, dry=False, only=None, preflight=True):
            commands.run_named(cfg(c), cluster or cfg(c).cluster, op.collection, op.name, dry, only, preflight)
    else:
        @task(name=op.name, help=RUN_HELP)
        @command
        def run(c, cluster=None, dry=False, only=None):
            commands.run_named(cfg(c), cluster or cfg(c).cluster, op.collection, op.name, dry, only)
    run.__doc__ = op.doc
    return run


def _any_tier_task(action, doc):
    @task(name="tier", help={**DEPLOY_HELP, "tier": "tier name from the cluster file"})
    @command
    def run(c, tier, cluster=None, dry=False, only=None, preflight=True):
        commands.run_operation(cfg(c), cluster or cfg(c).cluster, action, tier, dry, only,
                               preflight=preflight and action == "deploy")
    run.__doc__ = doc
    return run


@task(name="hash", help={"cluster": CLUSTER_HELP})
@command
def models_hash(c, cluster=None):
    """sha256 of every model file, computed on a node that holds it; prints the lines to paste into the cluster
    file, and fails where a declared sha256 differs."""
    commands.models_hash(cluster or cfg(c).cluster)




@task(name="status", help={"cluster": RUN_HELP["cluster"], "only": RUN_HELP["only"], "dry": RUN_HELP["dry"]})
@command
def status_task(c, cluster=None, only=None, dry=False):
    """Table of node, unit, active state, port listening, model loaded and GPU memory (where nvidia-smi exists)."""
    commands.status(cfg(c), cluster or cfg(c).cluster, only, dry)


@task(name="logs", help={"cluster": RUN_HELP["cluster"], "only": RUN_HELP["only"], "tier": "only this tier",
                         "dry": RUN_HELP["dry"]})
@command
def logs_task(c, cluster=None, only=None, tier=None, dry=False):
    """The last log lines of every tier: each unit's journal (systemd tiers); the job's state and reason, its
    steps' end state, its log file and OOM kills (SLURM tiers)."""
    commands.logs(cfg(c), cluster or cfg(c).cluster, only, tier, dry)


STATIC.add_task(status_task)
STATIC.add_task(logs_task)


@task(name="build", default=True, help={"cluster": RUN_HELP["cluster"], "out": "output directory (default: site)",
                                        "markdown": "also write the pages as plain Markdown into this folder, with "
                                                    "an mkdocs.yml any MkDocs-compatible engine builds (Zensical)"})
@command
@offline
def docs_build(c, cluster=None, out="site", markdown=None):
    """Build the docs site strictly into OUT from the cluster file (works offline)."""
    commands.docs(cfg(c), cluster or cfg(c).cluster, out, markdown=markdown)


@task(name="serve", help={"cluster": RUN_HELP["cluster"], "address": "host:port (default 127.0.0.1:8000)"})
@command
def docs_serve(c, cluster=None, address="127.0.0.1:8000"):
    """Serve the docs site with live reload while you edit docs/ or the cluster file."""
    commands.docs(cfg(c), cluster or cfg(c).cluster, "site", serve=True, address=address)


@task(name="publish", help={"cluster": RUN_HELP["cluster"], "dry": RUN_HELP["dry"]})
@command
def docs_publish(c, cluster=None, dry=False):
    """Build the docs site and publish it on the gateway node's nginx (gateway.docs_port, and /docs/ through
    tailscale serve); the footer names the cluster file's digest and the build time, checked after the upload."""
    commands.publish_docs(cfg(c), cluster or cfg(c).cluster, dry)


STATIC.add_collection(Collection("docs", docs_build, docs_serve, docs_publish))


@task(help={"cluster": RUN_HELP["cluster"],
            "disruptive": "also restart a node and kill a worker (always on for the lab)",
            "only": "only scenarios whose name contains this text (e.g. \"node restart\") or that carry this tag "
                    "(e.g. @disruptive); the matches are listed"})
@command
def verify(c, cluster=None, disruptive=False, only=None):
    """Check the success criteria against the live cluster (pytest-bdd); reports land in reports/."""
    commands.verify(cfg(c), cluster or cfg(c).cluster, disruptive, only)


STATIC.add_task(verify)


@task(help={"cluster": RUN_HELP["cluster"], "tier": "only this tier's change",
            "dry": "list what differs from the last deploys recorded here, per node; contact nothing"})
@command
def apply(c, cluster=None, tier=None, dry=False):
    """Deploy what the cluster file changed, one phase at a time (install, SLURM, each tier, router, gateway,
    monitoring), each checked by its scenarios before and after; a phase that fails them is rolled back to its last
    verified generation and checked again. With nothing changed it deploys nothing. Log: runs/changes/."""
    commands.apply(cfg(c), cluster or cfg(c).cluster, tier, dry)


@task(help={"cluster": RUN_HELP["cluster"], "tier": "only this tier (default: every tier, the last first)",
            "dry": "show what would be put back; change nothing"})
@command
def rollback(c, cluster=None, tier=None, dry=False):
    """Put back each node's files (and engine link) of the tier's last verified generation and start it again as
    its manager does: systemd restarts its units, SLURM submits the restored job script."""
    commands.rollback(cfg(c), cluster or cfg(c).cluster, tier, dry)


STATIC.add_task(apply)
STATIC.add_task(rollback)


@task(help={"cluster": LAB_HELP,
            "only": "verify only these scenarios (as verify --only: part of a name, or a tag); default: all"})
@command
def demo(c, cluster=commands.LAB_CLUSTER, only=None):
    """The main job on the lab: lab.up, install, models, router, every tier, monitoring, verify --disruptive, then the
    docs (built even when a scenario fails: its Results page shows the failure; the exit status still reports it)."""
    commands.demo(cfg(c), cluster, only)


STATIC.add_task(demo)


@task(name="fabric", help={"cluster": RUN_HELP["cluster"], "tier": "an RPC tier (default: every RPC tier)",
                           "seconds": "seconds of each iperf3 run (default 5)"})
@command
def fabric_task(c, cluster=None, tier=None, seconds=5):
    """Measure the fabric: iperf3 from each RPC tier's head to each worker over the RPC network, beside the tier's
    fabric_gbps target and the network's declared bandwidth; fails below the acceptable level."""
    commands.fabric(cfg(c), cluster or cfg(c).cluster, tier, int(seconds))


STATIC.add_task(fabric_task)


@task(name="preflight", help={"cluster": RUN_HELP["cluster"], "only": RUN_HELP["only"]})
@command
def preflight_task(c, cluster=None, only=None):
    """Check every node before anything starts: its GPUs and their memory against the cluster file, the driver's
    CUDA, free space for its models, its RPC network interface up with the declared MTU, its clock."""
    commands.run_preflight(cluster or cfg(c).cluster, only)


STATIC.add_task(preflight_task)


@task(name="accept-folder", help={"cluster": RUN_HELP["cluster"],
                                  "folder": "one of the folders clusterbook owns (--dry without it lists them)",
                                  "dry": "say what would run, contacting nothing"})
@command
def accept_folder_task(c, cluster=None, folder=None, dry=False):
    """Record, once, that a folder which already holds files is clusterbook's (its marker on each node that holds
    it): a deploy writes only in folders of its own, created by it or accepted here; a package's folder is refused."""
    commands.accept_folder(cluster or cfg(c).cluster, folder, dry)


STATIC.add_task(accept_folder_task)


BENCH_HELP = {"cluster": RUN_HELP["cluster"], "tier": "tier name (default: the first RPC tier)",
              "quick": "one repeat, fewer clients: a smoke run"}
LOCAL_HELP = {"install_dir": "llama.cpp binaries on this machine (default: engine.install_dir)",
              "models_dir": "model files on this machine (default: storage.models_dir)"}


@task(name="run", default=True, help=BENCH_HELP)
@command
def bench_run(c, cluster=None, tier=None, quick=False):
    """Bench a live tier over HTTP: baseline prompts, concurrency 1/2/4/8, context sweep, beside the plan's bound."""
    commands.run_bench(cfg(c), cluster or cfg(c).cluster, tier, quick)


@task(name="rehearse", help={**BENCH_HELP, **LOCAL_HELP})
@command
def bench_rehearse(c, cluster=None, tier=None, install_dir=None, models_dir=None, quick=False):
    """Run a tier's rendered command lines on this machine (RPC worker per GPU, head on GPU 0), bench it, and
    compare its decode speed with the model on the head's first device alone (llama-bench and llama-server)."""
    commands.rehearse(cfg(c), cluster or cfg(c).cluster, tier, install_dir, models_dir, quick)


@task(name="tune", help={"cluster": BENCH_HELP["cluster"], "tier": BENCH_HELP["tier"], **LOCAL_HELP,
                         "parallel": "parallel slot counts to try with the live server (default 1,2,4)",
                         "quick": "one repetition of short runs: checks the path, too few to choose settings by"})
@command
def bench_tune(c, cluster=None, tier=None, install_dir=None, models_dir=None, parallel="1,2,4", quick=False):
    """Grid of ubatch, batch, flash attention, KV types (llama-bench) and parallel slots (server); the best."""
    commands.tune(cfg(c), cluster or cfg(c).cluster, tier, install_dir, models_dir,
                  tuple(int(p) for p in parallel.split(",")), quick)


@task(name="recovery", help={"cluster": BENCH_HELP["cluster"], "tier": BENCH_HELP["tier"],
                             "case": "worker (SIGKILL an RPC worker), head (restart the head; under SLURM, end its "
                                     "job: requeued, or cancelled for the keeper to submit again) or both (default)",
                             "runs": "runs of each case (default 2)",
                             "cold": "also run each case with the model file dropped from the page cache"})
@command
def bench_recovery(c, cluster=None, tier=None, case="both", runs=2, cold=False):
    """Disrupt a live RPC tier (kill a worker, restart the head) and time each phase until it answers again, from
    the nodes' logs and a polling client, beside the planner's predicted load; reports/bench-recovery-summary.md."""
    cases = {"worker": ("worker killed",), "head": ("head restarted",), "both": ("worker killed", "head restarted")}
    if case not in cases:
        raise commands.Failed(f"--case: expected worker, head or both, got {case!r}")
    commands.recovery(cfg(c), cluster or cfg(c).cluster, tier, cases[case], int(runs), cold)


@task(name="faults", iterable=["fault"],
      help={"cluster": BENCH_HELP["cluster"], "tier": BENCH_HELP["tier"],
            "fault": "'none (control)' (nothing done: what the figures vary by alone), head killed, worker killed (RPC"
                     " tiers), job ended (SLURM tiers: the keeper submits a new one) or preempted (a single-node SLURM"
                     " tier: a job of the partition above it takes its node, ended once the tier answers elsewhere), "
                     "released (a tier on demand, woken by the clients' next requests) or overload (20 more requests "
                     "at once than it admits: the excess told 429); repeat it for several (default: every one the tier"
                     " has, the control first)",
            "clients": "clients sending at once, half of them streaming (default: 20, or fewer where the gateway "
                       "would tell more 429)"})
@command
def bench_faults(c, cluster=None, tier=None, fault=None, clients=0):
    """Do each fault to a live tier in turn while clients ask it through the gateway; count failed requests and
    resumed streams, and the latency they saw beside the planner's recovery; reports/bench-faults-summary.md."""
    commands.faults(cfg(c), cluster or cfg(c).cluster, tier, tuple(fault or ()), int(clients) or None)


STATIC.add_collection(Collection("bench", bench_run, bench_rehearse, bench_tune, bench_recovery, bench_faults))


def collection(line: ParsedLine) -> tuple[Collection, list]:
    """The task list of this command line, and its file's operations: the tasks every cluster file has, then
    deploy.<tier>, stop.<tier>, restart.<tier>, … for the tiers of the line's --cluster file, else the configured
    one (clusterbook.cluster: invoke's configuration files and INVOKE_CLUSTERBOOK_CLUSTER, as
    clusterbook/commands/settings.py reads them; invoke makes its task list before it parses the tasks);
    `deploy.tier --tier NAME` reaches any tier of any file. A tier task the file lacks ends the line (exit 2)."""
    operations = commands.command_line_operations(line.cluster)
    commands.check_command_line(line.tokens, operations, line.cluster)
    ns = Collection()
    ns.configure(STATIC.configuration())
    for name, each in STATIC.tasks.items():
        ns.add_task(each, name=name)
    for sub in STATIC.collections.values():
        ns.add_collection(sub)
    tiers = {name: Collection(name) for name in commands.TIER_COLLECTIONS}
    for op in operations:
        tiers[op.collection].add_task(_operation_task(op))
    tiers["deploy"].add_task(_any_tier_task("deploy", "Deploy any tier of the cluster file by name (--tier NAME)."))
    tiers["models"].add_task(models_hash)
    tiers["stop"].add_task(_any_tier_task("stop", "Stop any tier by name (--tier NAME)."))
    tiers["restart"].add_task(_any_tier_task("restart", "Restart any tier by name (--tier NAME)."))
    for each in tiers.values():
        ns.add_collection(each)
    return ns, operations


class Clusterbook(Program):
    """`clusterbook TASK …`: the tasks of the package, from any folder (no tasks.py needed), with the same executor;
    the collection is built once invoke has parsed its own flags, as tasks.py is under `invoke`."""

    def parse_collection(self) -> None:
        self.namespace, _ = collection(parsed_line())
        super().parse_collection()


def program() -> Clusterbook:
    """The `clusterbook` command's program."""
    return Clusterbook(name="clusterbook", binary="clusterbook", version=__version__, executor_class=CommandLine)


def main() -> None:
    """The `clusterbook` command (pyproject's console script)."""
    COMMAND.append(True)  # the process ends when its tasks are done
    quiet_when_the_reader_leaves()
    with running(program()) as clusterbook:
        clusterbook.run()
