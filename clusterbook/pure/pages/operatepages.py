"""The pages an operator works from: maintenance, on-call index, troubleshooting, decisions,
targets, files and runbooks."""

from __future__ import annotations

import posixpath
import re

from clusterbook.model.hosts import candidate_nodes
from clusterbook.model.recordschema import Decision
from clusterbook.model.schema import HIGHER_IS_BETTER, Cluster
from clusterbook.pure import topology as topo
from clusterbook.pure import troubles
from clusterbook.pure.fixsteps import broken, fix_step_commands
from clusterbook.pure.mdtext import code as code_span
from clusterbook.pure.mdtext import demoted, prose, text
from clusterbook.pure.operations import tier_command
from clusterbook.pure.pages.bringuppages import alert_table
from clusterbook.pure.pages.markdown import METRICS, code, table
from clusterbook.pure.planner import reach
from clusterbook.pure.planner.capacity import TierPlan
from clusterbook.pure.planner.findings import evaluate_claim
from clusterbook.pure.render import monitoring as mon
from clusterbook.pure.render.artifacts import Artifact
from clusterbook.pure.runbooks import Expansion, PutFile


def fix_commands(c: Cluster, trouble) -> str:
    """The entry's read-only diagnosis as one block to paste, then each step that acts under a warning that says
    what it disturbs."""
    looks = [broken(line) for step in trouble.fix if not step.act for line in fix_step_commands(c, trouble, step)]
    out = ["**Diagnose** (read-only, each command returns on its own):\n\n" + code("\n".join(looks))] if looks else []
    for step in (s for s in trouble.fix if s.act):  # lines a phone shows whole, pasting as the same command
        block = code("\n".join(broken(line) for line in fix_step_commands(c, trouble, step)))
        out.append(f'!!! warning "Act: this changes the cluster"\n    It disturbs {text(step.disturbs)}.\n\n'
                   + "\n".join(f"    {line}" if line else "" for line in block.splitlines()) + "\n")
    return "\n".join(out)


def ssh_aliases(c: Cluster) -> str:
    """Once per page that shows `ssh NODE …` lines: where the aliases come from and how to install them."""
    name = f"~/.ssh/clusterbook-{c.cluster.name}"
    return ('!!! tip "ssh NODE on this page"\n    The commands reach each node by its name: a Host entry of the '
            "ssh_config clusterbook writes (user, jump hosts, key, checked host keys, a "
            f"{c.access.connect_timeout} s connect timeout). Once, on the machine you run them from: "
            f"`invoke ssh-config --out {name}`, then make `Include {name}` the first line "
            "of `~/.ssh/config`. Each node's full ssh line is on [Hardware](hardware.md#nodes).\n")


def give_to_other_jobs(c: Cluster, ssh, task) -> list[str]:
    """Giving a node to VASP (a site's other jobs): nothing under SLURM, where its jobs preempt the tiers; to free it
    ahead of them, stop the tiers on it. Never DRAIN: that keeps VASP off the node too."""
    tiers = c.tiers
    slurm = [t for t in tiers if t.manager == "slurm"]
    out = ["## Give a node to VASP { #give-to-vasp }\n"]
    if slurm:
        out.append("Nothing to do: a VASP job preempts the tiers' jobs on the nodes it asks for, and each tier "
                   "waits (`invoke status` says for whom; the alert TierWaitingForNodes is informational) and "
                   "starts again by itself when the VASP job ends. Do not drain the node: DRAIN keeps VASP off it "
                   "too. To give it ahead of the VASP job, stop the tiers that run there, and deploy them after:\n")
    else:
        out.append("The tiers run under systemd here: stop the tiers on the node, and deploy them after:\n")
    for node in (n for n in c.nodes if any(n.name in t.nodes for t in tiers)):
        on = [t for t in tiers if node.name in t.nodes]
        out.append(f"**{text(node.name)}**: " + ", ".join(text(t.name) for t in on) + "\n\n"
                   + code("\n".join(task("stop", t.name) for t in on)) + "When VASP is done with it:\n\n"
                   + code("\n".join(task("deploy", t.name) for t in on)))
    return out


def maintenance(c: Cluster) -> str:
    """The four routine procedures, with this cluster's hosts, tiers and files: a node out for other work, a model
    added, an API key rotated, llama.cpp upgraded."""
    def ssh(host: str, command: str) -> str:
        return topo.ssh_route(c, host).short(command)

    def task(action: str, tier: str) -> str:
        return tier_command(c, action, tier).strip("`")

    out = give_to_other_jobs(c, ssh, task)
    out.append("## Take a node out for hardware work { #drain }\n")
    ctl = c.slurm_controller
    for node in (n for n in c.nodes if any(n.name in t.nodes for t in c.tiers)):
        tiers = [t for t in c.tiers if node.name in t.nodes]
        slurm = ctl is not None and any(t.manager == "slurm" for t in tiers)
        # a tier that may run elsewhere moves (restart); one pinned here stops: its job would wait for the node
        moves = [t for t in tiers if t.manager == "slurm" and len(candidate_nodes(c, t)) > len(t.nodes)]
        drain = [ssh(ctl, f"scontrol update NodeName={node.name} State=DRAIN Reason=maintenance")] if slurm else []
        drain += [task("restart" if t in moves else "stop", t.name) for t in tiers]
        back = [ssh(ctl, f"scontrol update NodeName={node.name} State=RESUME")] if slurm else []
        back += [task("deploy", t.name) for t in tiers if t not in moves]
        how = []
        if slurm:
            how.append("SLURM places no job on it, VASP's neither, as hardware work needs" + (
                "" if c.slurm else " (drain it as a SLURM administrator: this cluster's SLURM is managed elsewhere)"))
        if moves:
            how.append(", ".join(text(t.name) for t in moves) + " starts again on another node of its partition")
        if any(t not in moves for t in tiers):
            how.append(", ".join(text(t.name) for t in tiers if t not in moves) + " stops until the node is back")
        out.append(f"**{text(node.name)}** holds {', '.join(text(t.name) for t in tiers)}: " + "; ".join(how)
                   + ".\n\n" + code("\n".join(drain)) + "When the work is done:\n\n" + code("\n".join(back)))
    out.append("## Add a model { #add-a-model }\n\nAdd it to `models:` in the cluster file (id, file, url, size), "
               "to a tier (`models:` of a router tier, or `model:` of an RPC tier) and, for a task type, to the "
               "router's rules. Then take its checksum from a node that fetched it, check the plan, and let "
               "`apply` deploy it (it runs the tier's scenarios and rolls back a change that fails them):\n\n"
               + code("\n".join(["invoke models.fetch", "invoke models.hash   # paste each sha256 into the file",
                                 "invoke check && invoke plan", "invoke apply"])))
    keyed = [t for t in c.tiers if t.api_key and t.api_key.file]
    out.append("## Rotate an API key { #rotate-a-key }\n")
    if not keyed:
        out.append("No tier reads its API key from a file here: nothing to rotate.\n")
    for t in keyed:
        out.append(f"**{text(t.name)}**: the deploy makes a new random key where the file is missing, and the tier "
                   "reads it when it starts. Hand the new key to the tier's clients (they get 401 until they "
                   "have it):\n\n" + code("\n".join([ssh(t.nodes[0], f"rm -f {t.api_key.file}"),
                                                      task("deploy", t.name), task("restart", t.name),
                                                      ssh(t.nodes[0], f"cat {t.api_key.file}")])))
    out.append("## Upgrade llama.cpp { #upgrade-llama-cpp }\n\nSet `engine.build` (and the sha256 of every patch "
               "in `engine.patches` that still applies) in the cluster file. `apply` builds the new release beside "
               "the running one, links it, restarts each tier and runs its scenarios; a tier that fails them is "
               "rolled back to the build before, which stays on every node:\n\n"
               + code("\n".join(["invoke check", "invoke apply --dry   # what will change, node by node",
                                 "invoke apply"]))
               + "Later, should a tier need the build before:\n\n"
               + code("\n".join(f"invoke rollback --tier {t.name}" for t in c.tiers)))
    return "\n".join(out)


def owner(c: Cluster) -> str:
    """Who answers for the cluster and the escalation after them, or that the cluster file does not say."""
    o = c.owner
    if o is None:
        why = (f" Decision [{text(c.owner_unrecorded)}](decisions.md#{c.owner_unrecorded.lower()}) accepts this for "
               "now." if c.owner_unrecorded else "")
        return (f"!!! warning \"No owner recorded\"\n    The cluster file does not say who answers for "
                f"{text(c.cluster.name)}: add an `owner:` section (name, contact, escalation) and rebuild the site."
                f"{why}\n")
    rows = [["owner", text(o.name), text(o.contact), text(o.when) or "first"]]
    rows += [[f"escalation {i}", text(e.name), text(e.contact), text(e.when) or "–"]
             for i, e in enumerate(o.escalation, 1)]
    return table(["", "who", "how to reach them", "when"], rows)


def when_index(c: Cluster) -> str:
    """What an operator sees, each once with the troubleshooting entries it leads to (a phone shows it in a screen or
    two, issue 67): HTTP statuses with the entries whose symptom names them, each alert with its causes (for each tier),
    then the symptom of every entry no status led to, in the words it is written in (once for all its tiers)."""
    shown = troubles.entries(c)
    ids = {t.id for t in shown}
    seen: dict[str, list[str]] = {}  # what is seen -> its entries, in order
    for status in sorted({s for t in shown for s in re.findall(r"\b([45]\d\d)\b", t.symptom)}):
        seen[f"HTTP {status}"] = [t.id for t in shown if status in re.findall(r"\b([45]\d\d)\b", t.symptom)]
    for rule in mon.alerts(c) if c.monitoring else []:  # an alert of every tier once: its entries name their tier
        what = f"alert {code_span(rule['alert'])}"
        seen.setdefault(what, []).extend(e for e in mon.entries_of(rule) if e in ids and e not in seen.get(what, []))
    led = {e for what, entries in seen.items() if what.startswith("HTTP") for e in entries}
    rows = [[what, " · ".join(f"[{e}](#{e})" for e in entries)] for what, entries in seen.items() if entries]
    for t in c.troubleshooting:  # an entry written for every tier: one row, its tiers' entries in it
        entries = [e for e in troubles.linked(c, t.id, None) if e in ids and e not in led]
        if entries:
            rows.append([text(t.symptom), " · ".join(f"[{e.removeprefix(t.id + '-') if t.each_tier else e}](#{e})"
                                                     for e in entries)])  # an entry of every tier: its tier's name
    return "".join(f"- {what} → {go}\n" for what, go in rows)  # a list: a phone gives each line its whole width


def troubleshooting(c: Cluster) -> str:
    out = []
    for t in troubles.entries(c):
        out.append(f"## {text(t.symptom)} {{ #{t.id} }}\n\n{impact(c, t)}\n**Cause.**\n\n{prose(t.cause)}\n"
                   f"**Fix.**\n\n{fix_commands(c, t)}\n{fixed_and_escalation(c, t)}")  # the id: alerts link to it
    return "\n".join(out) or "No entries.\n"


def printable(c: Cluster, runbooks: list[str]) -> str:
    """On call on paper: who answers, what leads where, every troubleshooting entry, the alerts, maintenance, then
    every runbook page (written for runbooks/, so their links are made the top level's); nothing folded."""
    on_top = [re.sub(r"\]\(\.\./", "](", m) for m in runbooks]
    parts = ["---\nrender_macros: false\n---\n\n# On call and every runbook, on one page\n\nFor printing, or for "
             "reading with no network: the same text and commands as the Troubleshooting, Monitoring, Maintenance "
             "and runbook pages.\n", "## Who answers { #owner }\n", owner(c), "## When you see … { #when }\n",
             when_index(c), ssh_aliases(c), "## Troubleshooting { #troubleshooting }\n",
             demoted(troubleshooting(c)), "## Alerts { #alerts }\n", alert_table(c, ""),
             "## Maintenance { #maintenance }\n", demoted(maintenance(c)),
             "## Runbooks { #runbooks }\n", *(demoted(demoted(m)) for m in on_top)]
    return "\n\n".join(parts) + "\n"


def impact(c: Cluster, trouble) -> str:
    """Who is hurt and how badly: the tier's users (its gateway path), and the alerts that lead to the entry with
    their severity, most severe first."""
    rules = [r for r in (mon.alerts(c) if c.monitoring else []) if trouble.id in mon.entries_of(r)]
    order = {"critical": 0, "warning": 1}
    rules.sort(key=lambda r: order.get(r["labels"].get("severity", ""), 2))
    alerts = ", ".join(dict.fromkeys(f"{code_span(r['alert'])} ({r['labels'].get('severity', 'info')})"
                                     for r in rules))
    who = "the cluster as a whole"
    if trouble.tier:
        route = next((r for r in (c.gateway.routes if c.gateway else []) if r.tier == trouble.tier), None)
        who = f"the users of tier {text(trouble.tier)}" + (f" (the gateway's {code_span(route.path)})" if route
                                                           else "")
    severity = (f"Alerts that lead here: {alerts}." if alerts else
                "No alert leads here: it is seen by the people using it, or by `invoke verify`.")
    return f"**Impact.** It concerns {who}. {severity}\n"


def phone_check(c: Cluster, tier: str | None) -> str:
    """One line that confirms a fix from any tailnet device, a phone too (issue 67): the tier answers /health through
    the gateway, and the published site's status feed lists what still fires. Empty without a gateway."""
    routed = tier and c.gateway and any(r.tier == tier for r in c.gateway.routes) and not c.tier(tier).on_demand
    # (a request to a tier on demand would wake it: its status line tells instead)
    status = (f"{c.gateway.url}/docs/status.json" if c.gateway and c.gateway.url and topo.site_status_url(c) else None)
    parts = []
    if routed:
        parts.append(f"`curl -sf -m 10 {topo.client_url(c, c.tier(tier)).rstrip('/')}/health` prints "
                     "`{\"status\":\"ok\"}`")
    if status:
        parts.append(f"`curl -s -m 10 {status}` lists no alert" + (f" for {text(tier)}" if tier else ""))
    return ("From any tailnet device, a phone too: " + "; ".join(parts) + ". ") if parts else ""


def fixed_and_escalation(c: Cluster, trouble) -> str:
    """How to tell it is fixed (the tier's scenarios, the alerts resolved) and whom to call when it is not."""
    serving = f" shows {text(trouble.tier)} serving and" if trouble.tier else ""
    fixed = (f"**Verify it is fixed.** {phone_check(c, trouble.tier)}From the checkout: `invoke status`{serving} "
             "lists no alert firing" + (f" for {text(trouble.tier)}" if trouble.tier else "")
             + "; `invoke verify` passes.\n")
    o = c.owner
    if o is None:
        why = (f" ([{text(c.owner_unrecorded)}](decisions.md#{c.owner_unrecorded.lower()}))" if c.owner_unrecorded
               else "")
        return fixed + f"\n**Not fixed?** No owner is recorded yet{why}: see [Who answers](#owner).\n"
    chain = [o, *o.escalation]
    names = " → ".join(f"{text(p.name)} ({text(p.contact)})" for p in chain)
    return fixed + f"\n**Not fixed?** Escalate in this order: {names}.\n"


# a quantity a decision states (issue 67 row 5): what the plan or a measurement may have moved since its date
FIGURE = re.compile(r"\d[\d,.]*\s?(?:s|ms|GiB|GB|MiB|tokens|tok/s|%|Gbit/s|GB/s)\b")


def decisions(c: Cluster, plans: dict[str, TierPlan] | None = None) -> str:
    """The decision log, each entry the record of its day; one a later decision replaced says so at its top."""
    by = superseded_by(c)
    out = []
    for d in c.decisions:
        later = by.get(d.id)
        out.append(f"## {d.id}" + (f" (superseded by {later.id})" if later else "") + f" {{ #{d.id.lower()} }}\n")
        if later:
            out.append(f"**Superseded by [{later.id}](#{later.id.lower()})** ({later.date}): "
                       f"{text(later.title)}. What follows is the record of {d.date}; its figures are not today's.\n")
        replaces = ", ".join(f"[{old}](#{old.lower()})" for old in d.supersedes)
        out.append(f"### {text(d.title)}\n\n*{d.date}" + (f" · supersedes {replaces}" if replaces else "")
                   + (f" · sources: {text(', '.join(d.sources))}" if d.sources else "") + "*\n")
        if not later and FIGURE.search(" ".join((d.context, d.decision, d.consequences))):
            out.append(f"*Its figures are those of {d.date}; today's come from the plan and the measurements: "
                       "[Capacity](capacity.md), [Tiers](tiers.md), [Results](results.md).*\n")
        out.append(f"**Context.**\n\n{prose(d.context)}\n**Decision.**\n\n{prose(d.decision)}\n"
                   f"**Consequences.**\n\n{prose(d.consequences)}\n")
        for claim in d.claims:
            v = evaluate_claim(c, claim, plans or {})
            if v.computed is not None:
                out.append(f"> {text(claim.source)} claimed {claim.claimed:,g} {v.unit} for {text(claim.what)}; "
                           f"computed: "
                           f"**{v.computed:,.1f} {v.unit}** ({'impossible' if v.refuted else 'possible'}).\n")
    return "\n".join(out) or "No decisions recorded.\n"


def superseded_by(c: Cluster) -> dict[str, Decision]:
    """Each decision a later one replaced, and the latest that did."""
    return {old: d for d in c.decisions for old in d.supersedes}


def targets(c: Cluster) -> str:
    rows = []
    for t in c.targets:
        for metric, (label, unit) in METRICS.items():
            level = getattr(t, metric)
            if level is None:
                continue
            cmp = "≥" if metric in HIGHER_IS_BETTER else "≤"
            bad = "<" if metric in HIGHER_IS_BETTER else ">"
            rows.append([t.tier, label, f"{cmp} {level.target:g} {unit}" + _lowered(c, t.tier, metric),
                         f"{cmp} {level.acceptable:g} {unit}", f"{bad} {level.critical:g} {unit}"])
    return table(["tier", "metric", "target", "acceptable", "critical"], rows) if rows else "No targets.\n"


def _lowered(c: Cluster, tier_name: str, metric: str) -> str:
    """Where verify judges by the plan's reach, not the file's figure (planner/reach.py), what it asks instead."""
    tier = c.tier(tier_name)
    if metric == "gpu_util_pct":
        judged = [j for (node, i) in reach.gpu_busy_pct(c, tier) if (j := reach.judged_gpu_util(c, tier, node, i))]
    elif metric == "fabric_gbps":
        judged = [j for j in [reach.judged_fabric(c, tier)] if j]
    else:
        return ""
    low = [j for j in judged if j.target < j.asked]
    if not low:
        return ""
    what = "per GPU: the share of a token the plan has each compute" if metric == "gpu_util_pct" else \
        "one stream per worker, at the load rate the plan counts"
    return f" — verify asks ≥ {min(j.target for j in low):.3g}, what the plan reaches ({what})"


def files_index(artifacts: list[Artifact]) -> str:
    rows = [[a.node, f"[`{a.path}`]({download_path(a)})", a.about] for a in artifacts]
    return table(["node", "file (download)", "what"], rows)


# What a generated file may end in and be offered for download under its own name; any other (.md, which MkDocs
# would render through the macros engine as a page, .html or .svg, which a browser would run) gets .txt added.
DOWNLOAD_SUFFIXES = frozenset({"", ".service", ".timer", ".socket", ".conf", ".env", ".yml", ".yaml", ".ini", ".nft",
                               ".json", ".sbatch", ".diff", ".sh", ".py", ".rules", ".txt"})


def download_path(a: Artifact) -> str:
    """Where the site offers a generated file, relative to the files pages."""
    suffix = posixpath.splitext(a.path)[1]
    return f"files/{a.node}{a.path}" + ("" if suffix in DOWNLOAD_SUFFIXES else ".txt")


def files_verbatim(artifacts: list[Artifact]) -> str:
    out = []
    lang = {"unit": "ini", "env": "bash", "script": "bash", "nginx": "nginx", "nftables": "text", "ini": "ini"}
    for a in artifacts:  # each file folded (pymdownx.details): the page lists them all, opened one at a time
        block = code(a.text, lang.get(a.kind, "text"))
        body = "\n".join(("    " + line) if line else "" for line in block.splitlines())
        out.append(f"### {a.node}: `{a.path}`\n\n{a.about} · [download]({download_path(a)})\n\n"
                   f'??? note "{a.path} ({len(a.text.splitlines())} lines)"\n\n{body}\n')
    return "\n".join(out)


def runbook_page(expansion: Expansion) -> str:
    """The same expansion `--dry` prints: every step, every host, the exact commands and files."""
    out = [f"# {expansion.page_title}\n", expansion.page_explain + "\n"]
    if expansion.generation:
        out.append("!!! note \"Generations\"\n    Every file this runbook replaces (and the engine link it moves) is "
                   "kept on its node as a generation (`storage.generations_dir`): `invoke rollback` puts it back, "
                   "and `invoke apply` does so by itself when the scenarios fail after a change. See "
                   "[Changes](../changes.md).\n")
    for i, step in enumerate(expansion.steps, 1):
        out.append(f"## {i}. {step.page_title}\n")
        if step.page_explain:
            out.append(step.page_explain + "\n")
        for host, actions in step.hosts.items():
            lines = []
            for a in actions:
                if isinstance(a, PutFile):
                    lines.append(f"# {a.describe()}")
                else:
                    if a.unless:
                        lines.append(f"# skipped when this succeeds: {a.unless}")
                    if a.until:
                        lines.append(f"# repeated until the output has {a.until!r} ({a.retries + 1} tries, "
                                     f"{a.delay:g} s apart)" + (f"; fails at once when it has {a.abort_when!r}"
                                                                if a.abort_when else ""))
                    lines.append(a.command)
            for name, command in step.handlers.get(host, {}).items():
                lines.append(f"# handler {name}, when a file above changed:\n{command}")
            out.append(f"**{host}**\n\n{code(chr(10).join(lines))}")
    return "\n".join(out)


def observations(c: Cluster) -> str:
    """What the cluster's own earlier records measured (the seeds), each with its source, date and setup."""
    if not c.observations:
        return "None recorded in the cluster file.\n"
    rows = [[text(o.what), f"{o.value:,g} {text(o.unit)}", o.tier or "–", text(o.setup) or "as the file",
             f"{text(o.source)}, {o.date}"] for o in c.observations]
    return table(["what", "measured", "tier", "setup", "source"], rows)


def criteria(c: Cluster) -> str:
    """The earlier records' success criteria, each beside the scenarios that check it now or the decision that
    replaced it."""
    if not c.criteria:
        return "None recorded in the cluster file.\n"
    rows = [[text(k.text), text(k.source),
             "<br>".join(text(s) for s in k.scenarios) or "–",
             f"[{k.decision}](decisions.md#{k.decision.lower()})" if k.decision else "–", text(k.note) or "–"]
            for k in c.criteria]
    return table(["criterion", "source", "checked by (invoke verify)", "decision", "today"], rows)

