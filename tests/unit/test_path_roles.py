"""Every path of the cluster file has a role and a scope (clusterbook/model/pathroles.py): a hostile edit of
beefcake2's file that points one at a system file, a world-writable folder, the shared file system for node state,
or an operator's start-up file is refused at its line; the earlier setup is retired by allow-list only."""

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from clusterbook.model.crosscheck import check_cluster
from clusterbook.model.loader import validate_document
from clusterbook.model.pathroles import PATH_ROLES
from clusterbook.model.problems import InputError
from clusterbook.model.schema import Cluster
from clusterbook.model.valuetypes import AbsPath, LocalPath
from clusterbook.model.yamlsource import parse_yaml
from clusterbook.pure.reference import reference_markdown
from tests.conftest import whole_text

ROOT = Path(__file__).resolve().parents[2]
BEEFCAKE2 = whole_text()


def problems_of(text: str) -> list[str]:
    try:
        doc = parse_yaml(text, "edited.yaml")
        cluster = validate_document(doc, Cluster)
    except InputError as e:
        return [str(p) for p in e.problems]
    found = check_cluster(cluster)
    if not found:  # then the plan's findings, as invoke check adds them
        from clusterbook.pure.kinds import plan_cluster
        from clusterbook.pure.planner.findings import plan_findings
        found = plan_findings(cluster, plan_cluster(cluster))
    return [str(doc.problem(p, m)) for p, m in found]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def edit(old: str, new: str) -> str:
    assert BEEFCAKE2.count(old) == 1, old
    return BEEFCAKE2.replace(old, new)


def path_fields_of_schema():
    """(class, field) of every field typed as a path, anywhere in the schema."""
    validators = {m.func for tp in (AbsPath, LocalPath) for m in typing.get_args(tp)[1:] if hasattr(m, "func")}

    def is_path(tp, metadata=()) -> bool:
        return (tp in (AbsPath, LocalPath) or any(getattr(m, "func", None) in validators for m in metadata)
                or any(is_path(a) for a in typing.get_args(tp)))

    def models(tp):
        for a in typing.get_args(tp):
            yield from models(a)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            yield tp

    seen, queue, found = set(), [Cluster], set()
    while queue:
        model = queue.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            if is_path(field.annotation, field.metadata):
                found.add((model.__name__, name))
            queue += list(models(field.annotation))
    return found


def test_every_path_field_of_the_schema_has_a_role_and_a_scope_and_the_reference_shows_it():
    fields = path_fields_of_schema()
    assert fields == set(PATH_ROLES), "a path field without a role (or a role without a field)"
    reference = reference_markdown()
    assert "role: owned and executed; scope: node-local" in reference
    assert "role: operator; scope: operator-side" in reference


def test_beefcake2_the_labs_and_the_fixtures_pass():
    assert problems_of(BEEFCAKE2) == []
    for path in ["lab/cluster.yaml", "lab/cluster-slurm.yaml", *sorted(
            str(p.relative_to(ROOT)) for p in (ROOT / "tests/clusters").glob("*.yaml"))]:
        assert problems_of(whole_text(ROOT / path)) == [], path


FAST = "tiers:\n  - name: fast\n    kind: router\n"
HOSTILE = [  # (old text of cluster.yaml, new text, field named in the message, what the message says)
    # 1: paths clusterbook writes pointed at system files
    (FAST, FAST + "    api_key: {file: /etc/shadow}\n", "tiers[fast].api_key.file", "a folder of its own"),
    (FAST, FAST + "    api_key: {file: /etc/nologin}\n", "tiers[fast].api_key.file", "a folder of its own"),
    ("router:\n  default_model:", "router:\n  script: /etc/profile.d/llama.sh\n  default_model:", "router.script",
     "a folder of its own"),
    ("router:\n  default_model:", "router:\n  script: /usr/local/bin/sbatch\n  default_model:", "router.script",
     "a folder of its own"),
    ("  docs_port: 8082", "  docs_port: 8082\n  upstream_dir: /etc/nginx/conf.d", "gateway.upstream_dir",
     "a folder of its own"),
    ("  docs_port: 8082", "  docs_port: 8082\n  docs_dir: /var/www", "gateway.docs_dir", "a folder of its own"),
    # 3: node-local state on the shared file system
    ("  env_dir: /etc/llama\n", "  env_dir: /etc/llama\n  generations_dir: /cluster/shared/ai/generations\n",
     "storage.generations_dir", "shared file system"),
    ("install_dir: /opt/clusterbook/llama.cpp/bin", "install_dir: /cluster/shared/ai/llama.cpp/bin",
     "engine.install_dir", "shared file system"),
    # 4: world-writable folders trusted
    ("cuda_lib_dir: /usr/local/cuda-12.2/lib64", "cuda_lib_dir: /tmp", "engine.cuda_lib_dir", "/tmp or /var/tmp"),
    ("env_dir: /etc/llama", "env_dir: /tmp/llama", "storage.env_dir", "/tmp or /var/tmp"),
    ("endpoint_dir: /cluster/shared/ai/endpoints", "endpoint_dir: /tmp/ai", "storage.endpoint_dir", "/tmp or /var/tmp"),
    ("install_dir: /opt/clusterbook/llama.cpp/bin",
     "install_dir: /opt/clusterbook/llama.cpp/bin\n  build_dir: /var/tmp/llama", "engine.build_dir",
     "/tmp or /var/tmp"),
    # 5: operator-side files
    ("known_hosts: .clusterbook/known_hosts", "known_hosts: ~/.bashrc_known_hosts", "access.known_hosts",
     "operator-side"),
    ("known_hosts: .clusterbook/known_hosts", "known_hosts: .clusterbook/known_hosts\n  key_file: ~/.bashrc",
     "access.key_file", "operator-side"),
    ("known_hosts: .clusterbook/known_hosts", "known_hosts: /dev/null", "access.known_hosts", "known_hosts"),
    # folders clusterbook writes hold one kind of file each; the earlier setup's models are only read
    ("  models_dir: /scratch/ai/models", "  models_dir: /etc/llama", "storage.models_dir", "storage.env_dir"),
    ("  models_dir: /opt/models  #", "  models_dir: /scratch/ai/models  #", "legacy.models_dir", "only read"),
    ("  models_dir: /opt/models  #", "  models_dir: /etc  #", "legacy.models_dir", "storage.env_dir"),
    ("  models_dir: /opt/models  #", "  models_dir: /  #", "legacy.models_dir", "only read"),
    # folders given to clusterbook: directly in an allowed parent, none of the system's roots, named once
    *[("  env_dir: /etc/llama\n", f"  env_dir: /etc/llama\n  owned_roots: [/opt/fjord, {root}]\n",
       "storage.owned_roots[1]", says) for root, says in [
        ("/etc", "lies directly in"), ("/tmp/llm", "lies directly in"), ("/home/ops/llm", "lies directly in"),
        ("/etc/nginx", "is none of them"), ("/usr/local/bin", "is none of them"), ("/opt/.hidden", "may only contain"),
        ("/cluster/shared", "lies directly in"), ("/cluster", "lies directly in"),
        ("/opt/fjord", "named once")]],
    # the mount itself
    ("  shared_dir: /cluster/shared", "  shared_dir: /etc", "storage.shared_dir", "mount"),
    # 2: stop.legacy
    ("    - {node: vasp-01, path: /etc/systemd/system/llama-head.service}",
     "    - {node: vasp-01, path: /etc/systemd/system/multi-user.target.wants}", "legacy.files[6].path",
     "inference service"),
    ("    - {node: vasp-01, path: /etc/systemd/system/llama-head.service}",
     "    - {node: vasp-01, path: /etc/nginx/nginx.conf}", "legacy.files[6].path", "inference service"),
    ("    - {node: vasp-01, path: /etc/systemd/system/llama-head.service}",
     "    - {node: vasp-01, path: /etc/nginx/sites-enabled}", "legacy.files[6].path", "inference service"),
    ("    - {node: vasp-01, path: /etc/systemd/system/llama-head.service}",
     "    - {node: vasp-01, path: /usr/local/bin/llama-model-selector}", "legacy.files[6].path", "writes itself"),
    ("    - {node: vasp-01, path: /etc/systemd/system/llama-head.service}",
     "    - {node: vasp-01, path: /etc/systemd/system/llama-reasoning.service}", "legacy.files[6].path",
     "writes itself"),
    ("    - {node: vasp-01, path: /etc/systemd/system/llama-head.service}",
     "    - {node: vasp-01, path: /cluster/shared/ai/logs/llama-72b.log}", "legacy.files[6].path", "writes itself"),
    ("slurm_jobs: [llama-14b, llama-72b]", "slurm_jobs: [llama-14b, bash]", "legacy.slurm_jobs[1]", "should match"),
    ("  slurm_user: root  # seed 004: squeue -u root --name=llama-72b\n", "", "legacy.slurm_jobs", "slurm_user"),
]


@pytest.mark.parametrize("old, new, field, says", HOSTILE, ids=[f"{h[2]}:{i}" for i, h in enumerate(HOSTILE)])
def test_a_hostile_path_is_refused_at_its_line_naming_the_field(old, new, field, says):
    text = edit(old, new)
    problems = problems_of(text)
    hits = [p for p in problems if f": {field}: " in p and says in p]
    assert hits, problems
    changed = [line for line in new.splitlines() if line.strip() and line not in old.splitlines()]
    if changed:  # the line of the edit (a removal is named at the list it leaves)
        assert any(f"edited.yaml:{line_of(text, changed[-1].strip())}:" in p for p in hits), hits
    assert all(len(p) < 1000 for p in problems)


def test_legacy_jobs_are_cancelled_by_name_and_owner():
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.runbooks import expand, runbook_named
    c = load_cluster(ROOT / "cluster.yaml")
    step = next(s for s in expand(runbook_named("retire-legacy"), c).steps if s.id == "jobs")
    (action,) = [a for actions in step.hosts.values() for a in actions]
    assert "scancel --name=llama-14b,llama-72b --user=root --partition=gpu_ai" in action.command
    assert "--user=root" in action.unless


def test_a_site_gives_clusterbook_its_own_folders_and_its_file_passes_without_renaming_them():
    text = whole_text(ROOT / "tests/clusters/fjord.yaml")
    assert problems_of(text) == []
    start = text.index("  owned_roots:")
    undeclared = text[:start] + text[text.index("models:", start):]
    refused = problems_of(undeclared)  # the same folders, not given: each path clusterbook writes is refused
    for field in ("engine.install_dir", "engine.build_dir", "storage.models_dir", "storage.log_dir",
                  "storage.endpoint_dir", "storage.env_dir", "storage.generations_dir"):
        assert any(f": {field}: " in p and "storage.owned_roots" in p for p in refused), (field, refused)


def test_a_path_in_a_folder_given_to_clusterbook_still_keeps_its_role():
    text = whole_text(ROOT / "tests/clusters/fjord.yaml").replace("  env_dir: /etc/fjord-llm",
                                                                   "  env_dir: /lustre/llm/logs/env")
    assert any(": storage.env_dir: " in p and "shared file system" in p for p in problems_of(text))
