"""models.fetch's rendered commands, run here against a loopback server: a redirect is followed (Hugging Face answers
a file's URL with one), a page that is not a model is refused and never installed, the earlier setup's copy is
taken instead of a download."""

import http.server
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from clusterbook.model.schema import Cluster
from clusterbook.pure.runbooks import available, expand

ROOT = Path(__file__).resolve().parents[2]
GGUF = b"GGUF" + bytes(range(256)) * 4


class Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.endswith("/redirect/m.gguf"):
            self.send_response(302)
            self.send_header("Location", "/cdn/m.gguf")
            self.end_headers()
            return
        body = GGUF if self.path == "/cdn/m.gguf" else b"<html>Sign in to continue</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


def fetch_script(tmp_path: Path, base_url: str, repo: str, legacy_dir: Path | None = None) -> str:
    data = yaml.safe_load((ROOT / "tests/clusters/mini.yaml").read_text())
    data["storage"]["models_dir"] = str(tmp_path / "models")
    model = data["models"][0]
    model.update(source={"base_url": base_url, "repo": repo, "files": ["m.gguf"]}, size_bytes=None,
                 approx_size_gb=0.001)  # no exact size: the case where a saved page was once installed
    if legacy_dir:
        data["legacy"] = {"source": "a test", "models_dir": str(legacy_dir)}
    c = Cluster.model_validate(data)
    step = next(s for s in expand(available()["models"], c).steps if s.id == "fetch")
    [command] = next(iter(step.hosts.values()))
    return command.command


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_a_redirect_is_followed_to_the_model(tmp_path, server):
    proc = run(fetch_script(tmp_path, server, "redirect"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "models/m.gguf").read_bytes() == GGUF


def test_a_page_that_is_not_a_model_is_refused_and_not_installed(tmp_path, server):
    proc = run(fetch_script(tmp_path, server, "login"))
    assert proc.returncode == 1
    assert "m.gguf is not a GGUF file: it starts with '<htm'" in proc.stderr
    assert "Sign in to continue" in proc.stderr  # what the source answered, for the operator
    assert not list((tmp_path / "models").iterdir())


def test_the_earlier_setups_copy_is_taken_and_kept(tmp_path, server):
    old = tmp_path / "opt-models"
    old.mkdir()
    (old / "m.gguf").write_bytes(GGUF)
    proc = run(fetch_script(tmp_path, server + "/nowhere", "login", legacy_dir=old))
    assert proc.returncode == 0, proc.stderr
    assert "taking m.gguf from" in proc.stdout
    assert (tmp_path / "models/m.gguf").read_bytes() == GGUF and (old / "m.gguf").exists()
