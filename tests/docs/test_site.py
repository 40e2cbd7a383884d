"""The docs site: strict build, values only from the cluster file, shell survives Jinja, nothing loaded from outside."""

import contextlib
import html
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterbook.commands.docs_build import docs
from clusterbook.commands.settings import of as settings_of
from tests.inprocess import run_invoke

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
needs_mermaid = pytest.mark.skipif(not (DOCS / "assets/vendor/mermaid.min.js").exists(),
                                   reason="run ./setup: it installs mermaid.min.js")


def build(cluster: str, out: Path) -> None:
    """The site, built in this process as `invoke docs --cluster CLUSTER --out OUT` builds it; a failed build raises
    with its message (the command line's exit statuses are tests/unit/test_invalid_files.py's)."""
    with contextlib.chdir(ROOT):
        docs(settings_of({}), cluster, str(out))


def text_of(site: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in site.rglob("*.html"))


@needs_mermaid
def test_strict_build_is_quick(beefcake2_site):
    site, seconds = beefcake2_site
    assert seconds < 10
    for page in ("index.html", "architecture/index.html", "capacity/index.html",
                 "runbooks/deploy-slurm-reasoning/index.html", "runbooks/stop-slurm-fast/index.html",
                 "files/slurm-ctl/etc/llama/slurm/llama-reasoning.sbatch"):
        assert (site / page).exists(), page
    # beefcake2 runs its tiers under SLURM: no page for the systemd path, no page for what cannot run here
    for page in ("runbooks/deploy-rpc-reasoning/index.html", "runbooks/restart-reasoning/index.html"):
        assert not (site / page).exists(), page
    assert not list(site.glob("runbooks/*not-available*")), "a 'not available' page was built"


@needs_mermaid
def test_pages_show_computed_values(beefcake2_site):
    html = text_of(beefcake2_site[0])
    shown = re.sub(r"<[^>]+>", "", html)  # the batch script's lines are highlighted, word by word
    assert "--tensor-split 40,40" in shown  # D18: vasp-03's RPC device, then the head (order: test_derived_flags)
    assert "35,584" in html  # largest context that fits, from the planner
    assert "14.8 tok/s" in html  # the Q8_0 bound that refutes seed 000's 15-20 tok/s
    assert "ssh -o ConnectTimeout=10 -J root@100.68.22.98 root@10.0.0.33" in html  # each node through its own jump host


@needs_mermaid
def test_other_cluster_shows_its_values_and_none_of_beefcake2s(ridge_site):
    html = text_of(ridge_site)
    for value in ("ridge", "192.168.50.21", "llama-3.1-70b", "mistral-nemo-12b", "/deep/", "50070", "a1", "L40S"):
        assert value in html, value
    for value in ("beefcake2", "vasp-0", "10.0.0.31", "10.100.0.", "OR1-Behemoth", "V100S", "tailc46cd0",
                  "strand-rust-coder", "50052", "slurm-ctl"):
        assert value not in html, value


@needs_mermaid
def test_shell_with_jinja_syntax_survives(ridge_site):
    page = (ridge_site / "troubleshooting/index.html").read_text()
    assert "{{.State.Status}}" in page
    assert "${#NODES[@]}" in page


@needs_mermaid
def test_runbook_page_equals_the_dry_run(beefcake2_site):
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.runbooks import available, expand

    page = (beefcake2_site[0] / "runbooks/deploy-slurm-reasoning/index.html").read_text()
    plain = re.sub(r"<[^>]+>", "", page).replace("&amp;", "&").replace("&gt;", ">").replace("&lt;", "<") \
        .replace("&quot;", '"').replace("&#39;", "'")
    expansion = expand(available()["deploy-slurm"], load_cluster(ROOT / "cluster.yaml"), "reasoning")
    proc = run_invoke("deploy.reasoning", "--dry", env={"COLUMNS": "400", "INVOKE_CLUSTERBOOK_CLUSTER": "cluster.yaml"})
    for step in expansion.steps:
        for host, actions in step.hosts.items():
            for action in actions:
                shown = getattr(action, "command", None) or action.describe()
                assert shown in plain, f"{host}: {shown} missing from the page"
                assert shown in proc.stdout, f"{host}: {shown} missing from --dry"


def test_every_page_says_when_its_sources_last_changed(beefcake2_site):
    """Issue 32: each page ends with the last change (git) of the files it is made from: the cluster file and its
    Markdown or its runbook."""
    site = beefcake2_site[0]

    def last(path: str) -> str:  # the cluster file with its parts: the newest of them
        paths = [path, "cluster.d"] if path == "cluster.yaml" else [path]
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        commit = subprocess.run(["git", "log", "-1", "--format=%cs, commit %h", "--", *paths], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        return (commit or "never committed") + (", with uncommitted changes" if dirty else "")

    for page, sources in (("api", ["cluster.yaml", "docs/api.md"]),
                          ("runbooks/deploy-slurm-reasoning", ["cluster.yaml", "runbooks/deploy-slurm.yaml"])):
        line = re.search(r"Last changed: (.*?)\.</em>", (site / page / "index.html").read_text()).group(1)
        for source in sources:
            assert f"{source} {last(source)}" in line, (page, line)


def test_the_when_index_leads_every_symptom_status_and_alert_to_its_entry(beefcake2_site):
    """Issue 32: the troubleshooting page opens with what an operator sees (HTTP statuses, alerts, symptoms), each
    linking to an entry that exists on the page."""
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.monitoring import alerts, entries_of

    page = (beefcake2_site[0] / "troubleshooting/index.html").read_text()
    index = page[page.index('id="when"'):]
    index = index[:index.index("</ul>")]
    links = [link for link in re.findall(r'href="#([a-z0-9-]+)"', index) if link != "when"]  # not its ¶
    anchors = set(re.findall(r'<h2 id="([a-z0-9-]+)"', page))
    assert links and set(links) <= anchors
    from clusterbook.pure import troubles

    c = load_cluster(ROOT / "cluster.yaml")
    shown = troubles.entries(c)  # an entry for every tier once per tier
    rows = re.findall(r"<li>(.*?)</li>", index, flags=re.S)
    statuses = {s for t in shown for s in re.findall(r"\b[45]\d\d\b", t.symptom)}
    named = {a["alert"] for a in alerts(c)}
    assert len(rows) == len(statuses) + len(named) + sum(  # each thing seen once (issue 67: a phone's screen or two)
        1 for t in c.troubleshooting if not re.search(r"\b[45]\d\d\b", t.symptom))
    assert set(links) == {t.id for t in shown}  # every entry is reached
    for a in alerts(c):  # each alert of each tier leads to every cause it names, its own tier's
        row = next(r for r in rows if f"<code>{a['alert']}</code>" in r)
        assert set(entries_of(a)) <= set(
            re.findall(r'href="#([a-z0-9-]+)"', row)), (a["alert"], row)
    assert "HTTP 503" in index and "TierDown" in index


def test_the_owner_and_escalation_are_on_the_home_and_troubleshooting_pages(beefcake2_site, tmp_path):
    """Issue 32: the lab file names who answers for it and the escalation, shown as text; beefcake2's file does not
    (nobody has said), and its pages say so instead of inventing a contact."""
    for page in ("index.html", "troubleshooting/index.html"):
        html = (beefcake2_site[0] / page).read_text()
        assert "No owner recorded" in html and 'decisions/#d28"' in html, page  # the decision that accepts it
    site = tmp_path / "lab"
    build("lab/cluster.yaml", site)
    for page in ("index.html", "troubleshooting/index.html"):
        html = (site / page).read_text()
        assert "the person running the lab" in html and "issue tracker" in html, page
        assert "No owner recorded" not in html


def test_the_maintenance_page_follows_each_nodes_manager(beefcake2_site, tmp_path):
    """Issue 32: taking a node out, adding a model, rotating a key and upgrading llama.cpp, with this cluster's own
    nodes and tiers: SLURM drains for hardware work on beefcake2 and stops the tiers pinned there (a restart would
    leave their jobs pending on a drained node), systemd stops and deploys again on the lab. Issue 64: giving a node
    to VASP is not DRAIN (which keeps VASP off too): nothing, or the tier stopped ahead of VASP's job."""
    def shown(site):
        html = (site / "maintenance/index.html").read_text()
        return re.sub(r"<[^>]+>", "", html).replace("&#39;", "'").replace("&amp;", "&")

    page = shown(beefcake2_site[0])
    for node in ("vasp-01", "vasp-02", "vasp-03"):
        assert f"scontrol update NodeName={node} State=DRAIN" in page and f"NodeName={node} State=RESUME" in page
    assert "invoke stop.reasoning" in page and "invoke deploy.reasoning" in page
    assert "invoke restart.reasoning" not in page and "invoke restart.fast" not in page  # both pinned to their nodes
    vasp = page[page.index("Nothing to do: a VASP job preempts"):].split("Take a node out for hardware work")[0]
    assert "DRAIN" in vasp and "scontrol" not in vasp and "invoke stop.fast" in vasp  # DRAIN named only as a don't
    assert "invoke rollback --tier fast" in page and "invoke rollback --tier reasoning" in page
    assert "managed elsewhere" in page
    site = tmp_path / "lab"
    build("lab/cluster.yaml", site)
    page = shown(site)
    assert "scontrol" not in page and "invoke stop.reasoning" in page and "invoke deploy.reasoning" in page
    assert "rm -f /etc/llama/fast.key" in page and "invoke restart.fast" in page  # the lab's fast tier has a key


def test_on_call_and_every_runbook_print_on_one_page(beefcake2_site):
    """Issues 32 and 47: one page holds who answers, every troubleshooting entry, the alert table, maintenance and
    every runbook page of the site, each a section, the commands whole (tabs would hide content on paper) and the
    alerts' links to entries on the same page."""
    site = beefcake2_site[0]
    pages = sorted(p for p in (site / "runbooks").glob("*/index.html"))
    printed = (site / "print/index.html").read_text()
    assert printed.count("<h1") == 1 and printed.count("<h3") >= len(pages) > 5
    assert 'class="tabbed' not in printed
    for page in pages:
        html = page.read_text()
        title = re.search(r"<h1[^>]*>(.*?)<a", html, re.S).group(1).strip()
        assert f">{title}<a" in printed or f">{title}\n" in printed, f"{page.parent.name}: {title} not printed"
        commands = re.findall(r"<code>(.*?)</code>", html, re.S)
        assert all(c in printed for c in commands), page.parent.name
    for other in ("troubleshooting", "maintenance"):
        commands = re.findall(r"<code>(.*?)</code>", (site / other / "index.html").read_text(), re.S)
        assert commands and all(c in printed for c in commands), other
    assert 'id="rpc-worker-down"' in printed and 'href="#rpc-worker-down"' in printed  # the alerts' links
    assert "<strong>TierDown</strong>" in printed
    assert 'href="../print/"' in (site / "runbooks/index.html").read_text()
    assert 'href="../print/"' in (site / "troubleshooting/index.html").read_text()


@needs_mermaid
def test_nothing_loads_from_outside(beefcake2_site):
    """No page loads a script, style, font or image from outside; URLs in text are the cluster's own."""
    from urllib.parse import urlparse

    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.artifacts import upstream_name

    c = load_cluster(ROOT / "cluster.yaml")
    own = {a for n in c.nodes for a in n.addresses.values()} | set(c.gateway.listen) | {c.gateway.tailscale_name}
    own |= {upstream_name(t.name) for t in c.tiers} | {"localhost"}  # commands the runbooks run on a node
    docs_links = {"huggingface.co", "squidfunk.github.io", "github.com", "www.w3.org",  # plain links, not loads
                  "files.pythonhosted.org"}  # where deploy.install fetches the source, as its command shows
    site = beefcake2_site[0]
    loads, unknown = [], []
    for page in site.rglob("*.html"):
        text = page.read_text()
        loads += re.findall(r'<(?:script|link|img|iframe|source)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        for url in re.findall(r"https?://[^\s\"'<>)\\]+", text):
            host = urlparse(url).hostname or ""
            if host not in own | docs_links and not host.startswith("{"):  # {backend}: a script's f-string
                unknown.append((str(page.relative_to(site)), url))
    assert loads == []
    assert unknown == []
    css_js = "\n".join(p.read_text(errors="replace") for p in site.rglob("*.css"))
    assert "fonts.googleapis.com" not in css_js


def test_docs_hold_no_hand_typed_values():
    """docs/ has prose and macro calls; addresses, ports, node and model names come from the cluster files."""
    names = set()
    for f in (ROOT / "cluster.yaml", ROOT / "lab/cluster.yaml", ROOT / "tests/clusters/ridge.yaml"):
        data = yaml.safe_load(f.read_text())
        names |= {n["name"] for n in data["nodes"]} | {m["id"] for m in data["models"]}
        names |= {m["file"] for m in data["models"]}
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        assert not re.search(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", text), f"{page}: an address"
        assert not re.search(r":\d{2,5}\b", text), f"{page}: a port"
        for name in names:
            assert not re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", text), f"{page}: {name}"


@needs_mermaid
def test_the_capacity_page_shows_the_whole_cluster(beefcake2_site):
    site = beefcake2_site[0]
    for page in ("index.html", "capacity/index.html"):  # D18: both tiers serve at once, so no exclusion
        assert "cannot run at the same time" not in (site / page).read_text(), page
    assert "Not at the same time" not in (site / "index.html").read_text()
    capacity = (site / "capacity/index.html").read_text()
    for node in ("vasp-01", "vasp-02", "vasp-03"):
        svg = site / f"capacity-{node}.svg"
        assert f'capacity-{node}.svg"' in capacity and svg.exists(), node
        text = svg.read_text()
        assert "<svg" in text and "<image" not in text and "@import" not in text  # nothing loaded from outside
    assert "fast (router mode)" in (site / "capacity-vasp-02.svg").read_text()  # D18: vasp-02 is the fast tier's
    assert "reasoning (RPC worker)" in (site / "capacity-vasp-03.svg").read_text()


@needs_mermaid
def test_troubleshooting_follows_the_manager(beefcake2_site):
    page = (beefcake2_site[0] / "troubleshooting/index.html").read_text()
    for entry in ("rpc-worker-down", "rpc-port-blocked", "job-not-starting-reasoning", "job-not-starting-fast"):
        assert f'id="{entry}"' in page, entry  # stable anchors, for the alerts; each tier its own (issue 67)
    monitoring = (beefcake2_site[0] / "monitoring/index.html").read_text()
    assert 'href="../troubleshooting/#job-not-starting-reasoning"' in monitoring
    assert not re.search(r"systemctl \w+ llama-", page)  # beefcake2's tiers are SLURM jobs: no unit to restart
    assert "clusterbook-jobs squeue reasoning" in page and "clusterbook-jobs cancel reasoning" in page
    assert "scancel -n" not in page and "squeue -n" not in page  # a job name is anyone's (issue 64)
    assert "scontrol requeue" not in page  # D21: the tiers' jobs are not requeued; the keeper submits them again


def test_the_navigation_lists_the_bring_up_in_the_guides_order_and_every_other_runbook_once():
    """One bring-up order everywhere (operations.bringup): the guide's steps, the runbooks index and the Deploy
    group of the navigation; every other runbook page under Operate, none twice, none left out."""
    from clusterbook.adapters.mkdocs_plugin import fill_runbook_groups
    from clusterbook.commands import settings
    from clusterbook.commands.docs_inputs import build_docs_inputs
    from clusterbook.pure.docpages import bringup_steps

    site = build_docs_inputs(str(ROOT / "cluster.yaml"), settings.read())
    nav = [{"Operators": [{"Deploy runbooks": []}, {"Operate runbooks": []}]}]
    fill_runbook_groups(nav, site)
    deploy, operate = (next(iter(group.values())) for group in nav[0]["Operators"])
    pages = [next(iter(entry.values())) for entry in deploy[1:] + operate[:-1]]
    assert sorted(pages) == sorted(r.page for r in site.runbooks if r.page) and len(pages) == len(set(pages))
    commands = [r.command for r in site.runbooks if r.page and {r.title: r.page} in deploy]
    guide = re.findall(r"^\d+\. `(invoke [^`]+)`", bringup_steps(site.cluster), re.M)
    # the guide ends publishing the site and verifying: Operate runbooks, not deploy steps of the navigation
    assert commands == [c for c in guide if c not in ("invoke verify", "invoke docs.publish")], (commands, guide)
    assert guide.index("invoke deploy.install") < guide.index("invoke models.fetch") < \
        guide.index("invoke stop.legacy") < guide.index("invoke deploy.fast")  # the earlier tiers serve meanwhile


def test_what_the_seeds_knew_is_on_the_site(beefcake2_site):
    """Seed 004's content the first sites lost: preemption priorities, tailnet access control, the troubleshooting
    entries and debug commands, the GPU memory profile; and the warnings that matter, as admonitions."""
    site, _ = beefcake2_site
    text = html.unescape(re.sub(r"<[^>]+>", "", text_of(site)))
    # a command broken for a phone reads as one (fixsteps.broken: the shell removes the breaks)
    text = re.sub(r"'\\\n'|\\\n {0,4}", "", text)
    for expected in ("vasp_priority", "gpu_vasp", "tag:ai-gateway", "group:ai-users", "model not found",
                     "A tier's SLURM job stays PENDING", "takes many seconds; later ones are fast",
                     "GGML_RPC_DEBUG=1", "dmesg -T", "oom|kill|xid",
                     "nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv", "28,708 MiB",
                     "Flash attention is on for reasoning, not yet run on Tesla V100S-PCIE-32GB (compute "
                     "capability 7.0) itself",
                     "measured at full size", "RPC has no authentication",
                     "A lost worker means a full reload", "VASP jobs preempt this tier", "During a recovery"):
        assert expected in text, expected
    assert text_of(site).count('class="admonition') >= 6


def test_the_monitoring_page_lists_every_alert_from_the_targets(beefcake2_site):
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.monitoring import alerts

    site, _ = beefcake2_site
    text = html.unescape(re.sub(r"<[^>]+>", "", (site / "monitoring/index.html").read_text()))
    rules = alerts(load_cluster(ROOT / "cluster.yaml"))
    assert {r["alert"] for r in rules} == {"NodeExporterDown", "TierDown", "EndpointMissing", "TierPending",
                                         "DecodeSlow", "FirstTokenSlow", "GpuMemoryHigh", "GpuXidError",
                                         "TierWaitingForNodes"}
    for rule in rules:
        assert rule["annotations"]["summary"] in text and rule["expr"] in text
    assert "tier reasoning decodes below 8 tok/s (target 15)" in text  # beefcake2's critical and target levels


@needs_mermaid
def test_pages_follow_the_managers_the_cluster_uses(beefcake2_site, ridge_site):
    """beefcake2 runs every tier under SLURM: its guide has no systemd tab and its Files page no systemd unit of a
    tier; a value shown as code shows exactly (no backslash of Markdown's escaping left visible anywhere)."""
    site = beefcake2_site[0]
    guide = (site / "guide/index.html").read_text()
    assert "tabbed-set" not in guide.split('id="how-the-tiers-run"')[1].split('id="access"')[0]
    shown = html.unescape(re.sub(r"<[^>]+>", "", guide))
    assert "systemctl status llama-" not in shown and "/usr/local/sbin/clusterbook-jobs squeue reasoning" in shown
    assert "<code>.clusterbook/known_hosts</code>" in guide
    files = (site / "files/index.html").read_text()
    assert "llama-rpc-reasoning.service" not in files and "llama-reasoning.sbatch" in files
    for root in (site, ridge_site):
        for page in root.rglob("index.html"):
            shown = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<pre.*?</pre>", "", page.read_text(), flags=re.S)))
            assert not re.search(r"\\[._*`{}\[\]()#+!|>-]", shown), (page, re.search(r".{30}\\[._*`{}].{10}", shown))


@needs_mermaid
def test_every_page_shows_its_text_escaped_once_and_no_stray_backticks(beefcake2_site, ridge_site):
    """Issue 47 item 6: no entity escaped twice (&amp;lt;), and no backtick outside code, where a code span was
    escaped as text instead of rendered (the guide showed "SLURM job `llama-fast`")."""
    for site in (beefcake2_site[0], ridge_site):
        for page in site.rglob("*.html"):
            found = re.search(r'<article class="md-content__inner md-typeset">(.*?)</article>', page.read_text(), re.S)
            if not found:
                continue
            body = found.group(1)
            twice = re.search(r".{0,80}&amp;(lt|gt|amp|quot|#).{0,40}", body)
            assert not twice, (page, twice.group(0))
            prose = re.sub(r"<(code|pre|script)[^>]*>.*?</\1>", "", body, flags=re.S)
            assert "`" not in re.sub(r"<[^>]+>", "", prose), (page, re.search(r".{60}`.{60}", prose))


def test_the_monitoring_page_opens_prometheus_and_alertmanager_through_a_tunnel(beefcake2_site):
    """Issue 47 item 1: the person on call finds the UIs where the alerts are (they listen on the monitoring node)."""
    page = (beefcake2_site[0] / "monitoring/index.html").read_text()
    assert "ssh -N -L 9090:localhost:9090 -L 9093:localhost:9093 slurm-ctl" in page
    assert 'href="http://localhost:9090/alerts"' in page and 'href="http://localhost:9093/#/alerts"' in page
