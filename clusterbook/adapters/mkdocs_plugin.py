"""The MkDocs plugin `clusterbook`: mkdocs-macros with one macro per page section, the cluster's name, and the
runbook pages, pictures and file downloads added as generated files, all from one already-computed DocsInputs."""

import json
from pathlib import Path

from mkdocs.config.config_options import Type
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs_macros.plugin import MacrosPlugin

from clusterbook.commands import settings
from clusterbook.commands.docs_inputs import (
    DocsInputs,
    build_docs_inputs,
    build_stamp,
    built_at,
    change_records,
    latest_report,
    result_picture,
)
from clusterbook.pure import apply_history, layout
from clusterbook.pure import docpages as pages
from clusterbook.pure.mdtext import Markdown, active_content, code, escape_value, nav_title, prose, text
from clusterbook.pure.operations import bringup, cluster_command, tier_command


class ClusterbookPlugin(MacrosPlugin):
    """Registered as `clusterbook` (pyproject's mkdocs.plugins entry point); takes mkdocs-macros' options and four
    of its own, which `invoke docs` sets on the configuration it builds with: the cluster file, the build time the
    footer shows, and the reports and runs folders its results come from (empty: as settings.py reads them, and the
    time of the build)."""

    config_scheme = (*MacrosPlugin.config_scheme, *((name, Type(str, default="")) for name in
                                                    ("cluster_file", "built_at", "reports", "runs")))
    site: DocsInputs
    expanded: dict  # each page's Markdown as MkDocs got it, and its front matter (docs_export.py writes them)
    files: object  # every file of the build, the generated ones included

    def on_config(self, config):
        self.expanded = {}
        # computed once per file and runbooks' state (build_docs_inputs): `invoke docs` loaded it already, and
        # docs.serve computes it again when the file or a runbook changed
        read = settings.read()  # what a run of mkdocs itself is configured with (docs.serve passes it on)
        chosen = settings.Settings(self.config["cluster_file"] or read.cluster,
                                   Path(self.config["reports"]) if self.config["reports"] else read.reports,
                                   Path(self.config["runs"]) if self.config["runs"] else read.runs)
        self.site = build_docs_inputs(chosen.cluster, chosen)
        cluster = self.site.cluster
        config["site_name"] = f"{cluster.cluster.name} · clusterbook"
        config["copyright"] = build_stamp(self.site, self.config["built_at"] or built_at())  # which file, when
        if cluster.cluster.docs_url:
            config["site_url"] = cluster.cluster.docs_url
        fill_runbook_groups(config["nav"], self.site)
        config = super().on_config(config)
        self.variables["cluster"] = cluster
        self.variables["site_cluster_file"] = self.site.cluster_file
        self.variables["jobs"] = layout.path(cluster, "jobs")  # clusterbook-jobs: a tier's own jobs on the controller
        self.register_macros(sections(self.site))  # after on_config: straight into the Jinja environment
        self.env.finalize = escape_value  # every other value a page shows from the cluster is text
        return config

    def on_page_markdown(self, markdown, page, config, **kwargs):
        """The macros first (mkdocs-macros), then the line saying when the page's sources last changed."""
        markdown = super().on_page_markdown(markdown, page, config, **kwargs)
        markdown += pages.last_changed(page_sources(self.site, page.file.src_uri), self.site.history)
        self.expanded[page.file.src_uri] = (dict(page.meta), markdown)  # for `invoke docs --markdown`
        return markdown

    def on_page_content(self, html, page, config, files):
        """The last wall: a page whose content would run or load something fails the build, naming it."""
        if found := active_content(html):
            raise PluginError(f"{page.file.src_uri}: active content in the page ({', '.join(found[:5])}): a value "
                              "from the cluster file got past the escaping; nothing was published")
        return html

    def on_files(self, files, config):
        for r in (r for r in self.site.runbooks if r.page):
            # generated pages hold shell: keep Jinja (the macros) away from them
            files.append(File.generated(config, r.page, content=f"---\nrender_macros: false\ntitle: "
                                        f"{json.dumps(nav_title(r.title))}\n---\n\n" + r.markdown))
        files.append(File.generated(config, PRINTABLE, content=printable(self.site)))
        for name, svg in self.site.pictures.items():
            files.append(File.generated(config, name, content=svg))
        for a in self.site.artifacts:
            files.append(File.generated(config, pages.download_path(a), content=a.text))
        self.files = files
        return files


PRINTABLE = "print.md"  # on call and every runbook on one page, for paper (Troubleshooting and the runbooks link it)


def printable(site: DocsInputs) -> str:
    """On call (troubleshooting, alerts, maintenance) and every runbook page of the site as one page, the runbooks
    in the order of the nav (the bring-up's, then the others)."""
    return pages.printable(site.cluster, [r.markdown for r in site.runbooks if r.page])


def page_sources(site: DocsInputs, page: str) -> list[str]:
    """The files a page is made from: the cluster file (with its parts: the newest change of them), and its
    Markdown or its runbook(s)."""
    runbooks = {r.page: r.runbook for r in site.runbooks if r.page}
    if page == PRINTABLE:
        own = sorted({f"runbooks/{name}.yaml" for name in runbooks.values()})
    elif page in runbooks:
        own = [f"runbooks/{runbooks[page]}.yaml"]
    else:
        own = [f"docs/{page}"]
    return [site.cluster_file, *own]


RUNBOOK_GROUPS = ("Deploy runbooks", "Operate runbooks")  # the bring-up's (operations.bringup), then the others


def fill_runbook_groups(nav: list, site: DocsInputs) -> None:
    """Put each runbook page under its nav group, wherever in the nav the group's entry is: the bring-up's runbooks
    in the order they run (as the guide and the index list them), then every other."""
    deploy = {op.runbook for op in bringup(site.cluster)}
    for entry in nav:
        if not isinstance(entry, dict):
            continue
        for key, value in entry.items():
            if key in RUNBOOK_GROUPS:
                first = key == RUNBOOK_GROUPS[0]
                entry[key] = (["runbooks/index.md"] if first else []) + [
                    {nav_title(r.title): r.page}  # the theme shows nav titles raw
                    for r in site.runbooks if r.page and (r.runbook in deploy) == first] + (
                    [] if first else [{"On call and every runbook, to print": PRINTABLE}])
            elif isinstance(value, list):
                fill_runbook_groups(value, site)


def sections(site: DocsInputs) -> dict:
    """The macros docs/*.md call, each a section of a page rendered from the site's cluster (clusterbook's own
    Markdown, whose cluster values are escaped where it is built: see pure/mdtext.py)."""
    return {name: _trusted(macro) for name, macro in _sections(site).items()}


def _trusted(macro):
    def call(*args, **kwargs):
        return Markdown(macro(*args, **kwargs))
    return call


def _sections(site: DocsInputs) -> dict:
    c = site.cluster
    return {
        "prose": prose,
        "code": code,
        "tier_summary": lambda: pages.tier_summary(c),
        "quick_start": lambda: pages.quick_start(c),
        "architecture": lambda: pages.architecture(c),
        "hardware": lambda: pages.hardware(c),
        "models_table": lambda: pages.models(c),
        "tier_flags": lambda: pages.tier_flags(c),
        "preemption": lambda: pages.preemption(c),
        "monitoring": lambda: pages.monitoring(c),
        "capacity": lambda: pages.capacity(c, site.plans),
        "router_table": lambda: pages.router(c),
        "troubleshooting": lambda: pages.troubleshooting(c),
        "when_index": lambda: pages.when_index(c),
        "owner": lambda: pages.owner(c),
        "maintenance": lambda: pages.maintenance(c),
        "ssh_aliases": lambda: pages.ssh_aliases(c),
        "decision_log": lambda: pages.decisions(c, site.plans),
        "targets": lambda: pages.targets(c),
        "api_reference": lambda: pages.api(c),
        "files_index": lambda: pages.files_index(site.artifacts),
        "files_verbatim": lambda: pages.files_verbatim(site.artifacts),
        "runbook_index": lambda: pages.table(["runbook", "command", "page"], [
            [text(r.title), f"`{r.command}`", f"[{r.page.split('/')[-1][:-3]}]({r.page.split('/')[-1]})" if r.page
             else f"not on this cluster: {r.unavailable}"] for r in site.runbooks]),
        "tier_command": lambda action, tier: tier_command(c, action, tier),
        "cluster_command": lambda task: cluster_command(c, task),
        "engine_install": lambda: pages.engine_install(c),
        "bringup_steps": lambda: pages.bringup_steps(c),
        "observations": lambda: pages.observations(c),
        "criteria": lambda: pages.criteria(c),
        "slurm_asks": lambda: pages.slurm_asks(c),
        "prerequisites": lambda: pages.prerequisites(c),
        "tier_managers": lambda: pages.tier_managers(c),
        "latest_report": lambda name: latest_report(name, site),
        "result_picture": lambda name, caption: result_picture(name, site, caption),
        "apply_overview": lambda: apply_history.apply_overview(c),
        "change_log": lambda: apply_history.changes_page(c.cluster.name, change_records(site.settings.runs,
                                                                                    c.cluster.name)),
    }
