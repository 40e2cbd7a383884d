"""The planner's load time against what was measured (2 x H100, b11434, loopback TCP), and the recovery check."""

import json
import math
from pathlib import Path

import pytest
import yaml

from clusterbook.model.loader import load_cluster
from clusterbook.model.schema import Cluster
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.planner.findings import plan_findings
from clusterbook.pure.planner.loadtime import hold_s, new_job_hold_s, predict_load
from clusterbook.pure.render.artifacts import render_artifacts
from tests.conftest import whole_text

from ..conftest import seeds_placement

ROOT = Path(__file__).resolve().parents[2]
H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "compute_capability": "9.0", "bandwidth_gbs": 3350}


def h100_pair(split: dict, restart_sec: int = 10) -> Cluster:
    """The measured setup: an 8B-shaped Q8_0 model (8.54 GB) on a head GPU and one RPC worker GPU."""
    node = {"gpus": [H100], "cpu_cores": 32, "ram_gb": 512}
    return Cluster.model_validate({
        "cluster": {"name": "h100", "description": "measured"}, "access": {"user": "root"},
        "networks": {"lo": {"role": "management", "link": "bridge", "subnet": "10.9.0.0/24", "bandwidth_gbps": 100}},
        "nodes": [{"name": "g0", "hostname": "g0", "addresses": {"lo": "10.9.0.1"}, **node},
                  {"name": "g1", "hostname": "g1", "addresses": {"lo": "10.9.0.2"}, **node}],
        "engine": {"build": 11434, "install_dir": "/opt/llama"}, "storage": {"models_dir": "/models"},
        "models": [{"id": "m8b", "file": "m8b.gguf", "size_bytes": 8_540_000_000, "quantization": "Q8_0",
                    "params_b": 8.03,
                    "architecture": {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "embedding": 4096,
                                     "feed_forward": 14336, "vocab": 128256, "context": 8192}}],
        "tiers": [{"name": "t", "kind": "rpc", "model": "m8b", "head": "g0", "workers": ["g1"], "port": 8081,
                   "tensor_split": split, "ctx_size": 4096,
                   "systemd": {"restart_sec": restart_sec}, "worker_systemd": {"restart_sec": 5}}]})


THREE_B = {"layers": 28, "heads": 24, "kv_heads": 8, "head_dim": 128, "embedding": 3072, "feed_forward": 8192,
           "vocab": 128256, "context": 8192}


@pytest.mark.parametrize("split,size,architecture,measured_s", [
    ({"g0": 1, "g1": 1}, 8_540_000_000, None, 10.8),  # issue 21: 10.6-11.0 s
    ({"g0": 3, "g1": 1}, 8_540_000_000, None, 7.6),  # issue 21: a quarter through RPC
    ({"g0": 1, "g1": 1}, 8_536_687_296, None, 12.46),  # benchmarks/results/h100x2-load-time, 2 runs
    ({"g0": 1, "g1": 1}, 3_836_439_104, THREE_B, 3.69),  # the same run, a 3B-shaped model
])
def test_predicted_load_is_within_25_percent_of_the_measured_one(split, size, architecture, measured_s):
    """One rate for both model sizes and both splits, measured on 2 x H100 (b11434, loopback TCP)."""
    c = h100_pair(split)
    model = c.models[0].model_copy(update={"size_bytes": size, "params_b": None} | (
        {"architecture": c.models[0].architecture.model_copy(update=architecture)} if architecture else {}))
    c = c.model_copy(update={"models": [model]})
    load = predict_load(c, c.tiers[0], plan_cluster(c)["t"])
    assert load.load_s == pytest.approx(measured_s, rel=0.25), load


def test_recovery_adds_the_longer_restart_delay():
    c = h100_pair({"g0": 1, "g1": 1}, restart_sec=10)
    load = predict_load(c, c.tiers[0], plan_cluster(c)["t"])
    assert load.restart_s == 10 and load.restart_kind == "restart"
    assert load.recovery_s == pytest.approx(10 + load.load_s)


def test_a_slow_network_caps_the_rpc_rate():
    c = h100_pair({"g0": 1, "g1": 1})
    slow = c.model_copy(update={"networks": {"lo": c.networks["lo"].model_copy(update={"bandwidth_gbps": 1})}})
    assert predict_load(slow, slow.tiers[0], plan_cluster(slow)["t"]).rpc_rate_gbs == 0.125


def test_a_recovery_target_the_prediction_cannot_meet_is_refused():
    data = yaml.safe_load(seeds_placement(whole_text()))  # the figures of D15
    data["targets"][0]["recovery_s"] = {"target": 30, "acceptable": 60, "critical": 120}  # the seeds' target
    reasoning = next(t for t in data["tiers"] if t["name"] == "reasoning")
    reasoning["keep_weights_s"] = 0  # before D31
    restarted = Cluster.model_validate(data)
    # D15's job script: a dead step ended the job, and SLURM requeued it
    next(t for t in data["tiers"] if t["name"] == "reasoning")["slurm"].update(step_restarts=0, requeue=True)
    patched = Cluster.model_validate(data)
    reasoning["keep_weights_s"] = 60  # issue 48: the other worker keeps its share
    kept = Cluster.model_validate(data)
    reasoning["keep_weights_s"] = 0
    data["engine"]["patches"] = []  # the build D15 computed with
    c = Cluster.model_validate(data)
    found = [m for _, m in plan_findings(c, plan_cluster(c)) if "after a worker crash" in m]
    assert found == ["tier reasoning cannot come back within 30 s after a worker crash: predicted 239 s (SLURM "
                     "requeue 155 s + the model file locked in 2.4 s + its own share 15.1 GB in 2.7 s + the workers' "
                     "31.5 GB through RPC at 0.4 GB/s in 79 s)"]
    # issue 31: with the RPC fast-load patch the workers' share takes 12 s, not 79; the requeue is what remains
    found = [m for _, m in plan_findings(patched, plan_cluster(patched)) if "after a worker crash" in m]
    assert found == ["tier reasoning cannot come back within 30 s after a worker crash: predicted 172 s (SLURM "
                     "requeue 155 s + the model file locked in 2.4 s + its own share 15.1 GB in 2.7 s + the workers' "
                     "31.5 GB through RPC at 2.7 GB/s in 12 s)"]
    # issue 48: workers that keep weights keep nothing when the job ends (its requeue takes them with it)
    assert [m for _, m in plan_findings(kept, plan_cluster(kept)) if "after a worker crash" in m] == found
    # and with the job script's own restart of the ended steps the requeue goes too: the seeds' 30 s is met
    assert not [m for _, m in plan_findings(restarted, plan_cluster(restarted)) if "after a worker crash" in m]
    load = predict_load(restarted, restarted.tier("reasoning"), plan_cluster(restarted)["reasoning"])
    assert load.restart_kind == "step restart in the job" and load.recovery_s <= 30, load
    # ... and where the steps restart, the other worker keeps its share: it is hashed, and only the crashed
    # worker's is sent again (a 10 s target shows the parts)
    data["targets"][0]["recovery_s"] = {"target": 10, "acceptable": 60, "critical": 120}
    reasoning["slurm"].update(step_restarts=3, requeue=False)
    reasoning["keep_weights_s"] = 60
    data["engine"]["patches"] = kept.engine.model_dump(mode="json")["patches"]
    steps = Cluster.model_validate(data)
    found = [m for _, m in plan_findings(steps, plan_cluster(steps)) if "after a worker crash" in m]
    assert found == ["tier reasoning cannot come back within 10 s after a worker crash: predicted 14 s (step restart "
                     "in the job 2 s + the model file locked in 2.4 s + its own share 15.1 GB in 2.7 s + the workers' "
                     "kept shares hashed in 0.9 s + the crashed worker's share again at 2.7 GB/s in 6 s)"]
    # without P10 the other workers first read back and hash what they were sent without a hash
    data["engine"]["patches"] = [x for x in data["engine"]["patches"] if x.get("speeds_up") != "hash_on_arrival"]
    read_back = Cluster.model_validate(data)
    found = [m for _, m in plan_findings(read_back, plan_cluster(read_back)) if "after a worker crash" in m]
    assert found == ["tier reasoning cannot come back within 10 s after a worker crash: predicted 15 s (the other "
                     "workers' read-back of their shares 2.3 s + the model file locked in 2.4 s + its own share 15.1 "
                     "GB in 2.7 s + the workers' kept shares hashed in 0.9 s + the crashed worker's share again at "
                     "2.7 GB/s in 6 s)"]
    # a preempted job ends (D21): the keeper submits it again within 5 s (D22); the job's end ran a scheduling pass,
    # so SLURM starts no batch job for batch_sched_delay (3 s); it starts in 3 s; no requeue hold
    assert load.new_job_kind == "keeper resubmission"
    assert load.new_job_recovery_s == pytest.approx(5 + 3 + 3 + load.load_s)


def test_the_requeue_hold_comes_from_slurm_conf_as_configured_or_declared():
    data = yaml.safe_load(whole_text())
    for tier in data["tiers"]:  # D21's jobs are not requeued: count the hold for jobs that are
        tier["slurm"]["requeue"] = True
    c = Cluster.model_validate(data)
    assert predict_load(c, c.tier("reasoning"), plan_cluster(c)["reasoning"]).new_job_kind == "SLURM requeue"
    assert c.slurm_requeue_hold_s == 120  # SLURM's default: beefcake2's slurm.conf is managed elsewhere
    before = predict_load(c, c.tier("reasoning"), plan_cluster(c)["reasoning"])
    data["planner"] = {**data.get("planner", {}), "site_requeue_hold_s": 30}  # decision D16, once granted
    c = Cluster.model_validate(data)
    after = predict_load(c, c.tier("reasoning"), plan_cluster(c)["reasoning"])
    assert after.new_job_recovery_s == pytest.approx(before.new_job_recovery_s - 90)
    assert after.recovery_s == before.recovery_s  # a worker crash restarts steps inside the job: no requeue
    lab = load_cluster(ROOT / "lab/cluster-slurm.yaml")
    assert lab.slurm_requeue_hold_s == 30
    conf = next(a for a in render_artifacts(lab) if a.path == "/etc/slurm/slurm.conf")
    assert "\nAuthInfo=cred_expire=30\n" in conf.text


def test_the_batch_delay_comes_from_the_sites_slurm_conf_as_declared(tmp_path):
    from clusterbook.commands.cluster import checked_cluster
    from clusterbook.model.problems import InputError
    from clusterbook.pure.planner.loadtime import cold_start_at_most_s, cold_start_s

    data = yaml.safe_load(whole_text())
    before = Cluster.model_validate(data)
    assert before.slurm_batch_sched_delay_s == 3  # SLURM's default: beefcake2's slurm.conf is managed elsewhere
    data["planner"] = {**data.get("planner", {}), "site_batch_sched_delay_s": 1}
    after = Cluster.model_validate(data)
    tier = "reasoning"
    old, new = (predict_load(c, c.tier(tier), plan_cluster(c)[tier]) for c in (before, after))
    assert new.new_job_recovery_s == pytest.approx(old.new_job_recovery_s - 2)  # a keeper resubmission waits less
    plan = plan_cluster(after)[tier]
    assert cold_start_at_most_s(after, after.tier(tier), plan) == pytest.approx(
        cold_start_s(after, after.tier(tier), plan) + 1)
    # where clusterbook writes slurm.conf (the lab), a declaration of the site's would be ignored: refused, at its line
    text = (ROOT / "lab/cluster-slurm.yaml").read_text().replace(
        "  slurm_submit_start_s: 2.45\n", "  slurm_submit_start_s: 2.45\n  site_batch_sched_delay_s: 1\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    line = text.splitlines().index("  site_batch_sched_delay_s: 1") + 1
    with pytest.raises(InputError) as err:
        checked_cluster(str(path))
    assert any(str(p).startswith(f"{path}:{line}: planner.site_batch_sched_delay_s: declares the site's slurm.conf, "
                                 "but clusterbook configures SLURM here") for p in err.value.problems), \
        [str(p) for p in err.value.problems]


def test_the_api_page_tells_clients_how_long_a_recovery_lasts():
    from clusterbook.pure.docpages import api
    c = load_cluster(ROOT / "cluster.yaml")
    expected = math.ceil(predict_load(c, c.tier("reasoning"), plan_cluster(c)["reasoning"]).recovery_s)
    page = api(c)
    load = predict_load(c, c.tier("reasoning"), plan_cluster(c)["reasoning"])
    assert (f"After a worker crash the tier is gone for about {expected} s (after a crash of the head alone about "
            f"{math.ceil(load.head_recovery_s)} s: its workers keep their shares) (the capacity plan's prediction); "
            "after a preemption it waits until SLURM gives its GPUs back, and is back about "
            f"{math.ceil(load.new_job_recovery_s)} s after that") in page
    assert f"`503` with `Retry-After: {expected}`" in page
    assert page.count('!!! note "During a recovery"') == 2  # both of beefcake2's tiers are SLURM jobs


def test_the_gateway_holds_a_down_tiers_requests_then_answers_a_json_503_with_the_predicted_retry_after():
    c = load_cluster(ROOT / "cluster.yaml")
    conf = next(a for a in render_artifacts(c) if a.path.endswith("/clusterbook.conf")).text
    for tier in c.tiers:
        seconds = math.ceil(predict_load(c, tier, plan_cluster(c)[tier.name]).recovery_s)
        assert f"add_header Retry-After {seconds} always;" in conf
        # said apart from the hold's own 503 (the hold did not answer): the first words reach a client's log
        assert (f'"message": "without the hold: tier {tier.name} is starting or recovering; predicted back within '
                f'{seconds} s"') in conf
    ports = 2 if c.gateway.path_port else 1  # a server per route's port, and one more by path
    through_hold = [r for r in c.gateway.routes if not c.tier(r.tier).on_demand]  # every request (issue 46)
    woken = [r for r in c.gateway.routes if c.tier(r.tier).on_demand]  # held when the woken tier fails
    assert conf.count("error_page 502 504 = @direct") == ports * len(through_hold)  # the hold service down
    assert conf.count("error_page 502 503 = @hold") == ports * len(woken)
    assert conf.count("= @recovering") == ports * len(c.gateway.routes)
    for tier in (c.tier(r.tier) for r in c.gateway.routes):
        plan = plan_cluster(c)[tier.name]
        hold = max(hold_s(c, tier, plan), new_job_hold_s(c, tier, plan) or 0)
        assert f"proxy_set_header X-Clusterbook-Tier {tier.name};" in conf and f"at most {hold} s" in conf


def kept(c: Cluster, keep_s: int = 120, mlock: bool = False, on_arrival: bool = True) -> Cluster:
    """The same cluster with the engine's keep-weights patch (as the files pin it) and the tier keeping weights;
    on_arrival False: without the patch whose workers hash weights as they arrive (P10)."""
    beefcake2 = load_cluster(ROOT / "cluster.yaml")
    patches = [x for x in beefcake2.engine.patches if on_arrival or x.speeds_up != "hash_on_arrival"]
    assert len(patches) == len(beefcake2.engine.patches) - (not on_arrival)
    engine = c.engine.model_copy(update={"patches": patches})
    tier = c.tiers[0].model_copy(update={"keep_weights_s": keep_s, "mlock": mlock})
    return c.model_copy(update={"engine": engine, "tiers": [tier]})


@pytest.mark.parametrize("on_arrival", [False, True])
def test_where_workers_keep_weights_a_head_crash_loads_the_heads_share_and_hashes_the_workers(on_arrival):
    """Issue 48: a restarted head sends no worker share again (the workers keep it); it hashes it, after the worker
    has read back and hashed what the head sent it unhashed (a cold load hashes nothing: no worker kept anything
    then), or at once where the workers hashed each weight as it arrived (P10); a worker's crash sends that
    worker's share again."""
    plain = kept(h100_pair({"g0": 1, "g1": 1}, restart_sec=2), keep_s=0)  # the same patches, nothing kept
    c = kept(plain, on_arrival=on_arrival)
    p = c.planner
    before, after = predict_load(plain, plain.tiers[0], plan_cluster(plain)["t"]), \
        predict_load(c, c.tiers[0], plan_cluster(c)["t"])
    assert not before.kept and before.head_recovery_s == pytest.approx(2 + before.load_s)  # the head's RestartSec
    assert after.kept and after.hash_s == pytest.approx(after.rpc_bytes / (p.weights_hash_gbs * 1e9))
    assert after.load_s == pytest.approx(before.load_s)  # a cold start hashes nothing
    read_back = after.rpc_bytes / (p.weights_rehash_gbs * 1e9)  # one worker: all of it
    assert read_back > 0 and after.rehash_s == pytest.approx(0 if on_arrival else read_back)
    assert after.head_recovery_s == pytest.approx(max(2, after.rehash_s) + after.local_s + after.hash_s)
    assert after.recovery_s == pytest.approx(5 + after.local_s + after.rpc_s)  # one worker: all again, no hashing
    assert after.recovery_s == pytest.approx(before.recovery_s)
    assert predict_load(kept(plain, 0), plain.tiers[0], plan_cluster(plain)["t"]).kept is False


def reasoning_kept(on_arrival: bool):
    """beefcake2's file with its reasoning tier keeping weights 120 s, as the full-size runs set it; on_arrival
    False: its series without P10."""
    c = load_cluster(ROOT / "cluster.yaml")
    tier = c.tier("reasoning").model_copy(update={"keep_weights_s": 120})
    patches = [x for x in c.engine.patches if on_arrival or x.speeds_up != "hash_on_arrival"]
    return c.model_copy(update={"tiers": [tier if t.name == "reasoning" else t for t in c.tiers],
                                "engine": c.engine.model_copy(update={"patches": patches})}), tier


def test_the_kept_head_restart_at_full_size_is_predicted_within_25_percent():
    """benchmarks/results/h200-kept-weights (one H200, beefcake2's reasoning tier, the 72B-shaped Q4_K_M, mlock): a
    head restarted with its worker keeping 22.3 GB listened 8.35 and 9.10 s after its start (run 3, the worker's
    weights hashed at the cold load), and 9.12 and 7.02 s in run 4 (nothing hashed at the cold load: the first
    restart, started 1 s after the crash, waited for the worker to read back and hash its share, 3.27 s)."""
    c, tier = reasoning_kept(on_arrival=False)  # the build measured had no P10
    load = predict_load(c, tier, plan_cluster(c)["reasoning"])
    own = load.locked_s + load.local_s + load.hash_s
    for measured_s, waited_s in ((8.35, 0), (9.10, 0), (9.12, load.rehash_s - 1), (7.02, 0)):
        assert own + waited_s == pytest.approx(measured_s, rel=0.25), load
    phases = json.loads((ROOT / "benchmarks/results/h200-kept-weights/run4/head-log-phases.json").read_text())
    cold, first, second = phases["logs/kept/head.log"]
    assert cold["data"] == pytest.approx(phases["logs/sent/head.log"][0]["data"], rel=0.05)  # no hashing cold
    assert first["to_tensors"] - second["to_tensors"] == pytest.approx(load.rehash_s - 1, abs=0.5)  # the wait


def test_with_p10_the_first_kept_head_restart_waits_for_nothing_and_is_predicted_within_25_percent():
    """benchmarks/results/h200-kept-weights/run5 (one H200, the file's whole series with P10, the same settings): the
    head restarted after a cold load listened 6.56 s after its start and 7.66 s the second time; the same machine
    without P10 came back in 10.40 s the first time (the read-back) and 7.83 s the second. Target: a restart within
    1.2 times the head's own local load (the one-GPU load less the worker's half of its data phase)."""
    c, tier = reasoning_kept(on_arrival=True)
    assert any(x.speeds_up == "hash_on_arrival" for x in c.engine.patches)  # the file's series has P10
    load = predict_load(c, tier, plan_cluster(c)["reasoning"])
    assert load.rehash_s == 0
    phases = json.loads((ROOT / "benchmarks/results/h200-kept-weights/run5/head-log-phases.json").read_text())
    cold, first, second = phases["logs/kept/head.log"]
    assert abs(first["to_tensors"] - second["to_tensors"]) < 0.5  # the first restart waited for no read-back
    assert cold["data"] == pytest.approx(phases["logs/sent/head.log"][0]["data"], rel=0.05)  # hashing costs no time
    one_gpu = phases["logs/one_gpu/head-one-device.log"][0]
    own = one_gpu["listening"] - one_gpu["data"] / 2
    for restart in (first, second):
        assert restart["listening"] <= 1.2 * own
        assert load.locked_s + load.local_s + load.hash_s == pytest.approx(restart["listening"], rel=0.25), load


def test_a_tier_with_mlock_maps_and_locks_its_whole_model_before_it_loads():
    plain = kept(h100_pair({"g0": 1, "g1": 1}), keep_s=0)
    locked = kept(plain, keep_s=0, mlock=True)
    a, b = (predict_load(x, x.tiers[0], plan_cluster(x)["t"]) for x in (plain, locked))
    assert b.locked_s == pytest.approx(8.54e9 / (plain.planner.mlock_gbs * 1e9)) and not a.locked_s
    assert b.load_s == pytest.approx(a.load_s + b.locked_s)
