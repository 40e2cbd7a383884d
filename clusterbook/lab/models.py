"""Tiny deterministic llama-architecture GGUF models with random weights and a byte vocabulary, for the lab."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class TinyModel:
    """The shape of a generated model."""

    name: str
    layers: int
    embedding: int
    heads: int
    kv_heads: int
    feed_forward: int
    context: int = 4096
    seed: int = 0
    quantization: str = "Q8_0"

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads


VOCAB = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]


def write_model(model: TinyModel, path: Path) -> Path:
    """Write the GGUF file (atomically); same model -> same bytes."""
    import gguf

    rng = np.random.default_rng(model.seed)
    qtype = getattr(gguf.GGMLQuantizationType, model.quantization)
    tmp = path.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(model.name)
    writer.add_context_length(model.context)
    writer.add_embedding_length(model.embedding)
    writer.add_block_count(model.layers)
    writer.add_feed_forward_length(model.feed_forward)
    writer.add_head_count(model.heads)
    writer.add_head_count_kv(model.kv_heads)
    writer.add_rope_dimension_count(model.head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(int(getattr(gguf.LlamaFileType, f"MOSTLY_{model.quantization}")))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(VOCAB)
    writer.add_token_scores([0.0] * len(VOCAB))
    writer.add_token_types([2, 3, 3] + [6] * 256)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        quantized = gguf.quants.quantize(data, qtype)
        writer.add_tensor(name, quantized, raw_shape=quantized.shape, raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(model.embedding, dtype=np.float32))

    e, kv = model.embedding, model.kv_heads * model.head_dim
    matrix("token_embd.weight", len(VOCAB), e)
    for i in range(model.layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", e, e)
        matrix(f"blk.{i}.attn_k.weight", kv, e)
        matrix(f"blk.{i}.attn_v.weight", kv, e)
        matrix(f"blk.{i}.attn_output.weight", e, e)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", model.feed_forward, e)
        matrix(f"blk.{i}.ffn_up.weight", model.feed_forward, e)
        matrix(f"blk.{i}.ffn_down.weight", e, model.feed_forward)
    norm("output_norm.weight")
    matrix("output.weight", len(VOCAB), e)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(path)
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
