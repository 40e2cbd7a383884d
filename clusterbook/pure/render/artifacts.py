"""Render every generated file of a cluster: (node, target path, text), deterministic, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from urllib.parse import urlsplit

from clusterbook.model.hosts import candidate_nodes, resolve_hosts, router_nodes
from clusterbook.model.schema import Cluster, Tier
from clusterbook.pure import engine_build as eb
from clusterbook.pure import flags as fl
from clusterbook.pure import kinds, layout, slurmjob
from clusterbook.pure import topology as topo
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.layout import path as at
from clusterbook.pure.planner.loadtime import (
    BUSY_RETRY_AFTER_S,
    admitted,
    cold_start_s,
    hold_s,
    new_job_hold_s,
    predict_load,
    wait_cap_s,
    whole_s,
)
from clusterbook.pure.render.artifact import Artifact, header, node_include, node_program, periodic, template
from clusterbook.pure.render.escaping import Quoted
from clusterbook.pure.render.monitoring_files import monitoring_files
from clusterbook.pure.render.node_config import (
    hold_memory_max_mib,
    keeper_config,
    wake_config,
)
from clusterbook.pure.render.tierkit import engine_env, ld_library_path, numa_exec


def server_exec(c: Cluster, tier, numa_fallback: bool = False) -> list[str]:
    """The head's full argv, numactl in front where the tier binds to its GPU's NUMA node (tierkit.numa_exec)."""
    return numa_exec(c, tier, kinds.server_argv(c, tier), numa_fallback)


def artifact_groups(c: Cluster) -> list[tuple[str | None, Callable[[], list[Artifact]]]]:
    """The generated files in groups, each rendered by its own function when called: a tier's own files (named by
    the tier), then the cluster's (None: the selector, gateway, SLURM, keeper, model check, patches, monitoring)."""
    groups: list[tuple[str | None, Callable[[], list[Artifact]]]] = [
        (t.name, partial(_tier_files, c, t)) for t in c.tiers]
    groups.append((None, partial(_selector, c)))
    if c.gateway:
        groups.append((None, partial(_gateway_files, c)))
    if c.slurm:
        groups.append((None, partial(_slurm_conf, c)))
    groups += [(None, partial(_keeper, c)), (None, partial(_model_checker, c))]
    if c.engine.patches and not c.engine.release_url:
        groups.append((None, partial(_engine_patches, c)))
    if c.monitoring:
        groups.append((None, partial(monitoring_files, c)))
    if c.legacy:
        groups.append((None, partial(_legacy, c)))
    return groups


def _engine_patches(c: Cluster) -> list[Artifact]:
    return [Artifact(eb.build_node(c), at(c, "engine_patches"), eb.patch_set(c), "patch",
                     about=f"engine: {len(c.engine.patches)} source patch(es), applied before configure",
                     id="engine_patches")]


def _legacy(c: Cluster) -> list[Artifact]:
    """On every node: what records, retires and restores the earlier setup (node/legacy.py; stop.legacy uploads it)."""
    text = node_program("legacy.py", header(c))
    return [Artifact(n.name, at(c, "legacy"), text, "python", 0o755, id="legacy",
                     about="legacy: the earlier setup recorded, retired and restored") for n in c.nodes]


def render_artifacts(c: Cluster) -> list[Artifact]:
    """Every generated file, sorted by node and path."""
    return sorted((a for _, render in artifact_groups(c) for a in render()), key=lambda a: (a.node, a.path))


class RenderedOnDemand:
    """A cluster's generated files by (node, tier, id), each group rendered when a lookup first needs it (the tier's
    own first): a tier's deploy renders that tier's files, not the whole cluster's. A miss renders everything, so a
    lookup answers as the index of render_artifacts would (keys are unique: tests/unit/test_artifacts_on_demand.py)."""

    def __init__(self, c: Cluster):
        self.pending = artifact_groups(c)
        self.found: dict[tuple[str, str | None, str], Artifact] = {}

    def get(self, key: tuple[str, str | None, str]) -> Artifact | None:
        while key not in self.found and self.pending:
            index = next((i for i, (tier, _) in enumerate(self.pending) if tier == key[1] and tier), 0)
            _, render = self.pending.pop(index)
            for a in render():
                self.found.setdefault((a.node, a.tier, a.id), a)
        return self.found.get(key)


def path_collisions(c: Cluster, artifacts: list[Artifact]) -> list[tuple[tuple, str]]:
    """Two generated files on one path of a node (one would silently replace the other), as (field, message): the
    field is the configurable path that led there (router.script, gateway.upstream_dir, storage.env_dir, …)."""
    configurable = {("router", "script"): c.router.script if c.router else None,
                    ("gateway", "upstream_dir"): c.gateway.upstream_dir if c.gateway else None,
                    ("storage", "env_dir"): c.storage.env_dir, ("storage", "endpoint_dir"): c.storage.endpoint_dir}
    seen: dict[tuple[str, str], Artifact] = {}
    out = []
    for a in artifacts:
        first = seen.setdefault((a.node, a.path), a)
        if first is a:
            continue
        field = next((f for f, v in configurable.items() if v and (a.path == v or a.path.startswith(v + "/"))),
                     ("tiers",))
        out.append((field, f"two generated files would be written to {a.node}:{a.path} ({first.about or first.kind} "
                           f"and {a.about or a.kind}): one would replace the other; give each its own path"))
    return out


def _model_checker(c: Cluster) -> list[Artifact]:
    """On every node that runs (or may run) a tier: a GGUF header check against the cluster file's architecture."""
    text = node_program("gguf_check.py", header(c))
    return [Artifact(node, at(c, "gguf_check"), text, "python", 0o755,
                     about="models: GGUF header against the cluster file", id="gguf_check")
            for node in resolve_hosts(c, "tiers")]


def _keeper(c: Cluster) -> list[Artifact]:
    """On the controller: the keeper (clusterbook/node/keeper.py), its configuration, and the service and timer that
    run it: it resubmits a wanted SLURM tier that has no job."""
    tiers = c.slurm_tiers
    if not tiers:
        return []
    node = c.keeper_node
    interval = min(t.slurm.keeper_interval_s for t in tiers)
    config = Artifact(node, at(c, "keeper_config"), keeper_config(c), "json", about="SLURM: keeper configuration",
                      id="keeper_config")
    wrapper = template("clusterbook-jobs.sh.j2", header=header(c), program=at(c, "slurm_jobs"),
                       config=at(c, "keeper_config"))
    jobs = Artifact(node, at(c, "jobs"), wrapper, "script", 0o755, id="jobs",
                    about="SLURM: the tiers' own jobs, by recorded id and user (submit, squeue, cancel, others)")
    users = {node, *([c.gateway.node] if c.gateway else []), *([c.monitoring.node] if c.monitoring else [])}
    library = [Artifact(n, at(c, "slurm_jobs"), node_program("slurm_jobs.py", header(c)), "python", 0o644,
                        id="slurm_jobs", about="SLURM: the tiers' own jobs (the keeper, wake service and probe import "
                                               "it)") for n in sorted(users)]
    demand = [slurmjob.marker(c, t, "wanted") for t in tiers if t.on_demand]
    if demand:  # the hold service, unprivileged, cannot start the keeper itself: marking a tier wanted does
        library.append(Artifact(node, at(c, "keeper_path"),
                                template("path-trigger.path.j2", header=header(c), paths=demand,
                                         unit="clusterbook-keeper.service",
                                         description=Quoted("clusterbook: run the keeper at once when a tier on "
                                                            "demand is woken")),
                                "unit", about="SLURM: the keeper runs when a tier on demand is woken",
                                id="keeper_path"))
    return [config, jobs, *library, *periodic(c, node, "keeper", node_program("keeper.py", header(c)),
                               Quoted(f"{at(c, 'keeper')} {at(c, 'keeper_config')}"),
                               "resubmit the SLURM tiers that should run and have no job", interval,
                               f"look for the jobs of the SLURM tiers every {interval} s",
                               "SLURM: resubmit a wanted tier that has no job", "SLURM: keeper", kind="python")]


def _wake_files(c: Cluster) -> list[Artifact]:
    """On the gateway: the hold (wake) service that holds a request its tier cannot answer now, and a request to a
    released tier on demand while the keeper starts it."""
    node = c.gateway.node
    command = Quoted(f"/usr/bin/python3 {at(c, 'wake')} {at(c, 'wake_config')}")
    return [
        Artifact(node, at(c, "wake"), node_program("wake.py", header(c)), "python", 0o755,
                 about="gateway: wake service (tiers on demand)", id="wake"),
        Artifact(node, at(c, "hold"), node_program("hold.py", header(c)), "python", 0o644,
                 about="gateway: the hold (a module of the wake service)", id="hold"),
        Artifact(node, at(c, "hold_streams"), node_program("hold_streams.py", header(c)), "python", 0o644,
                 about="gateway: what the hold reads in requests and streams (a module of the hold)",
                 id="hold_streams"),
        Artifact(node, at(c, "wake_config"), wake_config(c), "json", about="gateway: wake service configuration",
                 id="wake_config"),
        Artifact(node, at(c, "wake_unit"),
                 template("daemon.service.j2", header=header(c), command=command,
                          description=Quoted("clusterbook: hold what a tier cannot answer now, continue cut "
                                             "streams, wake tiers on demand"),
                          memory_max=f"{hold_memory_max_mib(c)}M", tasks_max=c.gateway.hold_in_flight_max + 64,
                          user=layout.HOLD_USER, writable=[layout.DEMAND_DIR] if c.slurm_tiers else [],
                          # a body's buffer is mapped and given back when freed (glibc keeps large freed blocks
                          # of many threads' arenas otherwise): what a request costs ends with it
                          environment=["MALLOC_ARENA_MAX=2", "MALLOC_MMAP_THRESHOLD_=131072"]),
                 "unit", about="gateway: wake service unit", id="wake_unit"),
    ]


def _slurm_conf(c: Cluster) -> list[Artifact]:
    """slurm.conf, the same on the controller and every node of a partition."""
    names = sorted({c.slurm.controller} | {n for p in c.slurm.partitions for n in p.nodes},
                   key=lambda n: [x.name for x in c.nodes].index(n))
    nodes = [{"name": n, "hostname": c.node(n).hostname, "address": topo.address(c, n),
              "cpus": c.node(n).cpu_cores, "memory_mib": int(c.node(n).ram_gb * 1000 * 0.9),
              "gres": f"gpu:{len(c.node(n).gpu_devices)}" if c.node(n).gpu_devices else None}
             for n in names if any(n in p.nodes for p in c.slurm.partitions)]
    controller = c.node(c.slurm.controller)
    text = template("slurm.conf.j2", header=header(c), slurm=c.slurm, controller=controller,
                    files=layout.cluster_paths(c), controller_address=topo.address(c, controller.name), nodes=nodes)
    return [Artifact(n, at(c, "slurm_conf"), text, "config", about="SLURM configuration", id="slurm_conf")
            for n in names]


def _tier_files(c: Cluster, tier) -> list[Artifact]:
    env = template("tier.env.j2", header=header(c), ld_library_path=ld_library_path(c), extra=engine_env(c, tier))
    files = [Artifact(n, at(c, "env", tier), env, "env", about=f"{tier.name}: environment", id="env", tier=tier.name)
             for n in candidate_nodes(c, tier)]
    # only the files of the tier's own manager: a SLURM tier has no systemd units that no deploy would install
    systemd = tier.manager == "systemd"
    files += kinds.of(tier).files(c, tier, systemd)
    if not systemd:
        files.append(_sbatch(c, tier))
    return files + _http_firewalld(c, tier)


def _http_firewalld(c: Cluster, tier: Tier) -> list[Artifact]:
    """On an EL node that may serve the tier's API, where firewalld's zone rejects what it does not list: a script
    that opens the tier's HTTP port to its listen network's subnet (the gateway, Prometheus and the tier probe, and
    the direct clients the API page names, "cluster networks only")."""
    network = topo.listen_network(c, tier)
    subnet = str(c.networks[network].subnet)
    servers = kinds.of(tier).http_servers(c, tier)
    return [Artifact(n, at(c, "http_firewalld", tier),
                     template("firewalld-open.sh.j2", header=header(c), network=network,
                              address=topo.address(c, n, network), rules=[{"port": tier.port, "sources": [subnet]}],
                              what=f"The API of the {tier.name} tier may be reached from the {network} network."),
                     "script", 0o755, about=f"{tier.name}: HTTP port open to the {network} network (firewalld)",
                     id="http_firewalld", tier=tier.name)
            for n in servers if c.node(n).os.family == "el" and network in c.node(n).addresses]


def _sbatch(c: Cluster, tier) -> Artifact:
    job = kinds.of(tier).job(c, tier)
    head = tier.nodes[0]
    candidates = candidate_nodes(c, tier)
    floating = tier.floats and candidates != [head]
    argv = server_exec(c, tier, numa_fallback=True)
    if floating:  # the address of whichever node SLURM chose, looked up at run time
        argv = [("${HTTP_ADDR}" if a == topo.http_address(c, tier) else a) for a in argv]
    steps = [*job.before, {"name": job.server, "node": Quoted("$SLURMD_NODENAME") if floating else head,
                           "command": Quoted(fl.shell_line(argv, "        "))}]
    addresses = {n: topo.address(c, n, topo.listen_network(c, tier)) for n in candidates}
    text = template("tier.sbatch.j2", header=header(c), tier=tier, summary=job.summary, job=topo.units(tier).job,
                    slurm=tier.slurm, nodes=[] if floating else [s["node"] for s in steps], steps=steps,
                    count=len(steps), nice=slurmjob.job_nice(tier), log_dir=c.storage.log_dir,
                    endpoint_dir=c.storage.endpoint_dir,
                    http_addr=None if floating else topo.http_address(c, tier), addresses=addresses,
                    ld_library_path=ld_library_path(c), rpc_env=engine_env(c, tier), cpus=tier.slurm_cpus,
                    rpc_port=tier.rpc_port,
                    supervisor=node_include("step_supervisor.sh"))
    controller = c.slurm_controller or head
    return Artifact(controller, at(c, "sbatch", tier), text, "script", 0o755, about=f"{tier.name}: SLURM job",
                    id="sbatch", tier=tier.name)


def selector_rows(c: Cluster) -> list[dict]:
    """(task, model, tier, endpoint) for every routed task, in rule order."""
    if not c.router:
        return []
    return [{"task": task, **model_endpoint(c, rule.model)} for rule in c.router.rules for task in rule.tasks]


def model_endpoint(c: Cluster, model_id: str) -> dict:
    """The tier serving a model and where clients ask it: through the gateway where there is one (the hold, the
    queue and the wake of a tier on demand; a SLURM tier wherever its job runs), else its own endpoint."""
    for tier in c.tiers:
        served = tier.served_models
        if model_id in served:
            return {"model": model_id, "tier": tier.name, "endpoint": topo.client_url(c, tier)}
    raise KeyError(model_id)


def selector_nodes(c: Cluster) -> list[str]:
    return router_nodes(c)


def _selector(c: Cluster) -> list[Artifact]:
    if not c.router:
        return []
    default = model_endpoint(c, c.router.default_model) if c.router.default_model else None
    text = template("model-selector.sh.j2", header=header(c), cluster_name=c.cluster.name,
                    rows=selector_rows(c), default=default)
    return [Artifact(n, at(c, "selector"), text, "script", 0o755, about="router: task -> model -> endpoint",
                     id="selector") for n in selector_nodes(c)]


def upstream_name(tier_name: str) -> str:
    return "clusterbook_" + tier_name.replace("-", "_")


def _gateway_files(c: Cluster) -> list[Artifact]:
    gw = c.gateway
    node = gw.node
    routes = []
    for route in gw.routes:
        tier = c.tier(route.tier)
        public = (gw.url + route.path) if gw.url else None
        plan = plan_tier(c, tier)
        recovery = predict_load(c, tier, plan).recovery_s
        wake = None
        if tier.on_demand:  # nginx asks the wake service first; it answers with where the tier serves
            wake = {"location": "/_clusterbook_wake_" + tier.name.replace("-", "_"),
                    "url": f"http://127.0.0.1:{gw.wake_port}/wake/{tier.name}",
                    "timeout": wait_cap_s(c, tier, plan) + 10, "cap": wait_cap_s(c, tier, plan),
                    "cold_start": whole_s(cold_start_s(c, tier, plan))}
        routes.append({"path": route.path, "tier": route.tier, "port": route.port, "public": public,
                       "upstream": upstream_name(route.tier), "timeout": tier.timeout_s,
                       "retry_after": whole_s(recovery), "wake": wake,
                       "hold_s": max(hold_s(c, tier, plan), new_job_hold_s(c, tier, plan) or 0),
                       "admitted": admitted(c, tier), "busy_retry_after": BUSY_RETRY_AFTER_S,
                       "hold_url": f"http://127.0.0.1:{gw.wake_port}"})
    files = [Artifact(node, at(c, "nginx_site"),
                      template("nginx-site.conf.j2", header=header(c), gateway=gw, routes=routes,
                               status_url=topo.site_status_url(c)), "nginx",
                      about="gateway: nginx site", id="nginx_site")]
    if c.node(node).os.family == "el":
        ports = sorted({r.port for r in gw.routes} | {p for p in (gw.path_port, gw.docs_port) if p})
        files.append(Artifact(node, at(c, "nginx_selinux"),
                              template("nginx-selinux.sh.j2", header=header(c), ports=[str(p) for p in ports]),
                              "script", 0o755, about="gateway: SELinux lets nginx listen and proxy (EL)",
                              id="nginx_selinux"))
    for tier in c.tiers:
        files.append(Artifact(node, at(c, "upstream", tier),
                              template("upstream.conf.j2", header=header(c), upstream=upstream_name(tier.name),
                                       server=f"{topo.http_address(c, tier)}:{tier.port}"),
                              "nginx", about=f"gateway: initial upstream of {tier.name}", id="upstream",
                              tier=tier.name))
    if c.slurm_tiers:
        # only SLURM tiers move; a systemd tier keeps its rendered upstream
        tiers = [{"name": t.name, "upstream": upstream_name(t.name), "hosts": " ".join(topo.tier_hosts(c, t))}
                 for t in c.slurm_tiers]
        files += periodic(c, node, "updater", template("upstream-updater.sh.j2", header=header(c), gateway=gw,
                                                        endpoint_dir=c.storage.endpoint_dir, tiers=tiers),
                           at(c, "updater"), "point nginx at the tiers' current endpoints", gw.update_interval_s,
                           f"refresh nginx upstreams every {gw.update_interval_s} s",
                           "gateway: endpoint registry -> nginx upstreams", "gateway: updater", after="nginx.service")
    files += _wake_files(c)
    if gw.tailscale_name:
        ts_routes = [{"path": r.path, "port": r.port} for r in gw.routes]
        files.append(Artifact(node, at(c, "tailscale_serve"),
                              template("tailscale-serve.sh.j2", header=header(c), gateway=gw, routes=ts_routes),
                              "script", 0o755, about="gateway: tailscale serve paths", id="tailscale_serve"))
    return files


def published(c: Cluster, artifacts: list[Artifact]) -> list[Artifact]:
    """The files as the docs site shows and offers them: a webhook's URL cut to its scheme and host (a chat
    service's incoming webhook carries its secret in the path; the site is published, the node keeps the URL)."""
    hook = c.monitoring.alert_webhook if c.monitoring else None
    if not hook:
        return artifacts
    parts = urlsplit(hook)
    shown = f"{parts.scheme}://{parts.hostname}/REDACTED-on-{c.monitoring.node}-only"
    return [replace(a, text=a.text.replace(hook, shown)) if hook in a.text else a for a in artifacts]
