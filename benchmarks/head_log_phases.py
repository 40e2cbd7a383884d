"""The phases of each llama-server start in a head's log (-lv 4), in seconds: python3 head_log_phases.py LOG..."""
import json
import re
import sys
from pathlib import Path

# each phase ends at the first line after the start that matches its pattern (b11434's own log lines)
ENDS = {"to_tensors": "loading model tensors", "map_lock": "layers to GPU", "data": "constructing llama_context",
        "listening": "llama_server: listening|server is listening"}


def seconds(line: str) -> float | None:
    """A log line's time since the process started: minutes.seconds.milliseconds.microseconds."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)\.(\d+) ", line)
    return int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6 if m else None


def phases(lines) -> list[dict]:
    """One row per start: until the tensors are loaded, mapping and locking the file, the weights' data to the
    devices, and when the server listened (since its start)."""
    starts: list[dict] = []
    for line in lines:
        if "llama_server: initializing" in line:
            starts.append({})
        t = seconds(line)
        for name, pattern in ENDS.items():
            if starts and t is not None and name not in starts[-1] and re.search(pattern, line):
                starts[-1][name] = t
    return [{"to_tensors": round(s["to_tensors"], 2), "map_lock": round(s["map_lock"] - s["to_tensors"], 2),
             "data": round(s["data"] - s["map_lock"], 2), "listening": round(s["listening"], 2)}
            for s in starts if len(s) == len(ENDS)]


if __name__ == "__main__":
    print(json.dumps({path: phases(Path(path).read_text(errors="replace").splitlines(keepends=True))
                      for path in sys.argv[1:]}, indent=1))
