"""llama.cpp's layer placement (`-sm layer`): which device holds each block and the output layer."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# From this build on, llama.cpp counts the output layer inside -ngl (i_gpu_start = n_layer + 1 - ngl);
# seen at b9993 and b10437. Older builds use i_gpu_start = n_layer - ngl. Full offload is the same in both.
OUTPUT_COUNTED_IN_NGL_BUILD = 9993
CPU = -1


@dataclass(frozen=True)
class Placement:
    """Device index per block (CPU = -1) and the output layer's device."""

    blocks: tuple[int, ...]
    output: int

    def blocks_on(self, device: int) -> int:
        return sum(1 for d in self.blocks if d == device)


def place_layers(n_layer: int, n_gpu_layers: int, shares: list[float], build: int) -> Placement:
    """Mirror llama_model::load_tensors: cumulative split points, upper_bound of il/act_gpu_layers."""
    if not shares:
        return Placement(tuple([CPU] * n_layer), CPU)
    total = float(sum(shares))
    splits, acc = [], 0.0
    for share in shares:
        acc += share
        splits.append(acc / total)
    if build >= OUTPUT_COUNTED_IN_NGL_BUILD:
        gpu_start = max(n_layer + 1 - n_gpu_layers, 0)
    else:
        gpu_start = max(n_layer - n_gpu_layers, 0)
    active = min(n_gpu_layers, n_layer + 1)

    def device(il: int) -> int:
        if il < gpu_start or il - gpu_start >= active:
            return CPU
        return min(bisect.bisect_right(splits, float(il - gpu_start) / active), len(shares) - 1)

    return Placement(tuple(device(il) for il in range(n_layer)), device(n_layer))


def cpu_head_ngl(n_layer: int, head_blocks: int, build: int) -> int:
    """-ngl that keeps the first `head_blocks` blocks on the head's CPU and offloads the rest.

    Newer builds then offload the output layer too; older ones keep it on the CPU with any partial offload.
    """
    if build >= OUTPUT_COUNTED_IN_NGL_BUILD:
        return n_layer + 1 - head_blocks
    return n_layer - head_blocks
