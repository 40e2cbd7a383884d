"""Where each measured default of the cluster file was measured: the planner's constants, with their evidence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """A default that a measurement chose: its value and where it came from (shown in the reference)."""

    value: float
    source: str

    @property
    def text(self) -> str:
        return f"measured: {self.source}"


PLANNER = {
    "device_overhead_mib": Measured(600, "588-594 MiB per process on H200, CUDA 13, b11434; "
                                         "benchmarks/results/h200x2-full-size"),
    "local_load_gbs": Measured(5.7, "one H100, b11434, 8.54 GB in 1.5 s"),
    "rpc_load_gbs": Measured(0.40, "2 x H100 over loopback TCP, b11434: one rate for an 8.54 GB and a 3.84 GB "
                                   "model, split 1:1 and 3:1, every load within 25 %; benchmarks/README.md"),
    "rpc_fast_load_gbs": Measured(2.0, "2 x H200 over loopback TCP, b11434: 8.54 GB split 1:1 in 2.82 s against "
                                       "13.34 s without the patch; benchmarks/README.md"),
    "slurm_step_restart_s": Measured(2, "SLURM lab, slurm-wlm 22.05: a killed worker step answered again in "
                                        "1.4-4.4 s"),
    "slurm_submit_start_s": Measured(3, "lab, slurm-wlm 22.05: 2.1-2.8 s with the load; up to 3 s more within "
                                        "batch_sched_delay of SLURM's last pass"),
    "slurm_start_s": Measured(35, "lab, slurm-wlm 22.05: back 138-178 s after a preemption, a killed worker step "
                                  "or a node restart with the default 120 s hold, 53-67 s with a 30 s hold"),
    "weights_error_pct": Measured(2, "within 2 % on the lab: tests/lab/test_planner_accuracy.py"),
    "compute_error_pct": Measured(10, "within 10 % on the lab: tests/lab/test_planner_accuracy.py"),
}
MEASURED = {("Planner", name): m for name, m in PLANNER.items()}  # (section, key) -> evidence, as PATH_ROLES
