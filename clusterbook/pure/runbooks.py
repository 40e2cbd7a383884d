"""Runbook expansion: runbook + cluster (+ tier) -> ordered steps of concrete commands and files per host. Pure."""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from clusterbook.model.hosts import resolve_hosts
from clusterbook.model.loader import validate_document
from clusterbook.model.problems import InputError, Problem
from clusterbook.model.runbook_schema import (
    Fragment,
    Handler,
    KeeperMark,
    Package,
    Run,
    Runbook,
    Service,
    StepBody,
    SubmitJob,
    Upload,
    WaitGateway,
    WaitHttp,
    WaitJob,
    WaitPort,
)
from clusterbook.model.schema import Cluster, Tier
from clusterbook.model.templating import render_string
from clusterbook.model.yamlsource import YamlDocument, load_yaml
from clusterbook.pure import allocation, kinds, layout, legacyplan, packagedata, services, slurmjob, waits
from clusterbook.pure import engine_build as eb
from clusterbook.pure import flags as fl
from clusterbook.pure import topology as topo
from clusterbook.pure.mdtext import prose_value
from clusterbook.pure.packages import PACKAGES, install_command, installed_check, toolset_bin
from clusterbook.pure.render import monitoring as mon
from clusterbook.pure.render.artifacts import Artifact, RenderedOnDemand, ld_library_path
from clusterbook.pure.render.escaping import checked_target

RUNBOOK_DIR = packagedata.RUNBOOKS
FRAGMENTS = "fragments"  # the runbooks' folder of steps written once (runbooks/fragments/NAME.yaml)


@dataclass(frozen=True)
class FragmentFile:
    """A validated fragment and the YAML it came from."""

    fragment: Fragment
    doc: YamlDocument


@dataclass(frozen=True)
class RunbookFile:
    """A validated runbook, the fragments its steps use, and the YAML they came from (to locate template errors)."""

    runbook: Runbook
    doc: YamlDocument
    fragments: dict[str, FragmentFile] = field(default_factory=dict)


def load_fragment(path: Path) -> FragmentFile:
    doc = load_yaml(path)
    fragment = validate_document(doc, Fragment)
    if fragment.id != path.stem:
        raise InputError([doc.problem(("id",), f"the fragment's id must be its file's name, {path.stem}")])
    return FragmentFile(fragment, doc)


def load_runbook(path: str | Path) -> RunbookFile:
    """A runbook and the fragments it uses; a fragment that is not there, or arguments it does not take, are
    errors at the step's line."""
    doc = load_yaml(path)
    book = validate_document(doc, Runbook)
    folder, used, problems = Path(path).parent / FRAGMENTS, {}, []
    for i, step in enumerate(book.steps):
        if step.use is None:
            continue
        if step.use not in used:
            if not (folder / f"{step.use}.yaml").is_file():
                known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) or "none"
                problems.append(doc.problem(("steps", i, "use"), f"no fragment {step.use!r} (there are: {known})"))
                continue
            used[step.use] = load_fragment(folder / f"{step.use}.yaml")
        params = used[step.use].fragment.params
        unknown = sorted(set(step.with_) - set(params))
        missing = sorted(n for n, p in params.items() if p.default is None and n not in step.with_)
        if unknown or missing:
            problems.append(doc.problem(("steps", i, "with"), f"fragment {step.use} takes "
                                        f"{', '.join(sorted(params)) or 'no arguments'}: "
                                        + "; ".join([f"unknown {', '.join(unknown)}"] * bool(unknown)
                                                    + [f"missing {', '.join(missing)}"] * bool(missing))))
    if problems:
        raise InputError(problems)
    return RunbookFile(book, doc, used)


@dataclass(frozen=True)
class StepSource:
    """What one runbook step does, wherever it is written: its body (the step's or its fragment's), the YAML and
    path that locate it, the arguments its templates see, its conditions, and the handlers it may notify."""

    body: StepBody | object
    doc: YamlDocument
    path: tuple
    args: dict
    whens: tuple[tuple[str, YamlDocument, tuple], ...]
    handlers: dict[str, Handler]


def step_sources(book: RunbookFile) -> list[StepSource]:
    """Each step of a runbook as written: its own, or its fragment's with the step's arguments."""
    out = []
    for i, step in enumerate(book.runbook.steps):
        own = ((step.when, book.doc, ("steps", i, "when")),) if step.when else ()
        if step.use is None:
            out.append(StepSource(step, book.doc, ("steps", i), {}, own, book.runbook.handlers))
            continue
        used = book.fragments[step.use]
        frag = used.fragment
        args = {n: p.default for n, p in frag.params.items()} | dict(step.with_)
        whens = own + (((frag.when, used.doc, ("when",)),) if frag.when else ())
        out.append(StepSource(frag, used.doc, (), args, whens, frag.handlers))
    return out


def available(directory: Path = RUNBOOK_DIR) -> dict[str, RunbookFile]:
    """Every runbook in the directory, by id (a runbook's id is its file's name)."""
    books = {path.stem: load_runbook(path) for path in sorted(directory.glob("*.yaml"))}
    for name, book in books.items():
        if book.runbook.id != name:
            raise ValueError(f"{directory / name}.yaml: id {book.runbook.id} differs from the file's name")
    return books


def runbook_named(runbook_id: str, directory: Path = RUNBOOK_DIR) -> RunbookFile:
    """One runbook by id, reading its file only (a command runs one: parsing the others cost it 30 ms)."""
    path = directory / f"{runbook_id}.yaml"
    if not path.is_file():
        raise KeyError(runbook_id)
    return load_runbook(path)


@dataclass(frozen=True)
class PutFile:
    """Upload: the rendered content of one file for one host."""

    path: str
    content: str
    mode: int
    notify: tuple[str, ...] = ()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    def __post_init__(self) -> None:
        checked_target(self.path)  # uploads land where the cluster file said, never above it

    def describe(self) -> str:
        return f"put {self.path} (mode {self.mode:o}, sha256 {self.sha256[:12]})"


@dataclass(frozen=True)
class Command:
    """Run: a concrete shell command, with its idempotence and retry rules."""

    command: str
    unless: str | None = None
    until: str | None = None
    changed_when: str = "always"
    timeout: int = 120
    retries: int = 0
    delay: float = 2
    notify: tuple[str, ...] = ()
    name: str | None = None
    abort_when: str | None = None
    waits_when: str | None = None  # a wait that ends here without failing: the tier waits for SLURM (see executor)
    probe: bool = False  # read-only (a wait): while a run has changed nothing, its look-ahead answer stands

    @property
    def label(self) -> str:
        first = self.command.splitlines()[0]
        return self.name or (first + (" …" if "\n" in self.command else ""))

    def describe(self) -> str:
        text = self.command
        if self.unless:
            text += f"   # unless: {self.unless}"
        if self.until:
            text += f"   # until stdout has {self.until!r}, {self.retries + 1} tries"
        if self.abort_when:
            text += f"; fails at once on {self.abort_when!r}"
        if self.waits_when:
            text += f"; ends waiting (exit status 3, no failure) on {self.waits_when!r}"
        return text


Concrete = PutFile | Command


@dataclass(frozen=True)
class ExpandedStep:
    id: str
    title: str
    explain: str
    hosts: dict[str, list[Concrete]]
    handlers: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> handler name -> command
    parts: tuple[str, ...] = ()  # the runbook parts the step belongs to
    page_title: str = ""  # title and explain as a page shows them: the cluster's values escaped as Markdown text
    page_explain: str = ""


@dataclass(frozen=True)
class Expansion:
    runbook: str
    title: str
    explain: str
    tier: str | None
    steps: list[ExpandedStep]
    generation: bool = False  # the runbook keeps what it replaces (a generation on each node)
    page_title: str = ""  # as ExpandedStep's: for the docs site, where a value is text, never Markdown or HTML
    page_explain: str = ""


def models_for_host(c: Cluster, host: str, tier: Tier | None = None) -> list:
    """Models a node must hold: the RPC head's model, the router node's models (workers get tensors over RPC)."""
    wanted = []
    for t in ([tier] if tier else c.tiers):
        if host in kinds.of(t).http_servers(c, t):  # the servers read the files; workers get tensors over RPC
            wanted += t.served_models
    return [c.model(m) for m in dict.fromkeys(wanted)]


def _build_context(c: Cluster) -> dict:
    """What the install runbook needs of the build: node, folders, options (quoted for the shell) and release."""
    plan = eb.plan_build(c)
    root = eb.cuda_root(c)
    inside = allocation.heavy(c, plan.node, allocation.build_cpus(c, plan.node), "build")
    return {"node": plan.node, "root": plan.root, "src": plan.src, "tree": plan.tree, "targets": plan.targets,
            "heavy": inside,  # in a SLURM allocation where tiers run on the build node (allocation.py)
            "jobs": str(allocation.build_cpus(c, plan.node)) if inside.startswith("srun") else '"$(nproc)"',
            "locked": f"mkdir -p {plan.tree} && exec 9>>{plan.lock} && flock -w 7200 9",  # held until the step ends
            "options": plan.options, "options_q": " ".join(shlex.quote(o) for o in plan.options),
            "cuda": plan.cuda, "cuda_archs": eb.cuda_architectures(c), "cuda_root": root,
            "nvcc": posixpath.join(root, "bin/nvcc") if root else "nvcc", "release": plan.release,
            "release_dir": posixpath.dirname(plan.release) if plan.release else None,
            "release_name": posixpath.basename(plan.release) if plan.release else None,
            "sdist_url": eb.sdist_url(c.engine.build), "cpu_flags": eb.cpu_flags(c)}


def template_context(c: Cluster, tier: Tier | None, host: str | None,
                     variables: dict | None = None) -> dict:
    """What a runbook template sees; `variables` are a command's own: tiers_shown (the tiers logs and status report
    on; default all), build_id (docs.publish)."""
    ctx: dict = {"tiers_shown": [t.name for t in c.tiers], **(variables or {}),
                 "cluster": c, "engine": c.engine, "storage": c.storage,
                 "tier": tier, "host": host,
                 "node": c.node(host) if host else None, "q": shlex.quote,
                 "install": (lambda need: install_command(c.node(host).os, need)) if host else None,
                 "heavy": (lambda cpus, label: allocation.heavy(c, host, cpus, label)) if host else None,
                 "toolset": toolset_bin(c.node(host).os) if host else None,
                 "bin": {"server": fl.binary(c, c.engine.server_binary),
                         "rpc": fl.binary(c, c.engine.rpc_worker_binary),
                         "bench": fl.binary(c, c.engine.bench_binary)},
                 "build": _build_context(c),
                 "install_root": eb.install_root(c),
                 "install_name": posixpath.basename(c.engine.install_dir.rstrip("/")),
                 "ld_library_path": ld_library_path(c),
                 "units_of": topo.units,
                 "marker": lambda t, mark: slurmjob.marker(c, t, mark),  # the keeper's marks (slurmjob.py)
                 "files": layout.cluster_paths(c),  # every generated file's node path by artifact id (layout.py)
                 "hold_user": layout.HOLD_USER,
                 "demand_key_files": [t.api_key.file for t in c.tiers  # the hold service reads them (wake.py)
                                      if t.on_demand and t.api_key and t.api_key.file],
                 "endpoint_of": lambda t: topo.endpoint_url(c, t)}
    if c.monitoring:  # what deploy.monitoring checks: the scrape jobs that must be up, the key files it reads
        routers = [mon.job(t) for t in c.tiers if t.router_mode]
        ctx.update(textfile_dir=layout.TEXTFILE_DIR, node_exporter_el=layout.NODE_EXPORTER_EL,
                   releases_dir=layout.RELEASES_DIR, probe_textfile=mon.PROBE_TEXTFILE)
        ctx["monitoring"] = {"router_jobs": "|".join(routers), "jobs": 1 + len(c.tiers) - len(routers),
                             "key_files": [t.api_key.file for t in c.tiers if t.api_key and t.api_key.file
                                      and c.monitoring.node in t.nodes]}
    ctx["legacy_models_dir"] = c.legacy.models_dir if c.legacy else None
    if c.legacy:  # the SLURM tiers' partitions: the only ones stop.legacy cancels jobs in
        ctx["legacy_partitions"] = ",".join(sorted({t.slurm.partition for t in c.tiers if t.slurm}))
    if c.legacy and host:  # what stop.legacy retires on this host
        ctx["legacy_units"] = [u.name for u in c.legacy.units if host in u.nodes]
        ctx["legacy_files"] = [f.path for f in c.legacy.files if f.node == host]
        ctx["legacy_record"] = legacyplan.record_command(c, host)
    if c.legacy:
        ctx.update(legacy_dir=legacyplan.folder(c), stop_ours=legacyplan.stop_ours_command(c),
                   ours_stopped=legacyplan.ours_stopped_check(c))
    if tier is not None:
        ctx["files"] = {**ctx["files"], **layout.tier_paths(c, tier)}
        ctx.update(units=topo.units(tier), endpoint=topo.endpoint_url(c, tier),
                   http_address=topo.http_address(c, tier),
                   rpc_endpoints=topo.rpc_endpoints(c, tier),  # none: a tier without RPC workers
                   rpc_addresses=[a.split(":")[0] for a in topo.rpc_endpoints(c, tier)])
    return ctx


def expand(book: RunbookFile, c: Cluster, tier_name: str | None = None, only: list[str] | None = None,
           steps: list[str] | None = None, artifacts: list[Artifact] | None = None, part: str | None = None,
           variables: dict | None = None) -> Expansion:
    """The concrete plan: per step, per host, the exact files and commands. Template errors name their line."""
    rb, doc = book.runbook, book.doc
    tier = _tier(c, rb, tier_name)
    files = RenderedOnDemand(c) if artifacts is None else {(a.node, a.tier, a.id): a for a in artifacts}
    problems = []
    expanded = []

    def tpl(text: str, path: tuple, finalize=None, doc: YamlDocument = doc, **ctx) -> str:
        try:
            return render_string(text, finalize, **ctx)
        except (jinja2.TemplateError, KeyError, ValueError, AttributeError) as exc:
            problems.append(doc.problem(path, f"template error: {exc}"))
            return ""

    def holds(condition: str, path: tuple, doc: YamlDocument, **ctx) -> bool:
        return tpl("{{ 'yes' if (" + condition + ") else 'no' }}", path, doc=doc, **ctx) == "yes"

    base = template_context(c, tier, None, variables)
    title, page_title = tpl(rb.title, ("title",), **base), tpl(rb.title, ("title",), prose_value, **base)
    explain, page_explain = tpl(rb.explain, ("explain",), **base), tpl(rb.explain, ("explain",), prose_value, **base)
    for step, source in zip(rb.steps, step_sources(book), strict=True):
        if (steps and step.id not in steps) or (part and part not in step.parts):
            continue
        body, sdoc, at, args = source.body, source.doc, source.path, source.args
        if not all(holds(cond, path, where, **base, args=args) for cond, where, path in source.whens):
            continue
        selector = tpl(body.hosts, at + ("hosts",), doc=sdoc, **base, args=args)
        try:
            hosts = resolve_hosts(c, selector)
        except ValueError as exc:
            problems.append(sdoc.problem(at + ("hosts",), str(exc)))
            continue
        hosts = [h for h in hosts if not only or h in only]
        per_host: dict[str, list[Concrete]] = {}
        handlers: dict[str, dict[str, str]] = {}
        for host in hosts:
            ctx = template_context(c, tier, host, variables) | {"args": args}
            if body.for_each == "model":
                loops = [{"model": m} for m in models_for_host(c, host, tier)]
            elif body.for_each == "systemd_tier":
                loops = [{"each": t} for t in c.tiers if t.manager == "systemd"]
            else:
                loops = [{}]
            actions: list[Concrete] = []
            for extra in loops:
                for j, action in enumerate(body.actions):
                    path = at + ("actions", j)
                    if action.when and not holds(action.when, path + ("when",), sdoc, **ctx, **extra):
                        continue

                    def render(t, p, ctx=ctx, extra=extra, sdoc=sdoc):
                        return tpl(t, p, doc=sdoc, **ctx, **extra)
                    owner = extra["each"].name if "each" in extra else tier.name if tier else None
                    actions += _concrete(action, path, files, host, owner, render, problems, sdoc, c)
            per_host[host] = actions
            notified = {n for a in actions for n in a.notify}
            def in_handler(t, p, ctx=ctx, sdoc=sdoc):
                return tpl(t, p, doc=sdoc, **ctx)
            handlers[host] = {n: _handler(source.handlers[n], in_handler, ("handlers", n)) for n in sorted(notified)}
        step_title, step_page_title = (tpl(body.title, at + ("title",), doc=sdoc, **base, args=args),
                                       tpl(body.title, at + ("title",), prose_value, doc=sdoc, **base, args=args))
        step_explain, step_page_explain = (
            tpl(body.explain, at + ("explain",), doc=sdoc, **base, args=args),
            tpl(body.explain, at + ("explain",), prose_value, doc=sdoc, **base, args=args))
        expanded.append(ExpandedStep(step.id, step_title, step_explain, per_host, handlers, tuple(step.parts),
                                     step_page_title, step_page_explain))
    if problems:
        raise InputError(problems)
    return Expansion(rb.id, title, explain, tier.name if tier else None, expanded, rb.generation, page_title,
                     page_explain)


def _tier(c: Cluster, rb: Runbook, tier_name: str | None) -> Tier | None:
    if rb.scope == "cluster":
        return None
    names = [t.name for t in c.tiers if t.kind in rb.kinds]
    if tier_name not in names:
        raise InputError([Problem((), f"runbook {rb.id} needs a tier of kind {' or '.join(rb.kinds)}: "
                                      f"{', '.join(names) or 'none in this cluster'}")])
    return c.tier(tier_name)


def _handler(handler: Handler, tpl, path: tuple) -> str:
    """A handler's command: its own, or systemd's for the units it names (pure/services.py)."""
    if handler.run is not None:
        return tpl(handler.run, path + ("run",))
    units = tpl(handler.service, path + ("service",)).split() if handler.service else []
    check = tpl(handler.check, path + ("check",)).strip() if handler.check else None
    return services.handler_command(units, handler.state, handler.daemon_reload, check)


def _concrete(action, path, files, host, owner, tpl, problems, doc, c) -> list[Concrete]:
    """An action's files and commands for one host (typed actions decided here, from the cluster's facts)."""
    notify = tuple(action.notify)
    common = {"timeout": action.timeout, "retries": action.retries, "delay": action.delay, "notify": notify}
    if isinstance(action, Upload):
        artifact = files.get((host, owner, action.upload)) or files.get((host, None, action.upload))
        if artifact is None:
            whose = f"tier {owner}'s " if owner else ""
            problems.append(doc.problem(path + ("upload",), f"nothing is rendered for {host} as {whose}"
                                                            f"{action.upload}"))
            return []
        return [PutFile(artifact.path, artifact.text, artifact.mode, notify)]
    if isinstance(action, Run):
        return [Command(tpl(action.run, path + ("run",)).strip(),
                        tpl(action.unless, path + ("unless",)).strip() if action.unless else None,
                        tpl(action.until, path + ("until",)) if action.until else None, action.changed_when, **common,
                        name=tpl(action.name, path + ("name",)) if action.name else None,
                        abort_when=action.abort_when, waits_when=action.waits_when)]
    if isinstance(action, Service):
        units = tpl(action.service, path + ("service",)).split()
        check = tpl(action.check, path + ("check",)).strip() if action.check else None
        try:
            made = services.service_commands(units, action.state, action.enabled, action.daemon_reload,
                                             tpl(action.also_units, path + ("also_units",)).split(), check)
        except ValueError as exc:
            problems.append(doc.problem(path + ("service",), str(exc)))
            return []
        label = tpl(action.name, path + ("name",)) if action.name else None
        return [Command(m.command, m.unless, None, m.changed_when, **common,
                        name=label if m is made[-1] else m.label) for m in made]
    if isinstance(action, Package):
        if action.package not in PACKAGES:
            problems.append(doc.problem(path + ("package",), f"no need {action.package!r} in pure/packages.py "
                                                             f"(there are: {', '.join(sorted(PACKAGES))})"))
            return []
        os = c.node(host).os
        return [Command(install_command(os, action.package), installed_check(os, action.package), **common,
                        name=tpl(action.name, path + ("name",)) if action.name else None)]
    if isinstance(action, KeeperMark):
        tier = _named_tier(tpl(action.keeper_mark, path + ("keeper_mark",)), path + ("keeper_mark",), c, doc,
                           problems)
        if tier is None:
            return []
        command, unless, label = slurmjob.keeper_mark(c, tier, action.state)
        return [Command(command, unless, **common, name=label)]
    if isinstance(action, SubmitJob | WaitJob | WaitGateway):
        job = _job_action(action, path, tpl, problems, doc, c, common)
        return [job] if job else []
    tries = max(action.retries, int(action.timeout / max(action.delay, 0.5)))
    unit = tpl(action.unit, path + ("unit",)).strip() if action.unit else None
    restart_sec = _seconds(tpl(action.restart_sec, path + ("restart_sec",)), path + ("restart_sec",), problems, doc) \
        if action.restart_sec else 0
    watched = {"changed_when": "never", "timeout": max(120, restart_sec + 30), "retries": tries, "delay": action.delay,
               "notify": notify, "abort_when": waits.EXITED}
    if isinstance(action, WaitPort):
        port = tpl(action.wait_port, path + ("wait_port",))
        if unit:
            return [Command(waits.port_or_exited(port, unit, restart_sec), until="listening", **watched, probe=True,
                           name=f"port {port} listening (fails if {unit} keeps exiting)")]
        return [Command(f"ss -Hltn 'sport = :{port}' | grep -q LISTEN && echo listening", until="listening",
                       changed_when="never", timeout=10, retries=tries, delay=action.delay, notify=notify, probe=True)]
    if isinstance(action, WaitHttp):
        url = tpl(action.wait_http, path + ("wait_http",))
        if unit:
            return [Command(waits.http_or_exited(url, action.status, unit, restart_sec), until="healthy", **watched,
                           probe=True,
                           name=f"{url} answers {action.status} (fails if {unit} keeps exiting)")]
        return [Command(f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' {shlex.quote(url)}", until=str(action.status),
                       changed_when="never", timeout=10, retries=tries, delay=action.delay, notify=notify, probe=True)]
    return []


def _job_action(action, path, tpl, problems, doc, c, common) -> Concrete | None:
    """A SLURM tier's job: submit it, wait until it serves, wait until the gateway points at it (slurmjob.py)."""
    field = next(f for f in ("submit_job", "wait_job", "wait_gateway") if hasattr(action, f))
    tier = _named_tier(tpl(getattr(action, field), path + (field,)), path + (field,), c, doc, problems)
    if tier is None:
        return None
    name = tier.name
    if isinstance(action, SubmitJob):
        command, unless, label = slurmjob.submit(c, tier, action.replace)
        return Command(command, unless, None, "always", **common, name=label)
    tries = max(action.retries, int(action.timeout / max(action.delay, 0.5)))
    waiting = {**common, "timeout": 30, "retries": tries, "changed_when": "never"}
    if isinstance(action, WaitJob):
        command, label = slurmjob.serving(c, tier)
        return Command(command, None, "serving:", **waiting, name=label, abort_when=waits.EXITED,
                       waits_when=slurmjob.WAITING)
    if not c.gateway or not any(r.tier == name for r in c.gateway.routes):
        problems.append(doc.problem(path + (field,), f"the gateway has no route to tier {name}"))
        return None
    command, label = slurmjob.gateway_points_at(c, tier)
    return Command(command, None, "gateway:", **waiting, name=label)


def _named_tier(text: str, path: tuple, c: Cluster, doc, problems: list) -> Tier | None:
    name = text.strip()
    if name not in {t.name for t in c.tiers}:
        problems.append(doc.problem(path, f"no tier named {name!r}"))
        return None
    return c.tier(name)


def _seconds(text: str, path: tuple, problems: list, doc) -> int:
    try:
        return int(text.strip())
    except ValueError:
        problems.append(doc.problem(path, f"expected a whole number of seconds, got {text!r}"))
        return 0
