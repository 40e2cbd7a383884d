"""Write a random-weights llama model at Q8_0, shaped like Llama-3-8B (default) or Llama-3.2-3B, quickly: weights
drawn and packed on the GPU.   python3 make_model.py OUT.gguf [8b|3b]"""

import sys
from pathlib import Path

import gguf
import numpy as np
import torch

from clusterbook.effects.lab.models import add_byte_vocabulary, tensor_layout

SHAPES = {"8b": (32, 4096, 32, 8, 14336, 128256, 8192), "3b": (28, 3072, 24, 8, 8192, 128256, 8192)}
LAYERS, EMBD, HEADS, KV_HEADS, FF, VOCAB, CTX = SHAPES["8b"]


def q8_0(rows: int, cols: int, gen: torch.Generator) -> np.ndarray:
    """Q8_0 blocks of 32: an f16 scale then 32 int8 values (34 bytes), as ggml stores them."""
    x = torch.randn(rows, cols, device="cuda", generator=gen) * 0.02
    blocks = x.reshape(-1, 32)
    d = blocks.abs().amax(dim=1, keepdim=True) / 127.0
    q = torch.round(blocks / d.clamp(min=1e-12)).clamp(-127, 127).to(torch.int8)
    packed = torch.cat([d.half().view(torch.uint8), q.view(torch.uint8)], dim=1)
    return packed.reshape(rows, cols // 32 * 34).cpu().numpy()


def main(path: str, shape: str = "8b") -> None:
    global LAYERS, EMBD, HEADS, KV_HEADS, FF, VOCAB, CTX
    LAYERS, EMBD, HEADS, KV_HEADS, FF, VOCAB, CTX = SHAPES[shape]
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"random-{shape}-shaped")
    w.add_context_length(CTX)
    w.add_embedding_length(EMBD)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(EMBD // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    add_byte_vocabulary(w, VOCAB)
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, rows, cols in tensor_layout(LAYERS, EMBD, KV_HEADS * (EMBD // HEADS), FF, VOCAB):
        if rows is None:
            w.add_tensor(name, np.ones(EMBD, dtype=np.float32))
        else:
            data = q8_0(rows, cols, gen)
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, Path(path).stat().st_size, "bytes")


if __name__ == "__main__":
    main(*sys.argv[1:3])
