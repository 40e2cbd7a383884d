"""What the site shows from reports/: only this cluster's, stamped with its cluster file; pictures drawn only from
them (the plan is the truth: one cluster's results never appear on another's site)."""

from pathlib import Path

from clusterbook.commands import settings
from clusterbook.commands.docs_inputs import build_docs_inputs, latest_report
from clusterbook.commands.reportstamp import stamped

ROOT = Path(__file__).resolve().parents[2]


def test_commands_read_reports_from_the_configured_folder_and_show_only_their_own_cluster(tmp_path):
    here = settings.of({"reports": tmp_path})  # a command line's settings (invoke's clusterbook key)
    lab, production = (build_docs_inputs(str(ROOT / "lab/cluster.yaml"), here),
                       build_docs_inputs(str(ROOT / "cluster.yaml"), here))
    assert latest_report("verify", lab) == "Not yet verified on lab: no verify report (run `invoke verify`)."
    (tmp_path / "verify-summary.md").write_text(stamped("3 of 3 passed\n", "lab", ROOT / "lab/cluster.yaml"))
    assert latest_report("verify", lab) == "3 of 3 passed\n"
    # the production site never shows the lab's figures
    assert latest_report("verify", production) == \
        "Not yet verified on beefcake2: the latest report is of lab (run `invoke verify`)."
    (tmp_path / "verify-summary.md").write_text("3 of 3 passed\n")  # unstamped: whose it is, is unknown
    assert "does not say which cluster file" in latest_report("verify", lab)
    env = settings.as_environment(here, cluster="lab/cluster.yaml")
    assert env == {"INVOKE_CLUSTERBOOK_CLUSTER": "lab/cluster.yaml",
                   "INVOKE_CLUSTERBOOK_REPORTS": str(tmp_path), "INVOKE_CLUSTERBOOK_RUNS": "runs"}
    elsewhere = build_docs_inputs(str(ROOT / "lab/cluster.yaml"), settings.of({"reports": tmp_path / "none"}))
    assert latest_report("verify", elsewhere).startswith("Not yet verified on lab")  # another folder, its own


def test_result_pictures_are_drawn_only_from_this_clusters_reports(tmp_path):
    import json

    from clusterbook.commands.docs_inputs import result_pictures
    from clusterbook.model.loader import load_cluster

    lab_file = str(ROOT / "lab/cluster.yaml")
    lab, production = load_cluster(lab_file), load_cluster(ROOT / "cluster.yaml")
    bench = {"tier": "reasoning", "started": "2026-11-26 07:58 UTC", "decode_bound_tps": 516.1,
             "concurrency": [{"clients": 1, "aggregate_tps": 226.0, "per_client_tps": 266.0},
                             {"clients": 2, "aggregate_tps": 262.9, "per_client_tps": 307.7}]}
    recovery = {"tier": "reasoning", "card": "CPU only (3 nodes)", "predicted": {"recovery_s": 2.1}, "target_s": 20,
                "runs": [{"case": "worker killed", "page_cache": "warm",
                          "phases": {"head aborted": 0.08, "worker back": 1.1, "first answer": 2.6}}]}
    for name, data in (("bench", bench), ("bench-recovery", recovery)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        (tmp_path / f"{name}-summary.md").write_text(stamped("…\n", "lab", lab_file))
    drawn = result_pictures(tmp_path, lab, lab_file)
    assert {"bench.svg", "bench-recovery.svg", "gpu-load-times.svg"} <= set(drawn)
    assert "planner bound, one stream (516.1)" in drawn["bench.svg"]
    assert "predicted (2 s)" in drawn["bench-recovery.svg"] and "target (20 s)" in drawn["bench-recovery.svg"]
    assert "NVIDIA H100 80GB HBM3 (the device machine, not this cluster)" in drawn["gpu-load-times.svg"]
    # beefcake2's site draws none of the lab's figures, only the labelled GPU benchmark
    assert set(result_pictures(tmp_path, production, str(ROOT / "cluster.yaml"))) == {"gpu-load-times.svg"}
