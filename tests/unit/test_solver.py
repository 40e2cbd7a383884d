"""The placement solver: beefcake2's tiers can serve at once (reasoning on vasp-01 + vasp-03, fast keeps vasp-02),
a model too large for that says why nothing co-resides, and the change is written into the file with its
comments."""


import yaml

from clusterbook.model.loader import load_cluster_document
from clusterbook.pure.planner import solver
from tests.conftest import whole_text

from ..conftest import CLUSTERS, D30_PROMPTS, seeds_placement


def beefcake2_with(tmp_path, **reasoning):
    """beefcake2 as the seeds placed it (reasoning over all three GPUs, D14), reasoning changed as given."""
    seeds = tmp_path / "cluster.yaml"
    seeds.write_text(seeds_placement(whole_text()))
    cluster, doc = load_cluster_document(seeds)
    tiers = [t.model_copy(update=reasoning) if t.name == "reasoning" else t for t in cluster.tiers]
    return cluster.model_copy(update={"tiers": tiers}), doc


def test_beefcake2_serves_both_tiers_at_once_with_reasoning_on_two_nodes(tmp_path):
    cluster, _ = beefcake2_with(tmp_path)
    best = solver.solve(cluster, best=3)[0]
    assert best.feasible and best.serving_together
    assert best.changes == {"reasoning": {"workers": ["vasp-03"], "tensor_split": {"vasp-01": 40, "vasp-03": 40}}}
    assert best.decode_tps["reasoning"] > solver.judge(cluster, {}).decode_tps["reasoning"]  # one RPC hop less
    assert 0 < best.headroom_gib < 2
    assert solver.better(solver.judge(cluster, {}), best)
    assert best.margin_gib > 0  # room for the planner's measured error beside headroom_pct


def test_beefcake2_as_adopted_is_its_own_best_placement(beefcake2):
    best = solver.solve(beefcake2, best=1)[0]
    assert best.changes == {} and best.serving_together  # D18


def test_when_nothing_co_resides_the_best_says_why(tmp_path):
    cluster, _ = beefcake2_with(tmp_path, model="OR1-Behemoth-Q8_0")  # 77 GB: all three GPUs, at a small context only
    best = solver.solve(cluster, {"reasoning": 4096}, best=1)[0]
    assert best.feasible and not best.serving_together
    assert best.slot_ctx["reasoning"] >= 4096  # each slot keeps the floor
    assert any("vasp-0" in why for why in best.waits), best.waits


def test_the_placement_is_written_into_the_file_with_its_comments(tmp_path):
    cluster, doc = beefcake2_with(tmp_path)
    text = (tmp_path / "cluster.yaml").read_text()
    changes = {"reasoning": {"workers": ["vasp-03"], "tensor_split": {"vasp-01": 40, "vasp-03": 40}},
               "fast": {"ctx_size": 16384}}
    edited = solver.yaml_edit(text, cluster, doc.lines, changes)
    assert edited.count("\n") == text.count("\n")
    assert [ln for ln in text.splitlines() if "#" in ln] == [ln for ln in edited.splitlines() if "#" in ln]
    data = yaml.safe_load(edited)
    reasoning = next(t for t in data["tiers"] if t["name"] == "reasoning")
    fast = next(t for t in data["tiers"] if t["name"] == "fast")
    assert reasoning["workers"] == ["vasp-03"] and reasoning["tensor_split"] == {"vasp-01": 40, "vasp-03": 40}
    assert fast["ctx_size"] == 16384


def test_bad_input_to_the_solver_is_named(tmp_path):
    import pytest

    from clusterbook.commands.cluster import solve_placements
    from clusterbook.model.problems import InputError

    with pytest.raises(InputError, match="--min-ctx 100: a context is 256"):
        solve_placements(str(CLUSTERS["beefcake2"]), False, 100)
    big = tmp_path / "big.yaml"  # without flash attention, 131,072 tokens fit no placement of three V100S
    big.write_text(whole_text().replace("    ctx_size: 32768\n    cache_type_k",
                                                              "    ctx_size: 131072\n    cache_type_k")
                   .replace(D30_PROMPTS, '    flash_attn: "off"\n    batch_size: 256\n    ubatch_size: 256\n'))
    with pytest.raises(InputError, match="no placement fits every tier on its devices: tier reasoning"):
        solve_placements(str(big), False, None)
    solve_placements(str(big), False, 32768)  # with a floor, a smaller context is found


def test_the_guide_deploys_in_the_order_the_plan_allows(beefcake2, beefcake2_seeds):
    from clusterbook.pure.docpages import bringup_steps, deploy_order

    assert [name for name, _ in deploy_order(beefcake2_seeds)] == ["reasoning", "fast"]  # D14: reasoning holds
    assert "waits in the queue while reasoning runs" in dict(deploy_order(beefcake2_seeds))["fast"]
    assert [name for name, _ in deploy_order(beefcake2)] == ["fast", "reasoning"]  # D18: both at once, file order
    steps = bringup_steps(beefcake2)
    for task in ("deploy.install", "models.fetch", "deploy.router", "deploy.gateway", "deploy.monitoring", "verify"):
        assert f"`invoke {task}`" in steps, task


def test_mixed_gpus_are_split_by_their_memory(tmp_path):
    lines = CLUSTERS["mini"].read_text().splitlines()
    n2 = lines.index("  - name: n2")
    assert "memory_mib: 16384" in lines[n2 + 3]
    lines[n2 + 3] = lines[n2 + 3].replace("memory_mib: 16384", "memory_mib: 32768")  # n2's card is twice the size
    path = tmp_path / "mixed.yaml"
    path.write_text("\n".join(lines) + "\n")
    cluster, _ = load_cluster_document(path)
    splits = [p.changes.get("big", {}).get("tensor_split") for p in solver.solve(cluster, best=5)]
    assert {"n1": 40, "n2": 80} in splits or {"n2": 80, "n1": 40} in splits, splits


def test_a_node_with_several_gpus_gets_a_share_per_gpu(tmp_path):
    """Nodes with several GPUs are searched too: each GPU gets its own share, by its memory."""
    text = CLUSTERS["mini"].read_text()
    gpu = '{model: GPU, memory_mib: 16384, compute_capability: "8.0", bandwidth_gbs: 900}'
    assert text.count(f"gpus: [{gpu}]") == 2
    text = text.replace(f"gpus: [{gpu}]", f"gpus: [{gpu.replace('}', ', count: 4}')}]", 1)  # n1 has 4 GPUs
    text = text.replace("tensor_split: {n1: 1, n2: 1}", "tensor_split: {n1: [1, 1, 1, 1], n2: 1}")
    path = tmp_path / "multi.yaml"
    path.write_text(text)
    cluster, _ = load_cluster_document(path)
    assert solver.share_nodes(cluster) == {"n1": [16384 * 2**20] * 4, "n2": [16384 * 2**20]}
    splits = [option["tensor_split"] for option in solver._rpc_options(cluster, cluster.tier("big"))]
    assert {"n1": [40, 40, 40, 40], "n2": 40} in splits and {"n2": 40, "n1": [40, 40, 40, 40]} in splits, splits
    best = solver.solve(cluster, best=1)[0]
    assert best.feasible, best.problems


def test_the_slurm_administrators_asks_come_from_the_file(beefcake2):
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.docpages import slurm_asks

    asks = slurm_asks(beefcake2)
    for line in ("GresTypes=gpu", "NodeName=vasp-01 Gres=gpu:1", "PartitionName=gpu_ai Nodes=vasp-01,vasp-02,vasp-03",
                 "sacctmgr -i modify qos where name=vasp_priority set priority=1000 preempt=ai_opportunistic",
                 # add sets nothing on a QoS that exists (seed 004's does, issue 66): added only where absent
                 "sacctmgr -n show qos ai_opportunistic format=name | grep -q . || sacctmgr -i add qos "
                 "ai_opportunistic",
                 # both jobs are --no-requeue (D21): a preempted one ends within its 30 s grace, no requeue hold
                 "sacctmgr -i modify qos where name=ai_opportunistic set priority=100 gracetime=30 preemptmode=cancel",
                 "RealMemory as `slurmd -C` prints it on vasp-01"):
        assert line in asks, line
    assert "cred_expire" not in asks
    requeued = beefcake2.model_copy(update={"tiers": [t.model_copy(update={"slurm": t.slurm.model_copy(
        update={"requeue": True})}) for t in beefcake2.tiers]})
    assert "AuthInfo=cred_expire=30" in slurm_asks(requeued) and "preemptmode" not in slurm_asks(requeued)
    assert slurm_asks(load_cluster(CLUSTERS["beefcake2"].parent / "lab/cluster-slurm.yaml")) == ""  # its own SLURM


def test_a_cluster_without_gpus_is_solved_over_its_nodes_ram(tmp_path):
    """The SLURM lab with fast asking for 3G of a node's 4 GB: beside reasoning on all three nodes one waits; the
    solver moves reasoning to two nodes (split by RAM, equal here) and fast keeps the third."""
    apart = tmp_path / "cluster-slurm.yaml"
    apart.write_text((CLUSTERS["beefcake2"].parent / "lab/cluster-slurm.yaml").read_text()
                     .replace("mem: 1G,", "mem: 3G,", 1))  # the first: fast's
    cluster, _ = load_cluster_document(apart)
    assert solver.share_nodes(cluster) == {"slab1": [4 * 10**9], "slab2": [4 * 10**9], "slab3": [4 * 10**9]}
    current, best = solver.judge(cluster, {}), solver.solve(cluster, best=1)[0]
    assert not current.serving_together and "slab1's 4 GB of RAM" in current.waits[0]
    assert best.serving_together and best.feasible and solver.better(current, best)
    assert len(best.changes["reasoning"]["workers"]) == 1
    assert set(best.changes["reasoning"]["tensor_split"].values()) == {40}


def test_a_value_written_as_a_block_is_not_half_edited(tmp_path):
    """A changed key whose value spans lines (block style) gets no diff rather than a file with the old lines left
    under the new value."""
    cluster, doc = beefcake2_with(tmp_path)
    text = (tmp_path / "cluster.yaml").read_text()
    index = [t.name for t in cluster.tiers].index("reasoning")
    line = doc.lines[("tiers", index, "tensor_split")]
    key = text.splitlines()[line - 1]
    indent = key[:len(key) - len(key.lstrip())]
    block = indent + "tensor_split:\n" + "".join(f"{indent}  {n}: {v}\n" for n, v in
                                                   cluster.tier("reasoning").tensor_split.items())
    blocky = text.replace(key + "\n", block)
    (tmp_path / "cluster.yaml").write_text(blocky)
    cluster, doc = load_cluster_document(tmp_path / "cluster.yaml")
    assert solver.yaml_edit(blocky, cluster, doc.lines, {"reasoning": {"tensor_split": {"vasp-01": 40}}}) is None


def kv_bound(tmp_path):
    """mini with an 8B-shaped model at 131,072 tokens on two 8 GiB GPUs (compute capability 8.0): the f16 KV cache
    does not fit, a q8_0 one does."""
    text = CLUSTERS["mini"].read_text().replace("memory_mib: 16384", "memory_mib: 8192")
    text = text.replace("architecture: {layers: 4, heads: 4, kv_heads: 2, head_dim: 16, embedding: 64, vocab: 259, "
                        "context: 4096}", "architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128, "
                        "embedding: 4096, vocab: 259, context: 131072}")
    split = "    tensor_split: {n1: 1, n2: 1}\n"
    text = text.replace(split, split + "    ctx_size: 131072\n")
    path = tmp_path / "kv.yaml"
    path.write_text(text)
    return path


def test_kv_cache_types_from_an_allowed_set_make_a_context_fit(tmp_path):
    path = kv_bound(tmp_path)
    cluster, doc = load_cluster_document(path)
    assert not solver.solve(cluster, best=1)[0].feasible  # the tier keeps its f16 cache: nothing fits
    best = solver.solve(cluster, best=1, cache_types=["f16", "q8_0"])[0]
    assert best.feasible
    assert {k: best.changes["big"][k] for k in ("cache_type_k", "cache_type_v", "flash_attn")} == {
        "cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"}  # a quantized V needs flash attention
    text = path.read_text()
    edited = solver.yaml_edit(text, cluster, doc.lines, best.changes)
    assert '    flash_attn: "on"\n' in edited  # quoted: a bare on reads as true
    path.write_text(edited)
    again, _ = load_cluster_document(path)  # the keys the tier did not write are added, and the file loads
    assert again.tier("big").cache_type_v == "q8_0" and again.tier("big").flash_attn == "on"
    assert solver.judge(again, {}).feasible


def test_a_quantized_v_cache_is_offered_only_where_every_gpu_has_flash_attention(beefcake2):
    options = solver._caches(beefcake2, beefcake2.tier("reasoning"), ["f16", "q8_0"])  # V100S: compute capability 7.0
    quantized = [o for o in options if o.get("cache_type_v", "f16") != "f16"]
    assert quantized and all(o["flash_attn"] == "on" for o in quantized)  # Volta has the kernels (D26)
    pascal = beefcake2.model_copy(update={"nodes": [n.model_copy(update={"gpus": [
        g.model_copy(update={"compute_capability": "6.1"}) for g in n.gpus]}) for n in beefcake2.nodes]})
    options = solver._caches(pascal, pascal.tier("reasoning"), ["f16", "q8_0"])
    assert options and all(o.get("cache_type_v", "f16") == "f16" and "flash_attn" not in o for o in options)


def test_a_co_reside_group_kept_apart_is_refused_naming_the_placement_that_keeps_it(tmp_path):
    """planner.co_reside: the seeds' placement (reasoning over all three GPUs) makes fast wait on vasp-02; `invoke
    check` refuses it at the group's line and names the placement the solver finds; the solver ranks the group
    together first."""
    import pytest

    from clusterbook.commands.cluster import checked_cluster
    from clusterbook.model.problems import InputError

    path = tmp_path / "cluster.yaml"
    path.write_text(seeds_placement(whole_text()).replace("  co_reside: []\n",
                                                                              "  co_reside: [[fast, reasoning]]\n"))
    with pytest.raises(InputError) as caught:
        checked_cluster(str(path))
    text = str(caught.value)
    assert "planner.co_reside[0]: tiers fast, reasoning must serve at the same time, but the plan says fast and " \
           "reasoning cannot" in text, text
    assert "a better placement exists (planner.co_reside's groups serve together): reasoning: workers=[vasp-03]" \
           in text, text
    cluster, _ = load_cluster_document(path)
    current, best = solver.judge(cluster, {}), solver.solve(cluster, best=1)[0]
    assert not current.co_resides and best.co_resides and solver.better(current, best)


def test_a_slurm_jobs_mem_and_gres_are_fitted_to_its_plan(tmp_path, beefcake2):
    """--mem: the planned host memory and the margin `invoke check` asks for; --gres: the GPUs the tier uses on its
    busiest node (a router tier: every GPU of its node), the gres type kept."""
    from clusterbook.model.schema import SlurmJob
    from clusterbook.pure.kinds import plan_tier
    from clusterbook.pure.planner.jobask import slurm_need
    from clusterbook.pure.planner.residency import parse_mem

    fast = beefcake2.tier("fast")
    asks = solver.job_requests(beefcake2, fast, plan_tier(beefcake2, fast))
    need = slurm_need(plan_tier(beefcake2, fast))
    assert asks["slurm.gres"] == "gpu:1"
    assert need * 1.1 <= parse_mem(asks["slurm.mem"]) < need * 1.1 + 2**30  # whole GiB above the margin
    text = CLUSTERS["mini"].read_text()
    gpu = '{model: GPU, memory_mib: 16384, compute_capability: "8.0", bandwidth_gbs: 900}'
    text = text.replace(f"gpus: [{gpu}]", f"gpus: [{gpu.replace('}', ', count: 4}')}]", 1)  # n1 has 4 GPUs
    (tmp_path / "multi.yaml").write_text(text.replace("tensor_split: {n1: 1, n2: 1}",
                                                      "tensor_split: {n1: [1, 1, 1, 1], n2: 1}"))
    multi, _ = load_cluster_document(tmp_path / "multi.yaml")
    big = multi.tier("big").model_copy(update={"slurm": SlurmJob(partition="ai", mem="64G", gres="gpu:a100:1")})
    assert solver.job_requests(multi, big, plan_tier(multi, big))["slurm.gres"] == "gpu:a100:4"
    assert solver.job_requests(multi, multi.tier("big"), plan_tier(multi, multi.tier("big"))) == {}  # systemd


def test_a_smaller_mem_that_lets_two_jobs_share_a_node_is_found_and_written_into_the_flow_mapping(tmp_path):
    """The SLURM lab with its jobs asking 3G of a node's 4 GB: one waits wherever they meet; fitting each job's
    --mem to its plan (at least 1G) lets both run where they are, and the diff edits the one-line slurm mapping in
    place (comments kept)."""
    lab = (CLUSTERS["beefcake2"].parent / "lab/cluster-slurm.yaml").read_text().replace("mem: 1G,", "mem: 3G,")
    path = tmp_path / "cluster-slurm.yaml"
    path.write_text(lab)
    cluster, doc = load_cluster_document(path)
    assert not solver.judge(cluster, {}).serving_together
    fitted = next(p for p in solver.solve(cluster, best=50)
                  if p.changes and all(k.startswith("slurm.") for ch in p.changes.values() for k in ch))
    assert fitted.changes == {"fast": {"slurm.mem": "1G"}, "reasoning": {"slurm.mem": "1G"}}, fitted.changes
    assert fitted.serving_together and fitted.feasible
    mem = "2G"
    edited = solver.yaml_edit(lab, cluster, doc.lines, {"fast": {"slurm.mem": mem, "slurm.gres": "gpu:1"},
                                                        "reasoning": {"slurm.qos": "normal"}})
    assert [ln for ln in lab.splitlines() if "#" in ln] == [ln for ln in edited.splitlines() if "#" in ln]
    assert edited.count("\n") == lab.count("\n")
    path.write_text(edited)
    again, _ = load_cluster_document(path)
    assert again.tier("fast").slurm.mem == mem and again.tier("fast").slurm.gres == "gpu:1"  # null replaced
    assert again.tier("reasoning").slurm.qos == "normal"  # a key the mapping did not have, added
    assert again.tier("reasoning").slurm.mem == "3G"


def test_with_a_context_floor_the_solver_gives_each_request_the_floor_and_serves_more_at_once(beefcake2, tmp_path):
    """--min-ctx 8192 on beefcake2: both tiers keep 32,768 tokens of KV cache as four slots of 8,192 (llama-server
    gives each slot ctx_size / parallel), no memory more; without a floor the slots stay as written."""
    assert solver._sized(beefcake2.tier("reasoning"), None) == [{"ctx_size": 32768}]
    best = solver.solve(beefcake2, {"fast": 8192, "reasoning": 8192}, best=1)[0]
    assert best.changes == {"fast": {"parallel": 4}, "reasoning": {"parallel": 4}}, best.changes
    assert best.slot_ctx == {"fast": 8192, "reasoning": 8192}
    assert best.headroom_gib == solver.judge(beefcake2, {}).headroom_gib
    text = CLUSTERS["beefcake2"].read_text()  # the file the solver edits, as its lines are known
    _, doc = load_cluster_document(CLUSTERS["beefcake2"])
    edited = solver.yaml_edit(text, beefcake2, doc.lines, best.changes)
    assert edited.count("    parallel: 4\n") == 2


def test_a_node_whose_preemption_takes_two_tiers_down_is_counted_and_ranked_after_one_that_does_not(tmp_path):
    cluster, _ = beefcake2_with(tmp_path)  # the seeds: reasoning over all three nodes, fast on vasp-02
    assert solver.judge(cluster, {}).preempted_together == ["vasp-02: fast, reasoning"]  # issue 43, row 11
    best = solver.solve(cluster, best=1)[0]
    assert best.preempted_together == [] and best.as_json()["preempted_together"] == []
    alike = dict(changes={}, serving_together=True, feasible=True, targets_met=1, decode_tps={"a": 30.0},
                 recovery_s={"a": 20.0}, headroom_gib=1.0)
    apart = solver.Placement(**alike)
    shared = solver.Placement(**alike, preempted_together=["n1: a, b"])
    faster_but_shared = solver.Placement(**{**alike, "decode_tps": {"a": 40.0}}, preempted_together=["n1: a, b"])
    assert sorted([faster_but_shared, shared, apart], key=lambda p: p.rank) == [apart, faster_but_shared, shared]
    no_qos = cluster.model_copy(update={"slurm_site": None})  # nothing preempts: nothing to count
    assert solver.judge(no_qos, {}).preempted_together == []
