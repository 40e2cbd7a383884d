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


def add_byte_vocabulary(writer, vocab: int) -> None:
    """The tokenizer of a random-weights model: the 259 byte tokens, padded with unused ones to `vocab` (the
    benchmarks' models, whose output layer has the real vocabulary's width)."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(VOCAB + [f"<unused{i}>" for i in range(vocab - len(VOCAB))])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([2, 3, 3] + [6] * 256 + [5] * (vocab - len(VOCAB)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)


def tensor_layout(layers: int, embedding: int, kv_dim: int, feed_forward: int, vocab: int):
    """The llama architecture's tensors in file order: (name, rows, cols), or (name, None, None) for a norm."""
    yield "token_embd.weight", vocab, embedding
    for i in range(layers):
        yield f"blk.{i}.attn_norm.weight", None, None
        yield f"blk.{i}.attn_q.weight", embedding, embedding
        yield f"blk.{i}.attn_k.weight", kv_dim, embedding
        yield f"blk.{i}.attn_v.weight", kv_dim, embedding
        yield f"blk.{i}.attn_output.weight", embedding, embedding
        yield f"blk.{i}.ffn_norm.weight", None, None
        yield f"blk.{i}.ffn_gate.weight", feed_forward, embedding
        yield f"blk.{i}.ffn_up.weight", feed_forward, embedding
        yield f"blk.{i}.ffn_down.weight", embedding, feed_forward
    yield "output_norm.weight", None, None
    yield "output.weight", vocab, embedding


def write_model(model: TinyModel, path: Path) -> Path:
    """Write the GGUF file (atomically); same model -> same bytes."""
    import gguf  # lazy: gguf (0.2 s) only where the lab writes a model

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

    for name, rows, cols in tensor_layout(model.layers, model.embedding, model.kv_heads * model.head_dim,
                                          model.feed_forward, len(VOCAB)):
        if rows is None:
            writer.add_tensor(name, np.ones(model.embedding, dtype=np.float32))
        else:
            data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
            quantized = gguf.quants.quantize(data, qtype)
            writer.add_tensor(name, quantized, raw_shape=quantized.shape, raw_dtype=qtype)
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
