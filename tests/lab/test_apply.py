"""Safe change on the lab (issue 19): apply with nothing changed deploys nothing; a good change lands with its
scenarios passing; a bad one (a model file the head cannot open) is rolled back by itself, and the tier answers
again with its previous command line within its recovery target; the Changes page shows the runs."""

import json
import re

import pytest

from .conftest import NEEDS_LAB, ROOT, invoke

pytestmark = [pytest.mark.lab, NEEDS_LAB]
LAB = ROOT / "lab/cluster.yaml"
DEPLOY = ("deploy.install", "models.fetch", "deploy.router", "deploy.reasoning", "deploy.fast", "deploy.monitoring")


def latest_change() -> dict:
    return json.loads(sorted((ROOT / "runs/changes/lab").glob("*.json"))[-1].read_text())


def with_missing_model(text: str) -> str:
    """The reasoning tier switched to a model whose file no node holds (models.fetch was not run for it)."""
    block = re.search(r"  - id: lab-reasoning\n(?:    .*\n)+", text).group(0)
    return (text.replace(block, block + block.replace("lab-reasoning", "lab-reasoning-v2"))
            .replace("    model: lab-reasoning\n", "    model: lab-reasoning-v2\n")
            .replace("default_model: lab-reasoning\n", "default_model: lab-reasoning-v2\n")
            .replace("model: lab-reasoning}", "model: lab-reasoning-v2}"))


@pytest.fixture(scope="module")
def deployed():
    assert invoke("lab.up").returncode == 0
    run = invoke(*DEPLOY)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    yield
    back = invoke("apply")  # whatever a test left, the lab file's own settings again
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr


def test_apply_with_nothing_changed_deploys_nothing(deployed):
    run = invoke("apply")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr
    assert "Nothing to apply" in run.stdout and "Deploy the" not in run.stdout


def test_a_good_change_lands_and_a_bad_one_is_rolled_back_to_it(deployed, tmp_path):
    good = tmp_path / "cluster.yaml"
    good.write_text(LAB.read_text().replace("    ctx_size: 2048\n", "    ctx_size: 1536\n"))
    run = invoke("apply", cluster=good)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
    landed = latest_change()
    assert landed["outcome"] == "landed" and [p["unit"] for p in landed["phases"]] == ["reasoning"]
    after = next(r for r in landed["phases"][0]["scenarios"] if r["when"] == "after")
    assert after["passed"] and not after["failed"]
    status = invoke("status", cluster=good)
    assert "--ctx-size 1536" in status.stdout.replace("\n", " "), status.stdout
    assert invoke("apply", cluster=good).stdout.count("Nothing to apply") == 1  # idempotent once landed

    bad = tmp_path / "bad" / "cluster.yaml"  # the same name: one cluster file, edited
    bad.parent.mkdir()
    bad.write_text(with_missing_model(good.read_text()))
    run = invoke("apply", cluster=bad)
    assert run.returncode == 1, run.stdout[-4000:]
    assert "rolled back at reasoning" in run.stderr and "model loading error" in run.stderr, run.stderr[-3000:]
    change = latest_change()
    [phase] = change["phases"]
    assert change["outcome"] == "rolled back" and phase["outcome"] == "rolled back"
    assert phase["rollback"]["answered"] and phase["rollback"]["restored"][0]["files"] == [
        "/etc/systemd/system/llama-reasoning.service"]
    recovery = 30  # lab/cluster.yaml: reasoning's recovery_s critical level
    assert phase["rollback"]["seconds"] <= recovery, phase["rollback"]
    again = next(r for r in phase["scenarios"] if r["when"] == "after rollback")
    assert again["passed"] and not again["failed"], again
    status = invoke("status", cluster=good).stdout.replace("\n", " ")
    assert "--ctx-size 1536" in status and "lab-reasoning-v2" not in status, status  # the previous command line
    assert "rolled-back" in status

    site = tmp_path / "site"
    built = invoke("docs", "--out", str(site), cluster=good)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr
    page = (site / "changes" / "index.html").read_text()
    assert change["started"] in page and landed["started"] in page
    assert page.index(change["started"]) < page.index(landed["started"])  # the latest first
