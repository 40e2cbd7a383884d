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


# the four prompt_ constants of the planner's prompt estimate (planner/prompt.py), fitted together
PROMPT_FIT = ("fitted with the other prompt_ constants to 12 full-size prompts of the 72B-shaped model on one H200 "
              "(8K-32K tokens, flash attention off and on, ubatch 256-1,024; each within 3 % of the fit), then "
              "scaled by "
              "1.25, what the 2 x H200 runs gave beyond it (head and worker on GPUs of their own, as on beefcake2: the "
              "32K prompt in 44.3 s against 54.3 s sharing one GPU); benchmarks/results/h200-prompt-times, "
              "h200x2-full-size")
PLANNER = {
    "device_overhead_mib": Measured(600, "588-594 MiB per process on H200, CUDA 13, b11434; "
                                         "benchmarks/results/h200x2-full-size"),
    "rpc_hop_ms": Measured(0.35, "2 x H200, b11434 with the series P1-P13 (P13's poll on, as on GPU tiers), head and "
                                 "worker on GPUs of their own: beefcake2's 72B-shaped Q4_K_M split 1:1 over loopback "
                                 "RPC, 0.28-0.34 ms a token (median 0.32) more than the same split in one process "
                                 "in three rounds (0.06 ms for an 8B-shaped Q8_0); "
                                 "benchmarks/results/h200x2-hop-cost-spin-bs"),
    "local_load_gbs": Measured(5.7, "one H100, b11434, 8.54 GB in 1.5 s"),
    "rpc_load_gbs": Measured(0.40, "2 x H100 over loopback TCP, b11434: one rate for an 8.54 GB and a 3.84 GB "
                                   "model, split 1:1 and 3:1, every load within 25 %; benchmarks/README.md"),
    "rpc_fast_load_gbs": Measured(2.7, "b11434 with the patch over loopback TCP, the 72B-shaped model's 23.4 GB worker "
                                       "share: 3.3 GB/s on 2 x H200, 2.3-3.7 GB/s (median 2.6) in 8 loads on one "
                                       "H200; benchmarks/results/h200x2-full-size, h200-kept-weights"),
    "weights_hash_gbs": Measured(18, "one H200's host, 16 threads, b11434 with rpc-keep-weights.patch: a restarted "
                                     "head's 22.3 GB worker share hashed in 1.2-1.3 s beside its local load; "
                                     "benchmarks/results/h200-kept-weights"),
    "weights_rehash_gbs": Measured(6.8, "one H200's host, b11434 with rpc-keep-weights.patch: a worker read back "
                                        "and hashed the 205 weights (22.3 GB) a head had sent it on a cold load in "
                                        "3.27 s, after that head went; benchmarks/results/h200-kept-weights/run4"),
    "mlock_gbs": Measured(20, "one H200's host, b11434: a 47 GB model mapped and locked (mmap+mlock) in 1.8-2.7 s "
                              "on a head restart, the file in page cache; benchmarks/results/h200-kept-weights"),
    "prompt_memory_pct": Measured(52, PROMPT_FIT),
    "prompt_gemm_pct": Measured(60, PROMPT_FIT),
    "prompt_flash_pct": Measured(31, PROMPT_FIT),
    "prompt_scores_bytes": Measured(16, PROMPT_FIT),
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
