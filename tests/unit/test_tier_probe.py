"""The tier probe (clusterbook/node/tier_probe.py) for a SLURM tier, against a fake SLURM queue: its job pending,
waiting for nodes another user's jobs hold (named in the series' labels, escaped as the textfile format reads them),
and another user's job of its name never counted as its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import clusterbook.node

from .fakeslurm import Slurm

NODE = Path(clusterbook.node.__file__).parent
sys.path.insert(0, str(NODE))
import slurm_jobs  # noqa: E402


@pytest.fixture
def probe(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("clusterbook_tier_probe", NODE / "tier_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    slurm = Slurm()
    monkeypatch.setattr(slurm_jobs, "command", slurm.command)
    job = {"job": "llama-fast", "user": "root", "nodes": ["vasp-02"], "marks": {"ids": str(tmp_path / "ids")}}
    tier = {"name": "fast", "job": job, "record": str(tmp_path / "fast.json"), "url": None}
    return module, slurm, tier


def test_a_tier_waiting_for_vasps_nodes_says_so_and_who_holds_them(probe):
    module, slurm, tier = probe
    slurm.add("llama-fast", "mallory", "PENDING", "JobHeldUser")  # another's job of its name: not its own
    assert module.probe(tier)[:3] == ['clusterbook_tier_registered{tier="fast"} 0',
                                     'clusterbook_tier_pending{tier="fast"} 0',
                                     'clusterbook_tier_waiting_for_nodes{tier="fast"} 0']
    mine = slurm.add("llama-fast", "root", "PENDING", "Resources")
    slurm_jobs.record(tier["job"], mine)
    vasp = slurm.add("vasp-relax", 'al"ice', "RUNNING")
    holder = next(j for j in slurm.jobs if j.id == vasp)
    holder.nodes, holder.partition = "vasp-02", "vasp"
    next(j for j in slurm.jobs if j.id == mine).start = "2026-12-05T18:00:05"
    assert module.probe(tier)[1:4] == ['clusterbook_tier_pending{tier="fast"} 1',
                                      'clusterbook_tier_waiting_for_nodes{tier="fast"} 1',
                                      'clusterbook_tier_waiting_info{tier="fast", held_by="al\\"ice (vasp)", '
                                      'start="2026-12-05T18:00:05"} 1']
    slurm.fails = {"squeue"}  # slurmctld does not answer: no figure rather than a wrong one
    assert not any("pending" in line or "waiting" in line for line in module.probe(tier))


def test_label_values_are_escaped_and_bounded(probe):
    module, _, _ = probe
    assert module.escaped('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert len(module.escaped("x" * 500)) == 200


class FakeTier:
    """A tier's HTTP side: /health, /models (router mode's list with each model's status), a chat completion that
    takes `delay` seconds; what was asked, with its Authorization header."""

    def __init__(self, health=200, loaded=("a",), delay=0.0):
        import http.server
        import json
        import threading

        fake = self
        self.asked: list[tuple[str, str | None, dict | None]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.asked.append((self.path, self.headers.get("Authorization"), None))
                if self.path == "/health":
                    self.answer(health, {"status": "ok" if health == 200 else "loading"})
                else:
                    self.answer(200, {"data": [{"id": m, "status": {"value": "loaded" if m in loaded else
                                                                    "unloaded"}} for m in ("a", "b")]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.asked.append((self.path, self.headers.get("Authorization"), body))
                time.sleep(delay)
                self.answer(200, {"choices": [{"message": {"content": "OK"}}]})

        import time
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_tier(tmp_path):
    made = []

    def make(**kwargs):
        made.append(FakeTier(**kwargs))
        return made[-1]
    yield make
    for fake in made:
        fake.close()


def tier_at(url, tmp_path, router=True, timeout_s=5):
    (tmp_path / "key").write_text("sekrit\n")
    return {"name": "fast", "job": None, "url": url, "router": router, "models": ["a", "b"],
            "request": {"path": "/v1/chat/completions", "body": {"model": "", "max_tokens": 1,
                                                                 "messages": [{"role": "user", "content": "OK"}]}},
            "key_file": str(tmp_path / "key"), "timeout_s": timeout_s}


def test_a_router_tier_is_asked_only_through_a_model_it_has_loaded(probe, http_tier, tmp_path):
    """Issue 68 row 6: the probe had only a syntax check. Never loading a model is its promise to router mode."""
    module = probe[0]
    fake = http_tier(loaded=("b",))
    lines = module.probe(tier_at(fake.url, tmp_path))
    assert 'clusterbook_tier_healthy{tier="fast"} 1' in lines
    assert any(line.startswith('clusterbook_tier_ttft_seconds{tier="fast", model="b"} ') for line in lines)
    chats = [body for path, _, body in fake.asked if path == "/v1/chat/completions"]
    assert [c["model"] for c in chats] == ["b"] and chats[0]["max_tokens"] == 1
    assert {auth for path, auth, _ in fake.asked if path != "/health"} == {"Bearer sekrit"}  # /health needs none
    none_loaded = http_tier(loaded=())
    lines = module.probe(tier_at(none_loaded.url, tmp_path))
    assert not any("ttft" in line for line in lines)
    assert not any(path == "/v1/chat/completions" for path, _, _ in none_loaded.asked)


def test_an_unhealthy_tier_gets_no_request_and_a_slow_one_its_timeout_as_its_figure(probe, http_tier, tmp_path):
    module = probe[0]
    loading = http_tier(health=503)
    assert module.probe(tier_at(loading.url, tmp_path)) == ['clusterbook_tier_healthy{tier="fast"} 0']
    assert [path for path, _, _ in loading.asked] == ["/health"]
    slow = http_tier(delay=1.5)
    lines = module.probe(tier_at(slow.url, tmp_path, router=False, timeout_s=1))
    assert 'clusterbook_tier_ttft_seconds{tier="fast", model="a"} 1.000' in lines
    gone = tier_at("http://127.0.0.1:9", tmp_path)  # nothing listens: healthy 0, the journal says why
    assert module.probe(gone) == ['clusterbook_tier_healthy{tier="fast"} 0']


def test_the_textfile_is_replaced_whole_and_readable_by_the_exporter(probe, http_tier, tmp_path):
    import json
    import stat

    module = probe[0]
    fake = http_tier()
    out = tmp_path / "textfile/clusterbook-tiers.prom"
    config = tmp_path / "probe.json"
    config.write_text(json.dumps({"textfile": str(out), "tiers": [tier_at(fake.url, tmp_path)]}))
    module.main(str(config))
    text = out.read_text()
    assert text.startswith("# HELP clusterbook_tier_healthy") and 'clusterbook_tier_healthy{tier="fast"} 1' in text
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["clusterbook-tiers.prom"]  # no temporary file left


def test_an_embeddings_tier_is_asked_its_kinds_request(probe, http_tier, tmp_path):
    """Issue 68: the probe asks each tier what its kind answers (the config carries the kind's request): an
    embeddings tier one short input at /v1/embeddings, never a chat completion."""
    from clusterbook.pure.kinds import embeddings

    module = probe[0]
    fake = http_tier()
    path, body = embeddings.request("")
    tier = {**tier_at(fake.url, tmp_path, router=False), "request": {"path": path, "body": body}}
    lines = module.probe(tier)
    assert any(line.startswith('clusterbook_tier_ttft_seconds{tier="fast", model="a"} ') for line in lines)
    posted = [(p, b) for p, _, b in fake.asked if b is not None]
    assert posted == [("/v1/embeddings", {"model": "a", "input": "Say OK."})]


@pytest.mark.parametrize("record, url", [
    ({"host": "10.0.0.32", "port": 8180}, "http://10.0.0.32:8180"),
    ({"host": "vasp-02", "port": 8180}, "http://vasp-02:8180"),
    ({"host": "evil.example", "port": 8180}, None),  # the probe sends the tier's key where the record points
    ({"host": "10.0.0.32", "port": 70000}, None),
    ({"host": ["10.0.0.32"], "port": 8180}, None),
    ("not a record", None),
])
def test_the_probe_follows_an_endpoint_record_only_to_a_node_of_its_tier(probe, record, url):
    import json

    module, _, tier = probe
    tier["hosts"] = ["10.0.0.32", "vasp-02"]  # as rendered: the tier's nodes' names and addresses
    Path(tier["record"]).write_text(json.dumps(record))
    assert module.base_url(tier) == url
