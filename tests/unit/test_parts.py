"""A cluster file's parts (issue 68 row 3): cluster.yaml keeps the settings and names the files that hold its
decisions, records and on-call entries; every problem in a part names that file and line."""

import os
import shutil
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.model.problems import InputError

ROOT = Path(__file__).resolve().parents[2]


def copy(tmp_path: Path) -> Path:
    """beefcake2's cluster file and its parts, copied (each test edits its own)."""
    shutil.copy(ROOT / "cluster.yaml", tmp_path / "cluster.yaml")
    shutil.copytree(ROOT / "cluster.d", tmp_path / "cluster.d")
    return tmp_path / "cluster.yaml"


def problems(path: Path) -> str:
    with pytest.raises(InputError) as err:
        load_cluster(path)
    return str(err.value)


def test_the_settings_read_in_minutes_and_the_records_are_in_their_parts():
    lines = (ROOT / "cluster.yaml").read_text().count("\n")
    assert lines <= 400, f"cluster.yaml has {lines} lines"
    c = load_cluster(ROOT / "cluster.yaml")
    assert len(c.decisions) >= 36 and c.troubleshooting and c.rehearsals and c.criteria and c.observations
    assert c.parts == ["cluster.d/decisions.yaml", "cluster.d/records.yaml", "cluster.d/troubleshooting.yaml"]


def test_a_problem_in_a_part_names_the_parts_file_and_line(tmp_path):
    path = copy(tmp_path)
    part = tmp_path / "cluster.d/decisions.yaml"
    text = part.read_text()
    part.write_text(text.replace("    date: ", "    date: someday-", 1))
    line = text[:text.index("    date: ")].count("\n") + 1
    said = problems(path)
    assert f"{part}:{line}: decisions[D01].date" in said, said


@pytest.mark.parametrize("edit, says", [
    (lambda d: (d / "cluster.d/records.yaml").unlink(), "records.yaml: cannot read file"),
    (lambda d: (d / "cluster.d/records.yaml").write_text("nodes: []\n"), "a part holds only decisions"),
    (lambda d: (d / "cluster.d/records.yaml").write_text((d / "cluster.d/troubleshooting.yaml").read_text()),
     "troubleshooting is also in"),
])
def test_a_part_that_is_missing_or_holds_what_it_may_not_is_refused(tmp_path, edit, says):
    path = copy(tmp_path)
    edit(tmp_path)
    assert says in problems(path)


@pytest.mark.parametrize("name", ["../cluster.d/records.yaml", "/etc/passwd", "cluster.d/records.yml",
                                  ".hidden.yaml", "a/b/c/d/e.yaml"])
def test_a_part_outside_the_files_folder_or_not_yaml_is_refused_before_it_is_read(tmp_path, name):
    path = copy(tmp_path)
    text = path.read_text().replace("cluster.d/records.yaml", name)
    path.write_text(text)
    said = problems(path)
    line = text[:text.index("\nparts:") + 1].count("\n") + 1
    assert f"{path}:{line}: parts[1]" in said and "no '..'" in said, said


def test_an_edited_part_is_read_again(tmp_path):
    path = copy(tmp_path)
    first = load_cluster(path)
    part = tmp_path / "cluster.d/decisions.yaml"
    part.write_text(part.read_text().replace("  - id: D01\n", "  - id: D01\n", 1) + "\n# edited\n")
    os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 10**9))
    assert load_cluster(path) is not first
    assert load_cluster(path) is load_cluster(path)  # unchanged since: the loaded one


def test_the_patch_series_is_written_once_and_named_by_every_cluster_file_that_uses_it():
    files = [ROOT / "cluster.yaml", ROOT / "lab/cluster.yaml", ROOT / "lab/cluster-slurm.yaml"]
    assert all("  patch_series: patches/series.yaml" in f.read_text() for f in files)
    assert not any("sha256: 25dbe42e" in f.read_text() for f in files)  # no copy of the list (P4's sum)
    series = [load_cluster(f).engine.patches for f in files]
    assert series[0] and series[0] == series[1] == series[2]


def test_a_problem_in_the_series_names_its_file_and_line(tmp_path, monkeypatch):
    from clusterbook.model import loader

    (tmp_path / "patches").mkdir()
    for p in (ROOT / "patches").glob("*.patch"):
        shutil.copy(p, tmp_path / "patches" / p.name)
    text = (ROOT / "patches/series.yaml").read_text()
    digest = text.split("sha256: ", 1)[1][:64]
    (tmp_path / "patches/series.yaml").write_text(text.replace(digest, "f" * 64, 1))
    monkeypatch.setattr(loader, "REPOSITORY", tmp_path)  # patches' files are relative to the repository
    line = text[:text.index("sha256: ")].count("\n") + 1
    said = problems(copy(tmp_path))
    assert f"{tmp_path / 'patches/series.yaml'}:{line}: engine.patches[0].sha256" in said, said


@pytest.mark.parametrize("edit, says", [
    ("  patch_series: patches/series.yaml", "give the patches or a patch_series, not both"),
    ("  patch_series: ../series.yaml", "expected a .yaml file under patches/"),
])
def test_a_series_beside_a_list_or_outside_patches_is_refused(tmp_path, edit, says):
    path = copy(tmp_path)
    text = path.read_text()
    new = edit if "../" in edit else edit + "\n  patches: []"
    path.write_text(text.replace("  patch_series: patches/series.yaml", new, 1))
    assert says in problems(path)


def test_a_part_that_links_out_of_the_files_folder_is_refused(tmp_path):
    path = copy(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text((tmp_path / "cluster.d/records.yaml").read_text())
    (tmp_path / "cluster.d/records.yaml").unlink()
    (tmp_path / "cluster.d/records.yaml").symlink_to(outside)
    assert "leads out of" in problems(path)
