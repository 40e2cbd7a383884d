"""MkDocs hooks: the site's name from the cluster, runbook pages and file downloads added as generated files."""

from mkdocs.structure.files import File

from clusterbook.commands.docsite import current_site


def on_config(config):
    site = current_site()
    config["site_name"] = f"{site.cluster.cluster.name} · clusterbook"
    if site.cluster.cluster.docs_url:
        config["site_url"] = site.cluster.cluster.docs_url
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Runbooks" in entry:
            entry["Runbooks"] = ["runbooks/index.md"] + [{r.title: r.page} for r in site.runbooks if r.page]
    return config


def on_files(files, config):
    site = current_site()
    for r in (r for r in site.runbooks if r.page):
        # generated pages hold shell: keep Jinja (mkdocs-macros) away from them
        files.append(File.generated(config, r.page, content="---\nrender_macros: false\n---\n\n" + r.markdown))
    for name, svg in site.pictures.items():
        files.append(File.generated(config, name, content=svg))
    for a in site.artifacts:
        files.append(File.generated(config, f"files/{a.node}{a.path}", content=a.text))
    return files
