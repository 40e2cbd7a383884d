#!/usr/bin/python3
"""Check a GGUF file's header against the cluster file's architecture: gguf-check FILE key=value ...
(keys: layers heads kv_heads embedding context). Reads only the header's key/value section."""
import struct
import sys

KEYS = {"layers": "block_count", "heads": "attention.head_count", "kv_heads": "attention.head_count_kv",
        "embedding": "embedding_length", "context": "context_length"}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read(f, fmt):
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def value(f, kind):
    if kind in SCALARS:
        return read(f, SCALARS[kind])
    if kind == 8:
        return f.read(read(f, "<Q")).decode("utf-8", "replace")
    if kind == 9:
        item, count = read(f, "<I"), read(f, "<Q")
        if item in SCALARS:
            f.seek(count * struct.calcsize(SCALARS[item]), 1)
            return None
        if item == 8:  # e.g. the tokenizer's tokens: skipped, not kept
            for _ in range(count):
                f.seek(read(f, "<Q"), 1)
            return None
        return [value(f, item) for _ in range(count)]
    raise ValueError(f"unknown GGUF value type {kind}")


def main(path, expected):
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        read(f, "<I")
        read(f, "<Q")
        header = {}
        for _ in range(read(f, "<Q")):
            key = f.read(read(f, "<Q")).decode("utf-8", "replace")
            header[key] = value(f, read(f, "<I"))
    arch = header.get("general.architecture", "?")
    wrong = []
    for name, want in expected.items():
        found = header.get(f"{arch}.{KEYS[name]}")
        if name == "kv_heads" and found is None:
            found = header.get(f"{arch}.{KEYS['heads']}")  # no GQA key: as many KV heads as heads
        if found != int(want):
            wrong.append(f"{name}: the cluster file says {want}, the header ({arch}.{KEYS[name]}) says {found}")
    if wrong:
        sys.exit(f"{path}: its header contradicts the cluster file: " + "; ".join(wrong))
    print(f"{path}: {arch}, header matches ({', '.join(f'{k}={v}' for k, v in expected.items())})")


if __name__ == "__main__":
    main(sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:]))
