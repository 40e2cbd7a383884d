"""A model's shape for planning: bytes per block, embedding and output, from the GGUF header or the cluster file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clusterbook.model.schema import Model


@dataclass(frozen=True)
class Shape:
    """What the planner needs to know about a model."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    embedding: int
    feed_forward: int
    vocab: int
    context: int
    block_bytes: tuple[int, ...]  # weights of each transformer block
    embed_bytes: int  # token embedding table (always kept on the CPU by llama.cpp)
    output_bytes: int  # output norm + output projection (on the last device)
    source: str  # "gguf" or "declared"

    @property
    def total_bytes(self) -> int:
        return sum(self.block_bytes) + self.embed_bytes + self.output_bytes


def block_params(heads: int, kv_heads: int, head_dim: int, embd: int, ff: int) -> int:
    attention = embd * heads * head_dim * 2 + embd * kv_heads * head_dim * 2
    return attention + 3 * embd * ff


def from_declared(model: Model) -> Shape:
    """Split the file size over blocks, embedding and output in proportion to their parameter counts."""
    a = model.architecture
    ff = a.feed_forward or round(8 * a.embedding / 3 / 256) * 256  # llama's default when not declared
    per_block = block_params(a.heads, a.kv_heads, a.head_dim, a.embedding, ff)
    embed = a.vocab * a.embedding
    total_params = a.layers * per_block + 2 * embed
    bytes_per_param = model.bytes / total_params
    return Shape(a.layers, a.heads, a.kv_heads, a.head_dim, a.embedding, ff, a.vocab, a.context,
                 tuple([round(per_block * bytes_per_param)] * a.layers), round(embed * bytes_per_param),
                 round(embed * bytes_per_param), "declared")


def from_gguf(path: Path) -> Shape:
    """Exact tensor sizes per block from the GGUF header (read with the gguf package)."""
    from gguf import GGUFReader  # lazy: gguf (0.2 s) only where a model file is read

    reader = GGUFReader(str(path))
    arch = _field(reader, "general.architecture")

    def key(name: str, default: int | None = None) -> int:
        value = _field(reader, f"{arch}.{name}")
        if value is None:
            if default is None:
                raise ValueError(f"{path}: GGUF key {arch}.{name} is missing")
            return default
        return int(value)

    layers = key("block_count")
    heads = key("attention.head_count")
    embd = key("embedding_length")
    blocks = [0] * layers
    embed = output = 0
    for tensor in reader.tensors:
        match = re.match(r"blk\.(\d+)\.", tensor.name)
        if match:
            blocks[int(match.group(1))] += int(tensor.n_bytes)
        elif tensor.name.startswith("token_embd"):
            embed += int(tensor.n_bytes)
        else:
            output += int(tensor.n_bytes)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = key("vocab_size", len(tokens) if tokens is not None else 0)
    if not any(t.name == "output.weight" for t in reader.tensors):
        output += embed  # tied embeddings: the output projection reuses token_embd on the output device
    return Shape(layers, heads, key("attention.head_count_kv", heads), key("attention.key_length", embd // heads),
                 embd, key("feed_forward_length", 0), vocab, key("context_length"), tuple(blocks), embed, output,
                 "gguf")


def _field(reader, name: str):
    field = reader.fields.get(name)
    if field is None:
        return None
    values = [field.parts[i] for i in field.data]
    if field.types and field.types[0].name == "STRING":
        text = [bytes(v).decode() for v in values]
        return text[0] if len(text) == 1 and field.types[-1].name == "STRING" and len(field.types) == 1 else text
    return values[0][0] if len(values) == 1 else [v[0] for v in values]


def shape_of(model: Model, models_dir: Path | None = None) -> Shape:
    """From the GGUF file when it is local, else from the cluster file's declared architecture."""
    if models_dir is not None and (models_dir / model.file).exists():
        return from_gguf(models_dir / model.file)
    return from_declared(model)
