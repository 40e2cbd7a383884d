"""Parts of the main job that need no lab: a zombie node is not running, --only finds scenarios by name or tag,
long steps read their progress from the tool's own output."""

import os
import time

import pytest

from clusterbook.commands.acceptance import matching, scenarios
from clusterbook.effects.lab.machines import _state
from clusterbook.effects.lab.progress import bootstrap_progress, ninja_progress


def test_a_zombie_is_not_a_running_process():
    # A child forks a grandchild that exits at once, and never waits for it: a zombie whose parent is not this
    # process, like a lab node's nspawn seen from the verify run (it still answers kill 0).
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        grandchild = os.fork()
        if grandchild == 0:
            os._exit(0)
        os.write(write, str(grandchild).encode())
        time.sleep(5)
        os._exit(0)
    os.close(write)
    zombie = int(os.read(read, 32))
    try:
        deadline = time.monotonic() + 5
        while _state(zombie) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(zombie) == "Z"
        assert _state(child) in ("S", "R")
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
    assert _state(2**22 + 12345) is None  # no such process


@pytest.mark.parametrize("only,expected", [
    ("node restart", {"test_services_are_enabled_and_come_back_after_a_node_restart"}),
    ("NODE RESTART", {"test_services_are_enabled_and_come_back_after_a_node_restart"}),
    ("@disruptive", {"test_services_are_enabled_and_come_back_after_a_node_restart",
                     "test_a_killed_rpc_worker_then_a_killed_head_are_recovered_and_no_client_of_the_gateway_sees_an_error",
                     "test_llamacpp_reports_layers_on_every_device",
                     "test_a_preempted_tier_leaves_the_gateway_and_comes_back_on_its_own",
                     "test_a_cancelled_slurm_job_is_submitted_again_by_the_keeper_and_no_client_of_the_gateway_sees_an_error",
                     "test_a_killed_rpc_worker_step_is_started_again_inside_its_job_the_logs_say_why_and_no_client_sees_an_error",
                     "test_a_tier_that_stays_down_fires_its_alert_which_resolves_once_it_is_back",
                     "test_an_idle_tier_on_demand_is_released_and_its_first_request_is_answered",
                     "test_ten_concurrent_first_requests_start_one_job_and_are_all_answered",
                     "test_a_request_that_waits_past_the_cap_gets_503_with_retryafter"}),
    ("Tiers on demand", {"test_an_idle_tier_on_demand_is_released_and_its_first_request_is_answered",
                         "test_ten_concurrent_first_requests_start_one_job_and_are_all_answered",
                         "test_a_request_that_waits_past_the_cap_gets_503_with_retryafter"}),
    ("Resilience", {"test_services_are_enabled_and_come_back_after_a_node_restart",
                    "test_a_killed_rpc_worker_then_a_killed_head_are_recovered_and_no_client_of_the_gateway_sees_an_error"}),
    ("no such scenario", set()),
])
def test_only_matches_scenario_names_tags_and_features(only, expected):
    assert {s.test_name for s in matching(scenarios(), only)} == expected


@pytest.mark.parametrize("parse,line,expected", [
    (ninja_progress, "[12/224] Building CXX object ggml/src/ggml.cpp.o", "12/224 targets"),
    (ninja_progress, "FAILED: x.o", None),
    (bootstrap_progress, "I: downloading packages with apt...", "downloading packages with apt"),
    (bootstrap_progress, "I: installing remaining packages inside the chroot...",
     "installing remaining packages inside the chroot"),
    (bootstrap_progress, "I: Unpacking libc6...", "unpacking libc6"),
    (bootstrap_progress, "W: something", None),
])
def test_progress_comes_from_the_tools_own_lines(parse, line, expected):
    assert parse(line) == expected


def test_every_criterion_names_scenarios_that_exist():
    """The results page says which scenarios check each earlier success criterion: each name is a real scenario
    (a renamed scenario fails here, not silently on the page)."""
    from pathlib import Path

    from clusterbook.model.loader import load_cluster

    root = Path(__file__).resolve().parents[2]
    names = {s.name for s in scenarios()}
    for path in ("cluster.yaml", "lab/cluster.yaml", "lab/cluster-slurm.yaml"):
        c = load_cluster(root / path)
        missing = [s for k in c.criteria for s in k.scenarios if s not in names]
        assert missing == [], f"{path}: no such scenario: {missing}"
    assert len(load_cluster(root / "cluster.yaml").criteria) == 10  # seed 003's ten
    assert "A killed RPC worker, then a killed head, are recovered, and no client of the gateway sees an error" in names


def test_the_main_job_says_where_its_minutes_went_phase_by_phase_also_after_a_failure():
    """Issue 69 item 4: a newcomer sees which phase took the time (the build, the lab, the scenarios)."""
    from clusterbook.commands.acceptance import PhaseClock

    clock = PhaseClock()
    with clock.phase("lab up"):
        time.sleep(0.01)
    with pytest.raises(RuntimeError), clock.phase("scenarios"):
        raise RuntimeError("a scenario failed")
    clock.times[0] = ("lab up", 92.4)
    clock.times.append(("llama.cpp build and install", 359.0))
    line = clock.line()
    assert line.startswith("where the time went: lab up 92 s, scenarios 0 s, llama.cpp build and install 359 s")
    assert line.endswith("; 7 min 31 s in all")
