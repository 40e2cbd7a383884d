"""Hostile strings in every string field of valid cluster files: refused with FILE:LINE, or rendered without a
single line the templates did not produce (and every script still parses)."""

import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterbook.effects.files import OutsideFolder, inside
from clusterbook.effects.ssh import ssh_config_text
from clusterbook.model.crosscheck import check_cluster
from clusterbook.model.loader import read_patches, validate_document
from clusterbook.model.problems import InputError, Refused
from clusterbook.model.schema import Cluster
from clusterbook.model.yamlsource import parse_yaml
from clusterbook.pure.render.artifacts import Artifact, render_artifacts
from clusterbook.pure.render.escaping import UnsafeValue, guard
from tests.conftest import whole_text

ROOT = Path(__file__).resolve().parents[2]
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: the examples dump a whole cluster file each
CLUSTERS = {name: yaml.safe_load((ROOT / path).read_text())
            for name, path in {"beefcake2": "cluster.yaml", "lab-slurm": "lab/cluster-slurm.yaml",
                               "ridge": "tests/clusters/ridge.yaml"}.items()}
HOSTILE = ["\nExecStartPre=/bin/id", "\nrm -rf /", "; reboot", "$(id)", "`id`", "%n%h", "'\"", "../../../tmp/x",
           "/../../etc/passwd", "\x00", "x" * 5000, "ünïcödé ✓", "} server { listen 80; }", "#", "\r\nX: y",
           "${HOME}", "a b", "*", "\\", "\t", "%x\nProxyCommand=sh", "\n", "\u2028x", "<script>alert(1)</script>",
           "[x](javascript:alert(1))", "{: onmouseover=alert(1) }", "\n````\n", "<img src=x onerror=alert(1)>",
           "%eth0", "\uff12\uff16"]


def string_paths(data, path=()):
    """Every (path, value) of a string leaf."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from string_paths(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from string_paths(value, (*path, i))
    elif isinstance(data, str):
        yield path, data


def replaced(data, path, value):
    if not path:
        return value
    head, *rest = path
    copy = dict(data) if isinstance(data, dict) else list(data)
    copy[head] = replaced(data[head], tuple(rest), value)
    return copy


def render_or_refuse(text: str):
    """The cluster and artifacts of a cluster text, or the InputError/Refused it raises; a bare exception fails
    the test."""
    doc = parse_yaml(text, "hostile.yaml")
    cluster = validate_document(doc, Cluster)
    problems = [doc.problem(p, m) for p, m in check_cluster(cluster) + read_patches(cluster)]
    if problems:
        raise InputError(problems)
    return cluster, render_artifacts(cluster)


def validated(data: dict) -> Cluster:
    """A cluster from data, as the loader makes it (its engine patches read)."""
    cluster = Cluster.model_validate(data)
    assert read_patches(cluster) == []
    return cluster


def ssh_options(config: str) -> list[str]:
    """The option keyword of every line of an ssh_config: what a value would have to add to inject one."""
    return [line.split()[0] for line in config.splitlines() if line.strip()]


CASES = [(name, path) for name, data in CLUSTERS.items() for path, _ in string_paths(data)]
BASELINE = {name: {(a.node, a.path): a for a in render_artifacts(validated(data))}
            for name, data in CLUSTERS.items()}
SSH_BASELINE = {name: ssh_options(ssh_config_text(validated(data), ROOT))
                for name, data in CLUSTERS.items()}


def bash_n(text: str) -> bool:
    return subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True).returncode == 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), hostile=st.sampled_from(HOSTILE), keep=st.booleans())
def test_hostile_value_is_refused_with_a_line_or_changes_no_line_structure(case, hostile, keep):
    name, path = case
    data = CLUSTERS[name]
    original = dict(string_paths(data))[path]
    value = original + hostile if keep else hostile
    text = yaml.dump(replaced(data, path, value), Dumper=DUMPER, allow_unicode=True, sort_keys=False)
    try:
        cluster, artifacts = render_or_refuse(text)
    except InputError as exc:
        assert all(p.line for p in exc.problems), [str(p) for p in exc.problems]
        return
    except Refused:
        return  # a renderer refused to emit it: never written
    assert ssh_options(ssh_config_text(cluster, ROOT)) == SSH_BASELINE[name], "a value changed the ssh_config's lines"
    for node in cluster.nodes:
        assert all(ch not in node.hostname + (node.ssh_host or "") for ch in "\n\r %\t"), node
    baseline = BASELINE[name]
    rendered = {(a.node, a.path): a for a in artifacts}
    assert len(rendered) == len(baseline), "a value changed which files exist"
    for key, artifact in rendered.items():
        assert "\x00" not in artifact.text and "\r" not in artifact.text
        before = baseline.get(key)
        if before is None:
            continue  # the value is part of this file's path (checked by the schema's path types)
        assert artifact.text.count("\n") == before.text.count("\n"), f"{key}: a line was added or removed"
        if artifact.kind == "script" and artifact.text != before.text:  # the baseline's parse (test_validators)
            assert bash_n(artifact.text), f"{key}: no longer parses"


@pytest.mark.parametrize("language", ["shell", "systemd", "env", "nginx", "nft", "ini", "slurm"])
@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "a\x1bb"])
def test_the_second_wall_refuses_line_breaks_and_control_characters_in_every_language(language, value):
    with pytest.raises(UnsafeValue):
        guard(language)(value)


@pytest.mark.parametrize("language,value", [("shell", "a;b"), ("shell", "$(id)"), ("shell", "`id`"),
                                            ("shell", "a'b"), ("systemd", "${HOME}"), ("systemd", 'a"b'),
                                            ("env", "a b"), ("nginx", "a; return 200"), ("nginx", "a}"),
                                            ("nft", "a; flush ruleset"), ("ini", "[section]"), ("slurm", "a#b")])
def test_the_second_wall_refuses_what_the_language_would_interpret(language, value):
    with pytest.raises(UnsafeValue):
        guard(language)(value)


def test_systemd_specifiers_are_escaped():
    assert guard("systemd")("https://x.org/a%20b") == "https://x.org/a%%20b"


@pytest.mark.parametrize("path", ["relative/x", "/a/../../x", "/a/./b", "//a", "/a//b"])
def test_artifacts_refuse_paths_that_are_not_normalized_and_absolute(path):
    with pytest.raises(UnsafeValue):
        Artifact("n1", path, "", "config")


def test_writing_refuses_anything_outside_its_folder(tmp_path):
    out = tmp_path / "out"
    (out / "n1").mkdir(parents=True)
    (out / "n1" / "etc").symlink_to(tmp_path)  # a link planted in the output folder
    with pytest.raises(OutsideFolder):
        inside(out, "n1", "etc/x")
    with pytest.raises(OutsideFolder):
        inside(out, "n1", "../../x")
    assert inside(out, "n1", "usr/x") == (out / "n1" / "usr/x").resolve()


def test_the_docs_refuse_an_output_folder_with_a_link_inside(tmp_path):
    """MkDocs writes through links: `invoke docs --out D` with D/files a link to elsewhere wrote 62 files there
    (issue 44). Built in process, as invoke docs does; nothing is written outside."""
    from clusterbook.commands import settings
    from clusterbook.commands.docs_build import docs

    elsewhere, out = tmp_path / "elsewhere", tmp_path / "site"
    elsewhere.mkdir()
    out.mkdir()
    (out / "files").symlink_to(elsewhere)
    with pytest.raises(OutsideFolder) as refused:
        docs(settings.read(), str(ROOT / "tests/clusters/mini.yaml"), str(out))
    assert "is a symbolic link" in str(refused.value) and not list(elsewhere.iterdir())


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\ufeff", "\u2028"])
def test_invisible_and_direction_changing_characters_are_refused_in_text(char):
    """Trojan Source: a bidirectional override in a description or a title makes a page or a terminal show other
    text than what runs (issue 44)."""
    text = whole_text().replace("source: seeds 000-004", f"source: seeds {char}000-004")
    line = next(i for i, x in enumerate(text.splitlines(), 1) if x.startswith("  source: seeds "))
    with pytest.raises(InputError) as refused:
        validate_document(parse_yaml(text, "x.yaml"), Cluster)
    (problem,) = refused.value.problems  # by the schema, or by the YAML reader before it (U+2028, U+FEFF)
    assert problem.line == line and f"U+{ord(char):04X}" in problem.message
