"""What each task does, in terms of the layers: load, plan, render, validate, report. Tasks call these."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from .console import Failed, console
from .effects.files import write_tree
from .effects.validators import MissingTools, validate
from .loader import load_cluster
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
    cluster = load_cluster(cluster_file)
    console.print(f"[green]ok[/] {cluster_file}: schema and cross-field rules")
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
