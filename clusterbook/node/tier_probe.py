#!/usr/bin/python3
"""Probe every tier as a client does and write what it saw for the node exporter's textfile collector:
clusterbook-tier-probe CONFIG.json. Per tier: /health answers 200; the time its kind's one short request takes (a
one-token chat completion: the time to first token; an embedding of one short input), a router-mode tier asked only
through a model it has loaded, never loading one; for a
SLURM tier, whether the endpoint registry has its record, whether its job is pending and whether it waits for nodes
other jobs hold (VASP's, on beefcake2: an expected state, which the alerts name and do not page for)."""
import json
import os
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, "/usr/local/lib/clusterbook")  # slurm_jobs.py, where the monitoring runbook installs it (layout.py)
TIMEOUT_S = 5


def get(url, key=None, timeout=TIMEOUT_S):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def request_seconds(url, key, request, model, timeout):
    """How long the tier's one request (its path, its JSON body with the model's id in it) took to answer."""
    body = json.dumps({**request["body"], "model": model}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    started = time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url + request["path"], body, headers),
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
    """The tier's URL: fixed for a systemd tier, the endpoint record's for a SLURM one (None: no record, or one
    naming no node of the tier: a record is anyone's who can write the shared folder, and the probe sends the
    tier's key where it points)."""
    if tier["url"]:
        return tier["url"]
    try:
        with open(tier["record"]) as f:
            record = json.loads(f.read(4096))
        host, port = str(record["host"]), int(record["port"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if (tier.get("hosts") is not None and host not in tier["hosts"]) or not 0 < port < 65536:
        return None
    return urllib.parse.urlunsplit(("http", "%s:%d" % (host, port), "", "", ""))


def loaded_model(url, key, tier):
    """The model to ask: an RPC tier's own, a router's first loaded one (None while it has none loaded)."""
    if not tier["router"]:
        return tier["models"][0]
    _, body = get(url + "/models", key)
    loaded = [m["id"] for m in json.loads(body).get("data", [])
              if (m.get("status") or {}).get("value") == "loaded" and m.get("id") in tier["models"]]
    return loaded[0] if loaded else None


def slurm_state(job):
    """(pending, waiting) of the tier's own job: pending 1/0, None where squeue is not available; waiting None, or
    (users and partitions holding its nodes, SLURM's start estimate) while it waits for nodes other jobs hold. Its
    own job: by the ids clusterbook recorded (where this node has them) and its user, never another user's."""
    import slurm_jobs  # beside this file in clusterbook's source; only SLURM tiers ask, so only they need it
    ids = slurm_jobs.own(job, "%i", "PENDING")
    if ids is None:
        return None, None
    held = slurm_jobs.holders(job) if ids else None
    if held is None:
        return int(bool(ids)), None
    _, _, start, found = held
    return 1, ("; ".join(sorted({"{} ({})".format(user, part) for _, user, part, _, _, _ in found})), start or "")


def escaped(value):
    """A label value as the textfile format reads it: backslash, quote and newline escaped, at most 200 characters."""
    return str(value)[:200].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def probe(tier):
    """The lines of one tier."""
    label = f'tier="{tier["name"]}"'
    lines = []
    if tier["job"]:
        lines.append(f"clusterbook_tier_registered{{{label}}} {int(os.path.isfile(tier['record']))}")
        try:
            state, waiting = slurm_state(tier["job"])  # the job's name, user, recorded ids and nodes
        except Exception as exc:
            print(f"tier {tier['name']}: no SLURM figures: {type(exc).__name__}: {exc}", file=sys.stderr)
            state, waiting = None, None
        if state is not None:
            lines.append(f"clusterbook_tier_pending{{{label}}} {state}")
            lines.append(f"clusterbook_tier_waiting_for_nodes{{{label}}} {int(waiting is not None)}")
        if waiting is not None:
            lines.append(f'clusterbook_tier_waiting_info{{{label}, held_by="{escaped(waiting[0])}", '
                         f'start="{escaped(waiting[1])}"}} 1')
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
                    seconds = request_seconds(url, key, tier["request"], model, tier["timeout_s"])
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
             "# HELP clusterbook_tier_ttft_seconds seconds the tier's one short request took (a chat tier's: one "
             "token, the time to first token)",
             "# TYPE clusterbook_tier_ttft_seconds gauge",
             "# HELP clusterbook_tier_registered a SLURM tier's endpoint record is in the registry",
             "# TYPE clusterbook_tier_registered gauge",
             "# HELP clusterbook_tier_pending SLURM holds a SLURM tier's job pending",
             "# TYPE clusterbook_tier_pending gauge",
             "# HELP clusterbook_tier_waiting_for_nodes a SLURM tier's job is pending while other jobs hold its nodes",
             "# TYPE clusterbook_tier_waiting_for_nodes gauge",
             "# HELP clusterbook_tier_waiting_info who holds a waiting tier's nodes, and SLURM's start estimate",
             "# TYPE clusterbook_tier_waiting_info gauge"]
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
