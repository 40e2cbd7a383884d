"""Facts the cluster file states that must agree with each other and with what clusterbook knows (issue 44): an OS
family from its id, the site's QoS for the tiers, ports SLURM and Alertmanager hold, specific listen addresses,
node names unique in any case, criteria naming real scenarios, levels within what they can mean."""

import pytest

from tests.conftest import whole_text

from .test_path_roles import ROOT, edit, line_of, problems_of

FAST_JOB = "slurm: {partition: gpu_ai, qos: ai_opportunistic, mem: 64G"
SOURCE = "source: {repo: mradermacher/OR1-Behemoth-GGUF, files: [OR1-Behemoth.Q4_K_M.gguf]}"
CASES = [  # (old text of cluster.yaml, new text, field named, what the message says)
    ("    ctx_size: 32768\n    parallel: 1\n    threads: 4", "    parallel: 64\n    ctx_size: 256\n    threads: 4",
     "tiers[fast].parallel", "4 each, fewer than 1,024"),
    (SOURCE, SOURCE.replace("{repo:", '{base_url: "http://huggingface.co", repo:'),
     "models[OR1-Behemoth].source.base_url", "download over https"),
    (SOURCE, SOURCE.replace("{repo:", '{base_url: "https://me:secret@huggingface.co", repo:'),
     "models[OR1-Behemoth].source.base_url", "must not carry credentials"),
    ("recovery_s: {target: 30, acceptable: 60, critical: 360}", "recovery_s: {target: 30, acceptable: 60, "
     "critical: 999999}", "targets[0].recovery_s", "a level is at most 86,400 s"),
    ("os: &rocky {family: el, id: rocky,", "os: &rocky {family: debian, id: rocky,", "nodes[vasp-01].os",
     "not a debian system"),
    ("os: &rocky {family: el, id: rocky,", "os: &rocky {family: el, id: gentoo,", "nodes[vasp-01].os",
     "not one clusterbook knows"),
    (FAST_JOB, FAST_JOB.replace("qos: ai_opportunistic", "qos: vasp_priority"), "tiers[fast].slurm.qos",
     "the QoS of VASP jobs"),
    (FAST_JOB, FAST_JOB.replace("partition: gpu_ai", "partition: gpu_x"), "tiers[fast].slurm.partition",
     "not one of the site's partitions"),
    (FAST_JOB, FAST_JOB.replace("partition: gpu_ai", "partition: gpu_vasp"), "tiers[fast].slurm.partition",
     "runs VASP jobs, which have the GPUs first; the site gives the tiers gpu_ai"),
    ("  tier_partitions: [gpu_ai]", "  tier_partitions: [gpu_ai, gpu_all]", "slurm_site.tier_partitions[1]",
     "not one of the site's partitions"),
    ("    port: 8080\n", "    port: 6818\n", "tiers[fast].port", "slurmd"),
    ("    - {path: /, tier: fast, port: 8080}", "    - {path: /, tier: fast, port: 9094}", "gateway.routes[0].port",
     "Alertmanager's cluster port"),
    ("  listen: [127.0.0.1, 10.0.0.5]", "  listen: [0.0.0.0]", "gateway.listen", "every address"),
    ("  - name: vasp-02\n", "  - name: VASP-01\n", "nodes[VASP-01].name", "unique in any case"),
    ("scenarios: [Every RPC worker is active and listens on its fabric address only]",
     "scenarios: [Every RPC worker is active]", "criteria[2].scenarios[0]", "no acceptance scenario is named"),
    # networks: the firewall admits a whole subnet, so a subnet is a cluster's own and one network's only
    ("    subnet: 10.0.0.0/24\n", "    subnet: 0.0.0.0/0\n", "networks.management.subnet", "not a cluster's own"),
    ("    subnet: 10.100.0.0/24\n", "    subnet: 10.0.0.0/8\n", "networks.fabric.subnet", "overlaps management"),
    # the site's links go to the gateway's own Tailscale name, never another host
    ("  tailscale_name: slurm-ctl.tailc46cd0.ts.net", "  tailscale_name: evil.example.com",
     "gateway.tailscale_name", "NODE.TAILNET.ts.net"),
    # issue 47: a decision supersedes only one logged before it (the log marks that one at its top)
    ("    supersedes: [D14]\n", "    supersedes: [D19]\n", "decisions[D18].supersedes[0]",
     "D19 is not a decision logged before D18"),
    # issue 47: who answers for a production cluster is in the file, or a decision says why not yet
    ("owner_unrecorded: D28  #", "owner_unrecorded: D99  #", "owner_unrecorded", "no decision D99 in decisions"),
    ("owner_unrecorded: D28  #", "owner_unrecorded: D28\nowner: {name: Ana, contact: ana@lab.example}  #",
     "owner_unrecorded", "remove owner_unrecorded"),
]


@pytest.mark.parametrize("old, new, field, says", CASES, ids=[c[2] + f":{i}" for i, c in enumerate(CASES)])
def test_a_fact_the_file_contradicts_is_refused_at_its_line(old, new, field, says):
    text = edit(old, new)
    problems = problems_of(text) + criteria_problems(text)
    hits = [p for p in problems if f": {field}: " in p and says in p]
    assert hits, problems
    assert any(f"edited.yaml:{line_of(text, new.strip().splitlines()[0])}:" in p for p in hits), hits


def criteria_problems(text: str) -> list[str]:
    """What invoke check adds with the scenario names (the model layer does not read the features)."""
    from clusterbook.commands.acceptance import scenarios
    from clusterbook.model.fixlint import criteria_findings
    from clusterbook.model.loader import validate_document
    from clusterbook.model.problems import InputError
    from clusterbook.model.schema import Cluster
    from clusterbook.model.yamlsource import parse_yaml
    doc = parse_yaml(text, "edited.yaml")
    try:
        cluster = validate_document(doc, Cluster)
    except InputError:
        return []
    return [str(doc.problem(p, m)) for p, m in criteria_findings(cluster, {s.name for s in scenarios()})]


def test_an_alert_waits_whole_seconds(tmp_path):
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.artifacts import render_artifacts
    (tmp_path / "patches").symlink_to(ROOT / "patches")
    (tmp_path / "cluster.yaml").write_text(edit("recovery_s: {target: 30, acceptable: 60, critical: 360}",
                                                "recovery_s: {target: 30, acceptable: 60, critical: 86399.5}"))
    rules = [a.text for a in render_artifacts(load_cluster(tmp_path / "cluster.yaml")) if "alert: TierDown" in a.text]
    assert rules and all("for: 86400s" in r and "e+" not in r for r in rules)


def test_a_split_that_leaves_a_worker_no_layer_is_refused():
    """1,000,000:1:1 over the seeds' three GPUs: the last worker holds nothing and still costs a hop per token."""
    from ..conftest import seeds_placement
    text = seeds_placement(whole_text()).replace(
        "tensor_split: {vasp-01: 26, vasp-02: 27, vasp-03: 27}",
        "tensor_split: {vasp-01: 1000000, vasp-02: 1, vasp-03: 1}")
    problems = problems_of(text)
    assert any(": tiers[reasoning].tensor_split: " in p and "RPC1 on vasp-03 no layer" in p for p in problems), problems


def test_a_production_file_without_an_owner_is_refused_unless_a_decision_accepts_it():
    text = edit("owner_unrecorded: D28  # who answers for beefcake2 is in no seed: the first thing to fill in\n", "")
    assert any(": owner: a production file names who answers for it" in p for p in problems_of(text)), \
        problems_of(text)
