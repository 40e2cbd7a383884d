"""mkdocs-macros entry: the site the docs command computed (or $CLUSTERBOOK_CLUSTER's) and one macro per section."""

from clusterbook.commands.docsite import current_site, latest_report
from clusterbook.pure import docpages as pages
from clusterbook.pure.operations import cluster_command, tier_command


def define_env(env):
    site = current_site()
    c = site.cluster
    env.variables["cluster"] = c
    env.variables["site_cluster_file"] = site.cluster_file
    sections = {
        "tier_summary": lambda: pages.tier_summary(c),
        "quick_start": lambda: pages.quick_start(c),
        "architecture": lambda: pages.architecture(c),
        "hardware": lambda: pages.hardware(c),
        "models_table": lambda: pages.models(c),
        "tier_flags": lambda: pages.tier_flags(c),
        "capacity": lambda: pages.capacity(c, site.plans),
        "router_table": lambda: pages.router(c),
        "troubleshooting": lambda: pages.troubleshooting(c),
        "decision_log": lambda: pages.decisions(c, site.plans),
        "targets": lambda: pages.targets(c),
        "api_reference": lambda: pages.api(c),
        "files_index": lambda: pages.files_index(site.artifacts),
        "files_verbatim": lambda: pages.files_verbatim(site.artifacts),
        "runbook_index": lambda: pages.table(["runbook", "command", "page"], [
            [r.title, f"`{r.command}`", f"[{r.page.split('/')[-1][:-3]}]({r.page.split('/')[-1]})" if r.page
             else f"not on this cluster: {r.unavailable}"] for r in site.runbooks]),
        "tier_command": lambda action, tier: tier_command(c, action, tier),
        "cluster_command": lambda task: cluster_command(c, task),
        "latest_report": lambda name: latest_report(name) or f"No {name} report yet (run `invoke {name}`).",
    }
    for name, fn in sections.items():
        env.macro(fn, name)
