#!/usr/bin/python3
"""Probe every tier as a client does and write what it saw for the node exporter's textfile collector:
clusterbook-tier-probe CONFIG.json. Per tier: /health answers 200; the time a one-token chat completion takes (the
time to first token; a router-mode tier is asked only through a model it has loaded, never loading one); for a
SLURM tier, whether the endpoint registry has its record and whether its job is pending."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

TIMEOUT_S = 5


def get(url, key=None, timeout=TIMEOUT_S):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def chat_seconds(url, key, model, timeout):
    body = json.dumps({"model": model, "max_tokens": 1,
                       "messages": [{"role": "user", "content": "Say OK."}]}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    started = time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", body, headers),
                                timeout=timeout) as response:
        response.read()
    return time.monotonic() - started


def read_key(path):
    try:
        with open(path) as f:
            return f.read().strip() or None
    except (OSError, TypeError):
        return None


def base_url(tier):
    """The tier's URL: fixed for a systemd tier, the endpoint record's for a SLURM one (None: no record)."""
    if tier["url"]:
        return tier["url"]
    try:
        with open(tier["record"]) as f:
            record = json.load(f)
        return urllib.parse.urlunsplit(("http", "%s:%d" % (record["host"], int(record["port"])), "", "", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def loaded_model(url, key, tier):
    """The model to ask: an RPC tier's own, a router's first loaded one (None while it has none loaded)."""
    if not tier["router"]:
        return tier["models"][0]
    _, body = get(url + "/models", key)
    loaded = [m["id"] for m in json.loads(body).get("data", [])
              if (m.get("status") or {}).get("value") == "loaded" and m.get("id") in tier["models"]]
    return loaded[0] if loaded else None


def pending(job):
    """1 when SLURM holds the tier's job pending, 0 when not, None where squeue is not available."""
    try:
        out = subprocess.run(["squeue", "-h", "-n", job, "-t", "PENDING", "-o", "%i"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return None if out.returncode else int(bool(out.stdout.strip()))


def probe(tier):
    """The lines of one tier."""
    label = f'tier="{tier["name"]}"'
    lines = []
    if tier["job"]:
        lines.append(f"clusterbook_tier_registered{{{label}}} {int(os.path.isfile(tier['record']))}")
        state = pending(tier["job"])
        if state is not None:
            lines.append(f"clusterbook_tier_pending{{{label}}} {state}")
    url = base_url(tier)
    healthy = 0
    try:
        healthy = int(url is not None and get(url + "/health")[0] == 200)
    except (OSError, ValueError) as exc:  # the journal says why
        print(f"tier {tier['name']}: {url}/health: {exc}", file=sys.stderr)
    lines.append(f"clusterbook_tier_healthy{{{label}}} {healthy}")
    if healthy:
        key = read_key(tier["key_file"])
        try:
            model = loaded_model(url, key, tier)
            if model:
                try:
                    seconds = chat_seconds(url, key, model, tier["timeout_s"])
                except OSError as exc:  # no answer in time: the timeout is what the figure is at least
                    if not isinstance(getattr(exc, "reason", exc), TimeoutError):
                        raise
                    seconds = tier["timeout_s"]
                lines.append(f'clusterbook_tier_ttft_seconds{{{label}, model="{model}"}} {seconds:.3f}')
        except (OSError, ValueError) as exc:  # refused or not JSON: no figure this round
            print(f"tier {tier['name']}: no first-token figure: {exc}", file=sys.stderr)
    return lines


def main(config_path):
    with open(config_path) as f:
        config = json.load(f)
    lines = ["# HELP clusterbook_tier_healthy the tier's /health answered 200",
             "# TYPE clusterbook_tier_healthy gauge",
             "# HELP clusterbook_tier_ttft_seconds seconds a one-token chat completion took (time to first token)",
             "# TYPE clusterbook_tier_ttft_seconds gauge",
             "# HELP clusterbook_tier_registered a SLURM tier's endpoint record is in the registry",
             "# TYPE clusterbook_tier_registered gauge",
             "# HELP clusterbook_tier_pending SLURM holds a SLURM tier's job pending",
             "# TYPE clusterbook_tier_pending gauge"]
    for tier in config["tiers"]:
        lines += probe(tier)
    out = config["textfile"]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), prefix=".clusterbook-tiers.")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: clusterbook-tier-probe CONFIG.json")
    main(sys.argv[1])
