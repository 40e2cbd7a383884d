"""What an operator can run against a cluster: each operation's invoke task, its runbook and what it does,
derived once from the cluster's tiers and their managers (tasks.py, the docs and the tests all read this)."""

from __future__ import annotations

from dataclasses import dataclass

from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure import kinds


@dataclass(frozen=True)
class Operation:
    """One runbook task: `invoke <collection>.<name>` runs `runbook` (for `tier`, limited to the steps of `part`)."""

    collection: str
    name: str
    runbook: str
    doc: str
    tier: str | None = None
    part: str | None = None  # only the runbook's steps of this part (runbook_schema.Step.parts)

    @property
    def task(self) -> str:
        return f"{self.collection}.{self.name}"

    @property
    def command(self) -> str:
        return f"invoke {self.task}"


def tier_runbook(tier: Tier, action: str) -> str | None:
    """The runbook of an action on a tier, by its manager and kind; None where the manager has no such action."""
    if tier.manager == "slurm":
        return {"deploy": "deploy-slurm", "stop": "stop-slurm", "restart": "restart-slurm"}.get(action)
    return {"deploy": f"deploy-{tier.kind}", "stop": "stop", "restart": "restart"}.get(action)


def unavailable_reason(tier: Tier, action: str) -> str:
    """Why an action has no runbook for a tier (shown where the step would be)."""
    return f"no {action} for tier {tier.name} ({tier.manager})"


def tier_operations(c: Cluster) -> list[Operation]:
    """deploy.<tier>, stop.<tier>, restart.<tier> (where the manager has it), and deploy.<tier>-workers for an
    RPC tier under systemd."""
    ops: list[Operation] = []
    for t in c.tiers:
        how = ("a SLURM job: submitted unless the current script already runs" if t.manager == "slurm"
               else kinds.of(t).deploys)
        ops.append(Operation("deploy", t.name, tier_runbook(t, "deploy"),
                             f"Deploy the {t.name} tier ({how}); wait for /health 200.", t.name))
        if t.workers and t.manager == "systemd":
            ops.append(Operation("deploy", f"{t.name}-workers", "deploy-rpc",
                                 f"Deploy only the {t.name} tier's RPC workers.", t.name, "workers"))
        stopping = "cancel its SLURM job" if t.manager == "slurm" else "head first, then disable the units"
        ops.append(Operation("stop", t.name, tier_runbook(t, "stop"), f"Stop the {t.name} tier ({stopping}).",
                             t.name))
        if t.manager == "slurm":
            ops.append(Operation("restart", t.name, "restart-slurm",
                                 f"Restart the {t.name} tier: cancel its SLURM job and submit it again; wait until "
                                 "its endpoint answers.", t.name))
        else:
            ops.append(Operation("restart", t.name, "restart",
                                 f"Restart the {t.name} tier{kinds.of(t).restart_order}; wait for health.", t.name))
    return ops


def rollback_restart(tier: Tier) -> Operation:
    """What starts a tier again on the files a rollback put back: systemd restarts its units (workers, then head);
    SLURM cancels the job and submits the restored script (restart-slurm)."""
    if tier.manager == "slurm":
        return Operation("rollback", tier.name, "restart-slurm", f"Submit {tier.name}'s restored job script again.",
                         tier.name)
    return Operation("rollback", tier.name, "restart", f"Restart the {tier.name} tier on its restored files.",
                     tier.name)


PHASE_RELOAD = {  # what a phase that is not a tier needs after its files are put back (on the nodes they were on)
    "gateway": "nginx -t && systemctl reload nginx",
    "monitoring": "systemctl restart prometheus prometheus-alertmanager",
    "slurm": "scontrol reconfigure",
}


def cluster_operations(c: Cluster) -> list[Operation]:
    """The runbook tasks that are not per tier, in bring-up order (operations() puts the tiers' where they go);
    deploy.slurm only where clusterbook configures SLURM."""
    return _before_tiers(c) + _after_tiers(c)


def _before_tiers(c: Cluster) -> list[Operation]:
    """SLURM (where clusterbook configures it), the engine and the models, then the earlier setup retired: what runs
    before does not wait for what comes after, and the earlier tiers serve until the new ones take their GPUs."""
    ops = []
    if c.slurm:
        ops.append(Operation("deploy", "slurm", "slurm",
                             "slurm.conf, munge, slurmctld and slurmd (SLURM that clusterbook configures)."))
    if c.engine.release_url or c.storage.shared_dir:  # a build from source reaches the nodes through shared_dir
        ops.append(Operation("deploy", "install", "install",
                             "Install the llama.cpp release on every tier node, each build in its own folder; "
                             "without engine.release_url it is built from source on the build node first."))
    if not c.engine.release_url and c.storage.shared_dir:
        ops.append(Operation("deploy", "build", "install",
                             "Build llama.cpp from source on the build node with the CMake options the cluster's GPUs "
                             "call for, and leave the release tarball on the shared file system.",
                             part="build"))
    ops.append(Operation("models", "fetch", "models",
                         "Fetch the models each node serves: resumable, parts joined, size and sha256 checked."))
    if c.legacy:
        ops.append(Operation("stop", "legacy", "retire-legacy",
                             f"Retire what ran before clusterbook ({c.legacy.source}): record what runs on each node "
                             "(named or found by what it runs), stop it, cancel its SLURM jobs, move its files "
                             "aside into the generations folder (kept)."))
    return ops


def _after_tiers(c: Cluster) -> list[Operation]:
    """The selector, the gateway and monitoring, which point at the tiers; and the way back to the earlier setup."""
    ops = [Operation("deploy", "router", "router", "Install the model selector script (task -> model -> endpoint).")]
    if c.gateway:
        ops.append(Operation("deploy", "gateway", "gateway",
                             "nginx on the gateway node, and the endpoint updater for SLURM tiers."))
    if c.monitoring:
        ops.append(Operation("deploy", "monitoring", "monitoring",
                             "Prometheus, Alertmanager and the node exporters (GPU figures too); checks every scrape "
                             "job is up."))
    if c.legacy:
        ops.append(Operation("restore", "legacy", "restore-legacy",
                             f"The way back to what ran before clusterbook ({c.legacy.source}): clusterbook's units, "
                             "jobs and site stopped, the files put back, and what stop.legacy recorded brought back "
                             "as it was."))
    return ops


def operations(c: Cluster) -> list[Operation]:
    """Every operation, the bring-up's in the order it runs (bringup), then the rest."""
    return _before_tiers(c) + tier_operations(c) + _after_tiers(c)


def bringup(c: Cluster) -> list[Operation]:
    """The first bring-up, in order: one list for the guide, the runbook index and the navigation."""
    return [op for op in operations(c) if op.part is None and (
        op.collection in ("deploy", "models") or op.task == "stop.legacy")]


def cluster_command(c: Cluster, task: str) -> str:
    """`invoke <task>` for a cluster-wide operation, or why this cluster has none (for the docs)."""
    if any(op.task == task for op in cluster_operations(c)):
        return f"`invoke {task}`"
    if task in ("deploy.install", "deploy.build") and not c.engine.release_url and not c.storage.shared_dir:
        return ("not from clusterbook here: neither engine.release_url nor storage.shared_dir is set, so a build "
                f"has no way to the nodes; copy it to every node's {c.engine.install_dir} by hand")
    if task == "deploy.build":
        return "not needed here: the release is downloaded from engine.release_url"
    return f"not on this cluster ({task})"


def tier_command(c: Cluster, action: str, tier: str) -> str:
    """`invoke <action>.<tier>`, or why the tier has no such action (for the docs)."""
    op = next((o for o in tier_operations(c) if o.collection == action and o.name == tier), None)
    return f"`{op.command}`" if op else unavailable_reason(c.tier(tier), action)
