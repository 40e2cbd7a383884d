"""Write a random-weights GGUF model of a cluster file's model: its architecture and its file type's tensor types.

    python3 make_shaped_model.py CLUSTER.yaml MODEL_ID OUT.gguf [--layers N]

Q4_K_M takes llama.cpp's own rules at b11434 (src/llama-quant.cpp): Q4_K everywhere, Q6_K for the output, for
attn_v and ffn_down of the layers use_more_bits picks, attn_v Q5_K elsewhere on an 80-layer model (LLM_TYPE_70B),
and a 256-block type whose row length is not a multiple of 256 falls back (ffn_down of a 29,568-wide FFN: Q6_K to
Q8_0, Q4_K to Q5_0). Each type's blocks are valid (finite f16 scales, weights within about +-0.03) and drawn once,
then repeated through every tensor: the bytes, shapes and types are the model's, the values need not be.
--layers N writes the same widths with N blocks (compute buffers do not depend on the block count)."""

import sys
from pathlib import Path

import gguf
import numpy as np
import yaml

from clusterbook.effects.lab.models import add_byte_vocabulary

Q = gguf.GGMLQuantizationType
CHUNK = 8 << 20  # bytes of random blocks drawn per type, repeated through each tensor


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fallback(qtype, cols: int):
    """llama-quant's tensor_type_fallback: a 256-block type on a row it does not divide."""
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    if cols % block == 0:
        return qtype
    return {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}[qtype]


def q4_k_m_types(layers: int):
    """(attn_v, ffn_down) types per layer, before the fallback."""
    for i in range(layers):
        more = use_more_bits(i, layers)
        attn_v = Q.Q6_K if more else (Q.Q5_K if layers == 80 else Q.Q4_K)
        yield attn_v, Q.Q6_K if more else Q.Q4_K


def blocks(qtype, count: int, rng: np.random.Generator) -> np.ndarray:
    """count valid blocks of qtype as bytes."""
    _, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
    half = lambda lo, hi: rng.uniform(lo, hi, size=count).astype(np.float16).view(np.uint8).reshape(count, 2)  # noqa: E731
    if qtype in (Q.Q4_K, Q.Q5_K):  # d, dmin, 12 bytes of 6-bit scales and mins, quants
        raw[:, 0:2], raw[:, 2:4] = half(1e-5, 3e-5), half(1e-5, 3e-5)
    elif qtype == Q.Q6_K:  # ql[128], qh[64], int8 scales[16], d
        raw[:, 192:208] = rng.integers(-8, 9, size=(count, 16)).astype(np.int8).view(np.uint8)
        raw[:, 208:210] = half(5e-5, 1e-4)
    elif qtype in (Q.Q5_0, Q.Q8_0):  # d first
        raw[:, 0:2] = half(5e-4, 1e-3) if qtype == Q.Q5_0 else half(1e-4, 2e-4)
    elif qtype == Q.Q5_1:
        raw[:, 0:2], raw[:, 2:4] = half(5e-4, 1e-3), half(-1e-2, 0)
    else:
        raise ValueError(f"no block generator for {qtype.name}")
    return raw


def main(cluster_file: str, model_id: str, out: str, layers: int | None = None) -> None:
    cluster = yaml.safe_load(Path(cluster_file).read_text())
    model = next(m for m in cluster["models"] if m["id"] == model_id)
    a = model["architecture"]
    n, embd, heads, kv, hd, ff, vocab = (layers or a["layers"], a["embedding"], a["heads"], a["kv_heads"],
                                         a["head_dim"], a["feed_forward"], a["vocab"])
    if model["quantization"] != "Q4_K_M":
        raise SystemExit(f"{model_id}: only Q4_K_M is generated here, not {model['quantization']}")
    rng = np.random.default_rng(0)
    chunks: dict = {}

    def data(qtype, rows: int, cols: int) -> np.ndarray:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if qtype not in chunks:
            chunks[qtype] = blocks(qtype, CHUNK // size, rng).reshape(-1)
        flat = np.resize(chunks[qtype], rows * cols // block * size)
        return flat.reshape(rows, cols // block * size)

    tensors = [("token_embd.weight", Q.Q4_K, vocab, embd)]
    for i, (attn_v, ffn_down) in enumerate(q4_k_m_types(n) if layers is None else
                                           list(q4_k_m_types(a["layers"]))[:n]):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", None, embd, None),
                    (p + "attn_q.weight", Q.Q4_K, heads * hd, embd), (p + "attn_q.bias", None, heads * hd, None),
                    (p + "attn_k.weight", Q.Q4_K, kv * hd, embd), (p + "attn_k.bias", None, kv * hd, None),
                    (p + "attn_v.weight", attn_v, kv * hd, embd), (p + "attn_v.bias", None, kv * hd, None),
                    (p + "attn_output.weight", Q.Q4_K, embd, heads * hd),
                    (p + "ffn_norm.weight", None, embd, None),
                    (p + "ffn_gate.weight", Q.Q4_K, ff, embd), (p + "ffn_up.weight", Q.Q4_K, ff, embd),
                    (p + "ffn_down.weight", ffn_down, embd, ff)]
    tensors += [("output_norm.weight", None, embd, None), ("output.weight", Q.Q6_K, vocab, embd)]

    w = gguf.GGUFWriter(out, "qwen2")
    w.add_name(f"random {model_id}-shaped ({n} blocks)")
    w.add_context_length(a["context"])
    w.add_embedding_length(embd)
    w.add_block_count(n)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    add_byte_vocabulary(w, vocab)
    planned = []
    for name, qtype, rows, cols in tensors:
        if qtype is None:
            shape, nbytes = (rows,), rows * 4
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
        else:
            qtype = fallback(qtype, cols)
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            nbytes = rows * cols // block * size
            w.add_tensor_info(name, (rows, cols // block * size), np.dtype(np.uint8), nbytes, raw_dtype=qtype)
        planned.append((name, qtype, rows, cols))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, qtype, rows, cols in planned:
        if qtype is None:
            w.write_tensor_data(np.full(rows, 0.0 if name.endswith(".bias") else 1.0, dtype=np.float32))
        else:
            w.write_tensor_data(data(qtype, rows, cols))
    w.close()
    size = Path(out).stat().st_size
    declared = model.get("size_bytes")
    print(f"{out}: {size} bytes" + (f" (the cluster file declares {declared}: {100 * (size / declared - 1):+.2f} %)"
                                    if declared and layers is None else ""))


if __name__ == "__main__":
    args = sys.argv[1:]
    count = None
    if "--layers" in args:
        at = args.index("--layers")
        count = int(args[at + 1])
        del args[at:at + 2]
    main(*args, layers=count)
