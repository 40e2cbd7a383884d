"""What each task does, in terms of the layers: load, plan, render, validate, report. Tasks call these."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from .console import Failed, console
from .effects.files import write_tree
from .effects.validators import MissingTools, validate
from .loader import load_cluster, load_cluster_document
from .planner.capacity import GIB, plan_cluster, plan_json
from .planner.findings import plan_findings
from .problems import InputError
from .render.artifacts import render_artifacts


def render(cluster_file: str, out_dir: str) -> None:
    """Write every generated file under out_dir/<node>/<target path>."""
    cluster = load_cluster(cluster_file)
    artifacts = render_artifacts(cluster)
    paths = write_tree(artifacts, Path(out_dir))
    table = Table("node", "file", "what", title=f"{cluster.cluster.name}: {len(paths)} files in {out_dir}/")
    for a in artifacts:
        table.add_row(a.node, a.path, a.about)
    console.print(table)


def check(cluster_file: str) -> None:
    """Validate the cluster file and every rendered file with the real tools; exit 1 on any failure."""
    cluster, doc = load_cluster_document(cluster_file)
    findings = plan_findings(cluster, plan_cluster(cluster))
    if findings:
        raise InputError([doc.problem(path, message) for path, message in findings])
    console.print(f"[green]ok[/] {cluster_file}: schema, cross-field rules and capacity plan")
    try:
        verdicts = validate(render_artifacts(cluster))
    except MissingTools as exc:
        raise Failed(str(exc)) from None
    table = Table("result", "node", "file", "validator", title="rendered files")
    for v in verdicts:
        table.add_row("[green]ok[/]" if v.ok else "[red]FAIL[/]", v.node, v.path, v.validator)
    console.print(table)
    failed = [v for v in verdicts if not v.ok]
    for v in failed:
        console.print(f"[red]{v.node}:{v.path}[/] ({v.validator}):\n{v.output}", markup=True)
    if failed:
        raise Failed(f"{len(failed)} of {len(verdicts)} checks failed")
    console.print(f"[green]all {len(verdicts)} checks passed[/]")


def write_reference(readme: str) -> None:
    """Regenerate the cluster file reference between the README's markers."""
    from .reference import reference_markdown, splice
    path = Path(readme)
    path.write_text(splice(path.read_text(), reference_markdown()))
    console.print(f"[green]updated[/] the cluster file reference in {readme}")


def plan(cluster_file: str, tier: str | None, as_json: bool, models_dir: str | None) -> None:
    """Print the capacity plan of every tier (or one) as tables, or as JSON."""
    import json

    cluster = load_cluster(cluster_file)
    plans = plan_cluster(cluster, Path(models_dir) if models_dir else None)
    if tier and tier not in plans:
        raise Failed(f"unknown tier '{tier}' (tiers: {', '.join(plans)})")
    chosen = [plans[tier]] if tier else list(plans.values())
    if as_json:
        print(json.dumps([plan_json(p) for p in chosen], indent=2))
        return
    for p in chosen:
        table = Table("device", "node", "blocks", "weights", "KV cache", "compute", "overhead", "total", "usable",
                      "headroom", title=f"tier {p.tier}: {p.model} at {p.ctx:,} tokens ({p.shape_source} shape)")
        for d in p.devices:
            gib = lambda b: f"{b / GIB:.2f} GiB" if b is not None else "-"  # noqa: E731
            head = gib(d.headroom) if d.headroom is None or d.headroom >= 0 else f"[red]{gib(d.headroom)}[/]"
            table.add_row(d.device, d.node, f"{d.blocks}{' + out' if d.output else ''}", gib(d.weights), gib(d.kv),
                          gib(d.compute), gib(d.overhead), gib(d.total), gib(d.capacity), head)
        console.print(table)
        facts = [f"fits: {'[green]yes[/]' if p.fits else '[red]no[/]'}"]
        if p.max_ctx is not None:
            facts.append(f"largest context that fits: {p.max_ctx:,}")
        if p.decode_bound_tps:
            facts.append(f"decode bound: {p.decode_bound_tps:.1f} tok/s (empty context)")
        if p.decode_bound_full_ctx_tps:
            facts.append(f"{p.decode_bound_full_ctx_tps:.1f} tok/s (full context)")
        if p.prompt_estimate_tps:
            facts.append(f"prompt estimate: {p.prompt_estimate_tps:,.0f} tok/s")
        console.print("  " + " · ".join(facts + p.notes))


LAB_CLUSTER = "lab/cluster.yaml"


def _lab(cluster_file: str):
    from .lab.lab import Lab
    return Lab(load_cluster(cluster_file))


LAB_SLURM_CLUSTER = "lab/cluster-slurm.yaml"


def lab_up(cluster_file: str, slurm: bool = False) -> None:
    """Build (cached) and boot the lab; a no-op when it is already up. With slurm, configure SLURM too."""
    lab = _lab(cluster_file)
    try:
        lab.up()
    except RuntimeError as exc:
        raise Failed(str(exc)) from None
    if slurm:
        run_runbook("slurm", cluster_file, quiet_recap=True)
    lab_status(cluster_file)


def lab_status(cluster_file: str) -> None:
    lab = _lab(cluster_file)
    table = Table("node", "container", "ssh", "state / addresses", title=f"lab {lab.c.cluster.name}")
    rows = lab.status()
    for s in rows:
        table.add_row(s.name, "[green]running[/]" if s.running else "[red]stopped[/]",
                      "[green]ok[/]" if s.ssh else "[red]no[/]", s.detail.replace("\n", "  "))
    console.print(table)
    if not all(s.running and s.ssh for s in rows):
        raise Failed("not every lab node is running and reachable (invoke lab.up)")


def lab_down(cluster_file: str) -> None:
    left = _lab(cluster_file).down()
    if left:
        raise Failed(f"left behind after lab.down: {', '.join(left)}")
    console.print("[green]lab is down[/]: no containers, bridges or veths left (caches kept)")


def lab_restart(cluster_file: str, node: str) -> None:
    lab = _lab(cluster_file)
    if node not in [n.name for n in lab.c.nodes]:
        raise Failed(f"unknown node '{node}' (nodes: {', '.join(n.name for n in lab.c.nodes)})")
    lab.restart(node)
    console.print(f"[green]{node} is back[/]")


def ssh_command(cluster_file: str, node: str) -> list[str]:
    """The ssh argv for an interactive session on a node of the cluster file."""
    from .effects.ssh import ssh_argv
    cluster = load_cluster(cluster_file)
    if node not in [n.name for n in cluster.nodes]:
        raise Failed(f"unknown node '{node}' (nodes: {', '.join(n.name for n in cluster.nodes)})")
    return ssh_argv(cluster, node)


def default_cluster() -> str:
    """The cluster file tasks use when --cluster is not given: $CLUSTERBOOK_CLUSTER, else cluster.yaml."""
    import os
    return os.environ.get("CLUSTERBOOK_CLUSTER", "cluster.yaml")


def run_runbook(runbook_id: str, cluster_file: str, tier: str | None = None, dry: bool = False,
                only: str | None = None, steps: str | None = None, quiet_recap: bool = False):
    """Expand a runbook for the cluster and run it over SSH (or print the plan with dry)."""
    import time as _time

    from .effects.executor import Executor, dry_run, recap, step_times
    from .effects.ssh import SshTransport
    from .runbooks import available, expand

    cluster = load_cluster(cluster_file)
    books = available()
    only_nodes = [n.strip() for n in only.split(",")] if only else None
    if only_nodes:
        unknown = [n for n in only_nodes if n not in {x.name for x in cluster.nodes}]
        if unknown:
            raise Failed(f"--only: unknown node(s) {', '.join(unknown)}")
    expansion = expand(books[runbook_id], cluster, tier, only_nodes, steps.split(",") if steps else None)
    state_dir = Path(".clusterbook") / cluster.cluster.name / "deployed"
    if dry:
        dry_run(expansion, state_dir)
        return None
    stamp = _time.strftime("%Y%m%dT%H%M%SZ", _time.gmtime())
    log = Path("runs") / f"{stamp}-{cluster.cluster.name}-{runbook_id}{'-' + tier if tier else ''}.jsonl"
    started = _time.monotonic()
    report = Executor(SshTransport(cluster), log, state_dir).run(expansion)
    if not quiet_recap:
        console.print(recap(report))
        console.print(step_times(report))
        console.print(f"[dim]{_time.monotonic() - started:.1f} s; run log: {log}[/]")
    if report.failure:
        raise Failed(report.failure)
    return report


def tier_runbook(cluster_file: str, tier: str, action: str) -> str:
    """The runbook id for an action on a tier: deploy -> deploy-<kind>, stop, restart."""
    cluster = load_cluster(cluster_file)
    names = [t.name for t in cluster.tiers]
    if tier not in names:
        raise Failed(f"unknown tier '{tier}' in {cluster_file} (tiers: {', '.join(names)})")
    t = cluster.tier(tier)
    if t.manager == "slurm":
        if action == "restart":
            raise Failed(f"tier {tier} runs as a SLURM job: use stop.{tier} and deploy.{tier}, or scontrol requeue")
        return f"{action}-slurm"
    return f"deploy-{t.kind}" if action == "deploy" else action


def status(cluster_file: str, only: str | None = None) -> None:
    """A table of node, unit, active state, port listening, models, GPU memory."""
    report = run_runbook("status", cluster_file, only=only, quiet_recap=True)
    table = Table("node", "unit", "active", "port", "listening", "models", "GPU memory (MiB used/total)",
                  title="status")
    for o in report.outcomes:
        rows = [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in o.stdout.splitlines()]
        gpu = next((r["gpu"] for r in rows if "gpu" in r), "none")
        for r in rows:
            if "unit" in r and "active" in r:
                active = r["active"]
                table.add_row(o.host, r["unit"], f"[green]{active}[/]" if active == "active" else f"[red]{active}[/]",
                              r["port"], "yes" if r["listening"] != "0" else "[red]no[/]", r.get("models") or "-",
                              gpu if gpu != "none" else "-")
    console.print(table)
    jobs = [dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            for o in report.outcomes for line in o.stdout.splitlines() if line.startswith("job=")]
    if jobs:
        table = Table("job", "id", "state", "nodes", "endpoint", title="SLURM jobs")
        for j in jobs:
            state = j["state"]
            table.add_row(j["job"], j["id"], f"[green]{state}[/]" if state == "RUNNING" else f"[yellow]{state}[/]",
                          j["nodes"], j["endpoint"])
        console.print(table)


def logs(cluster_file: str, only: str | None = None) -> None:
    report = run_runbook("logs", cluster_file, only=only, quiet_recap=True)
    for o in report.outcomes:
        console.rule(o.host)
        console.print(o.stdout, markup=False, highlight=False)


MERMAID = Path("docs/assets/vendor/mermaid.min.js")


def docs(cluster_file: str, out: str, serve: bool = False, address: str = "127.0.0.1:8000") -> None:
    """Build the docs site strictly (or serve it) from a cluster file; nothing is fetched from outside."""
    import os
    import subprocess
    import sys
    import time as _time

    load_cluster(cluster_file)  # bad input: the usual FILE:LINE messages, before MkDocs starts
    if not MERMAID.exists():
        raise Failed(f"{MERMAID} is missing: run ./setup (it installs the npm package mermaid@11)")
    env = {**os.environ, "CLUSTERBOOK_CLUSTER": str(Path(cluster_file).resolve()), "NO_MKDOCS_2_WARNING": "1",
           "DISABLE_MKDOCS_2_WARNING": "true"}
    if serve:
        subprocess.run([sys.executable, "-m", "mkdocs", "serve", "--livereload", "-a", address], env=env)
        return
    started = _time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", out], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(f"mkdocs build failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}")
    console.print(f"[green]built[/] {out}/ from {cluster_file} in {_time.monotonic() - started:.1f} s; "
                  f"browse it with: invoke docs.serve (or python3 -m http.server -d {out})")


def verify(cluster_file: str, disruptive: bool, only: str | None) -> None:
    """Run tests/features against the live cluster; write cucumber JSON, JUnit XML and a Markdown summary."""
    import subprocess
    import sys

    load_cluster(cluster_file)
    reports = Path("reports")
    reports.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "tests/acceptance", "--live-cluster", cluster_file,
            "-p", "no:cacheprovider",
            f"--cucumberjson={reports / 'verify.cucumber.json'}", f"--junitxml={reports / 'verify.junit.xml'}",
            "--verify-summary", str(reports / "verify-summary.md"), "-rA", "--tb=line", "-q"]
    if disruptive:
        argv.append("--disruptive")
    if only:
        argv += ["-k", only]
    proc = subprocess.run(argv)
    console.print(f"reports: {reports}/verify-summary.md, verify.cucumber.json, verify.junit.xml")
    if proc.returncode != 0:
        raise Failed(f"verify: scenarios failed (pytest exit status {proc.returncode}); "
                     f"see {reports}/verify-summary.md")


def demo() -> None:
    """The main job on the lab: boot it, install, fetch models, deploy both tiers, verify, build the docs."""
    import os

    os.environ["CLUSTERBOOK_CLUSTER"] = LAB_CLUSTER
    lab_up(LAB_CLUSTER)
    for runbook in ("install", "models", "router", "gateway"):
        run_runbook(runbook, LAB_CLUSTER)
    cluster = load_cluster(LAB_CLUSTER)
    for tier in cluster.tiers:
        run_runbook(tier_runbook(LAB_CLUSTER, tier.name, "deploy"), LAB_CLUSTER, tier.name)
    verify(LAB_CLUSTER, disruptive=True, only=None)
    docs(LAB_CLUSTER, "site")
    console.print("\n[bold green]The lab is up, deployed and verified.[/] Browse the docs with "
                  "[bold]invoke docs.serve --cluster lab/cluster.yaml[/] (http://127.0.0.1:8000), or open "
                  "site/index.html; the verify report is in reports/verify-summary.md.")


def _write_bench(report, card: str) -> None:
    import json

    from .benchmark import markdown
    reports = Path("reports")
    reports.mkdir(exist_ok=True)
    (reports / "bench.json").write_text(json.dumps({**report.to_json(), "card": card}, indent=2))
    text = markdown(report, card)
    (reports / "bench-summary.md").write_text(text)
    console.print(text, markup=False)
    console.print(f"[dim]written: {reports}/bench.json, {reports}/bench-summary.md[/]")


def _card() -> str:
    import shutil
    import subprocess
    if not shutil.which("nvidia-smi"):
        return "CPU only"
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
    return f"{len(names)} x {names[0]}" if names else "unknown GPU"


def _bench_tier(cluster, tier_name: str | None):
    from .schema import RpcTier
    tiers = [t for t in cluster.tiers if tier_name in (None, t.name)]
    if not tiers:
        raise Failed(f"unknown tier '{tier_name}' (tiers: {', '.join(t.name for t in cluster.tiers)})")
    rpc = [t for t in tiers if isinstance(t, RpcTier)]
    return (rpc or tiers)[0]


def bench(cluster_file: str, tier_name: str | None, quick: bool) -> None:
    """Measure a live tier over its HTTP API, beside the planner's bound."""
    from . import topology as topo
    from .benchmark import run_bench
    from .effects.probes import api_key
    from .effects.ssh import SshTransport
    from .planner.capacity import plan_tier

    cluster = load_cluster(cluster_file)
    tier = _bench_tier(cluster, tier_name)
    model = tier.models[0] if tier.kind == "router" else tier.model
    key = api_key(SshTransport(cluster), cluster, tier)
    options = {"repeats": 1, "tokens": 32, "clients": (1, 2), "contexts": (128,)} if quick else {}
    with console.status("bench …") as status:
        report = run_bench(topo.endpoint_url(cluster, tier), model, key, tier.name,
                           plan_tier(cluster, tier).decode_bound_tps, max_context=tier.ctx_size,
                           progress=status.update, **options)
    _write_bench(report, "")


def rehearse(cluster_file: str, tier_name: str | None, install_dir: str | None, models_dir: str | None,
             quick: bool) -> None:
    """Run the tier's rendered command lines on this machine (one RPC worker per GPU, head on GPU 0), bench it."""
    from . import topology as topo
    from .benchmark import run_bench
    from .planner.capacity import plan_tier
    from .planner.shape import shape_of
    from .rehearsal import Rehearsal, localize

    cluster = localize(load_cluster(cluster_file), install_dir, models_dir)
    tier = _bench_tier(cluster, tier_name)
    shape = shape_of(cluster.model(tier.model), Path(cluster.storage.models_dir))
    bound = plan_tier(cluster, tier, shape).decode_bound_tps
    options = {"repeats": 1, "tokens": 32, "clients": (1, 2), "contexts": (128,)} if quick else {}
    with console.status(f"starting {tier.name}: workers, then the head …") as status:
        with Rehearsal(cluster, tier, Path("reports/rehearsal")):
            _record_gpu_memory(cluster, tier, shape)
            status.update("bench …")
            report = run_bench(topo.endpoint_url(cluster, tier), tier.model, None, tier.name, bound,
                               max_context=tier.ctx_size, progress=status.update, **options)
    _write_bench(report, _card() + " (rehearsal)")


def _record_gpu_memory(cluster, tier, shape) -> None:
    """With GPUs: memory used per GPU once the tier is up, next to the plan's total for that device."""
    import json
    import shutil
    import subprocess

    from .planner.capacity import plan_tier
    from .rehearsal import gpu_assignment
    if not shutil.which("nvidia-smi"):
        return
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    used = {int(i): int(m) * 2**20 for i, m in (line.split(",") for line in out.strip().splitlines())}
    gpus = gpu_assignment(cluster, tier)
    rows = []
    for device in plan_tier(cluster, tier, shape).devices:
        index = int(gpus[device.node].split(",")[0])
        rows.append({"device": device.device, "node": device.node, "gpu": index, "planned": device.total,
                     "used": used[index], "ratio": round(device.total / used[index], 3)})
    Path("reports").mkdir(exist_ok=True)
    Path("reports/rehearsal-gpu-memory.json").write_text(json.dumps(rows, indent=2))
    for r in rows:
        console.print(f"{r['device']} (GPU {r['gpu']}): planned {r['planned'] / GIB:.2f} GiB, "
                      f"nvidia-smi {r['used'] / GIB:.2f} GiB, ratio {r['ratio']}")


def parallel_sweep(cluster, tier, parallels: tuple[int, ...]) -> list[dict]:
    """The live server with each parallel slot count, as many clients as slots: aggregate throughput."""
    from . import topology as topo
    from .benchmark import concurrency_point
    from .rehearsal import Rehearsal

    points = []
    for n in parallels:
        with console.status(f"server with --parallel {n}, {n} client(s) …"):
            with Rehearsal(cluster, tier.model_copy(update={"parallel": n}), Path("reports/rehearsal")):
                url = topo.endpoint_url(cluster, tier)
                concurrency_point(url, tier.model, None, 1, 8)  # warm up
                points.append({"parallel": n, **concurrency_point(url, tier.model, None, n, 64)})
    return points


def tune(cluster_file: str, tier_name: str | None, install_dir: str | None, models_dir: str | None,
         parallels: tuple[int, ...] = (1, 2, 4)) -> None:
    """Try the settings grid with llama-bench over the tier's RPC workers; print the best and the change to make."""
    import json

    from .rehearsal import Rehearsal, gpu_assignment, localize
    from .tuning import change_to_make
    from .tuning import tune as run_tune

    cluster = localize(load_cluster(cluster_file), install_dir, models_dir)
    tier = _bench_tier(cluster, tier_name)
    head_gpus = gpu_assignment(cluster, tier).get(tier.head, "")
    with console.status("starting the RPC workers …") as status:
        with Rehearsal(cluster, tier, Path("reports/rehearsal"), with_head=False):
            grid, best, again = run_tune(cluster, tier, head_gpus, progress=status.update)
    parallel = parallel_sweep(cluster, tier.model_copy(update=best.settings()), parallels)
    table = Table("flash attn", "K", "V", "ubatch", "batch", "decode tok/s", "prompt tok/s", title=f"tune {tier.name}")
    for p in sorted(grid, key=lambda p: -p.decode_tps):
        table.add_row("on" if p.flash_attn else "off", p.cache_k, p.cache_v, str(p.ubatch), str(p.batch),
                      f"{p.decode_tps:.1f}", f"{p.prompt_tps:.0f}")
    console.print(table)
    ptable = Table("parallel", "clients", "aggregate tok/s", "per client tok/s", "TTFT s", title="parallel slots")
    for p in parallel:
        ptable.add_row(str(p["parallel"]), str(p["clients"]), str(p["aggregate_tps"]), str(p["per_client_tps"]),
                       str(p["ttft_s"]))
    console.print(ptable)
    one = next(p for p in parallel if p["parallel"] == parallels[0])["aggregate_tps"]
    best_parallel = max(parallel, key=lambda p: p["aggregate_tps"])
    chosen = best_parallel["parallel"] if best_parallel["aggregate_tps"] >= 1.1 * one else parallels[0]
    changes = change_to_make(tier, best)
    if chosen != tier.parallel:
        changes.append(f"parallel: {chosen}   # was {tier.parallel}; aggregate {best_parallel['aggregate_tps']} "
                       f"tok/s against {one} with one slot")
    console.print(f"best: {best.settings()} at {best.decode_tps:.1f} tok/s; measured again: {again.decode_tps:.1f} "
                  f"tok/s ({again.decode_tps / best.decode_tps:.1%} of the grid's best)")
    console.print("change in the cluster file, tier " + tier.name + ":\n  " + "\n  ".join(changes) if changes
                  else "the cluster file already has the best settings")
    Path("reports").mkdir(exist_ok=True)
    Path("reports/tune.json").write_text(json.dumps({
        "card": _card(), "tier": tier.name, "grid": [p.__dict__ for p in grid], "best": best.__dict__,
        "again": again.__dict__, "parallel": parallel, "change": changes}, indent=2))
