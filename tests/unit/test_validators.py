"""The real validators run on every rendered file, pass on good clusters, and catch broken files."""

import shutil
from pathlib import Path

import pytest

from clusterbook.effects.validators import TOOLS, validate
from clusterbook.pure.render.artifacts import Artifact, render_artifacts

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.tools,
              pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                 reason="validators not installed (apt-get install shellcheck nginx-light nftables)")]

EXPECTED = {"unit": {"systemd-analyze verify"}, "script": {"bash -n", "shellcheck"}, "nftables": {"nft -c"},
            "env": {"env syntax"}, "ini": {"ini syntax"}}


@pytest.mark.parametrize("name", ["beefcake2", "ridge"])
def test_every_artifact_is_checked_and_passes(name, request):
    cluster = request.getfixturevalue(name)
    artifacts = render_artifacts(cluster)
    verdicts = validate(artifacts)
    failed = [f"{v.node}:{v.path} {v.validator}: {v.output}" for v in verdicts if not v.ok]
    assert not failed, "\n".join(failed)
    ran = {(v.node, v.path, v.validator) for v in verdicts}
    for a in artifacts:
        for validator in EXPECTED.get(a.kind, set()):
            assert (a.node, a.path, validator) in ran, f"{validator} did not run on {a.path}"
    assert any(v.validator == "nginx -t" for v in verdicts)


@pytest.mark.parametrize("artifact, validator", [
    (Artifact("n", "/etc/systemd/system/x.service", "[Service]\nExecStart=relative/path\nRestart=sometimes\n",
              "unit"), "systemd-analyze verify"),
    (Artifact("n", "/usr/local/bin/x", "#!/bin/bash\nif [ -z $1 ]; then\n  echo hi\nfi\n", "script", 0o755),
     "shellcheck"),
    (Artifact("n", "/usr/local/bin/y", "#!/bin/bash\nif then fi\n", "script", 0o755), "bash -n"),
    (Artifact("n", "/etc/nftables.d/x.nft", "table inet t { chain c { tcp dport 99999 accept } }\n", "nftables"),
     "nft -c"),
    (Artifact("n", "/etc/nginx/sites-available/x.conf", "server { listen 127.0.0.1:8080; proxy_pass; }\n", "nginx"),
     "nginx -t"),
    (Artifact("n", "/etc/x.env", "NOT A VAR\n", "env"), "env syntax"),
    (Artifact("n", "/etc/x.env", 'ARGS="--a $(id)"\n', "env"), "env syntax"),  # quoted, but it would expand
    (Artifact("n", "/etc/x.env", 'ARGS="--a\n', "env"), "env syntax"),
])
def test_broken_files_fail(artifact, validator):
    """Each broken file fails its validator (and a double-quoted value with spaces alone passes the env check)."""
    assert all(v.ok for v in validate([Artifact("n", "/etc/x.env", 'ARGS="--a=1 --b=:2"\n', "env")]))
    verdicts = [v for v in validate([artifact]) if v.validator == validator]
    assert verdicts and not verdicts[0].ok


def test_promtool_checks_the_monitoring_files_and_the_generated_tests_catch_a_wrong_threshold():
    """The rendered Prometheus files pass promtool; the rule tests generated from the targets fail when a rule's
    threshold no longer matches its target (so they test the rules, not themselves)."""
    import dataclasses

    from clusterbook.effects.validators import validate
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.artifacts import render_artifacts

    c = load_cluster(ROOT / "cluster.yaml")
    files = [a for a in render_artifacts(c) if a.kind in ("prometheus", "rules", "rule-tests")]
    assert {a.kind for a in files} == {"prometheus", "rules", "rule-tests"}
    verdicts = validate(files)
    assert [v.validator for v in verdicts] == ["promtool check config", "promtool test rules", "promtool check rules"]
    assert all(v.ok for v in verdicts), [v.output for v in verdicts if not v.ok]
    rules = next(a for a in files if a.kind == "rules")
    critical = c.targets_for("reasoning").decode_tps.critical
    broken = dataclasses.replace(rules, text=rules.text.replace(f"< {critical:g}", f"< {critical / 4:g}"))
    assert broken.text != rules.text
    verdicts = validate([broken if a is rules else a for a in files])
    failed = [v for v in verdicts if not v.ok]
    assert [v.validator for v in failed] == ["promtool test rules"] and "DecodeSlow" in failed[0].output


def test_alertmanager_sends_to_the_webhook_when_one_is_set():
    from clusterbook.effects.validators import validate
    from clusterbook.model.loader import load_cluster
    from clusterbook.pure.render.monitoring import alertmanager_config

    c = load_cluster(ROOT / "cluster.yaml")
    hooked = c.model_copy(update={"monitoring": c.monitoring.model_copy(
        update={"alert_webhook": "https://hooks.example.org/alerts"})})
    for cluster, sends in ((c, False), (hooked, True)):
        text = alertmanager_config(cluster, "test")
        assert ("url: https://hooks.example.org/alerts" in text) == sends
        verdicts = validate([Artifact("slurm-ctl", "/etc/prometheus/alertmanager.yml", text, "alertmanager")])
        assert [(v.validator, v.ok) for v in verdicts] == [("amtool check-config", True)], verdicts


def test_alerts_by_e_mail_pass_amtool_and_the_site_says_where_alerts_go_without_the_webhooks_secret():
    """monitoring.alert_email becomes an email_configs receiver beside the webhook (amtool accepts both); the
    monitoring page names the receivers (a webhook by its host only) or warns that alerts reach no one; the docs
    site's copy of alertmanager.yml has the webhook's path cut, the node's copy keeps it."""
    from clusterbook.effects.validators import validate
    from clusterbook.model.loader import load_cluster
    from clusterbook.model.schema import AlertEmail
    from clusterbook.pure.docpages import where_alerts_go
    from clusterbook.pure.render.artifacts import published, render_artifacts
    from clusterbook.pure.render.monitoring import alertmanager_config

    c = load_cluster(ROOT / "cluster.yaml")
    warning = where_alerts_go(c)  # beefcake2: the operators' contact is not known, and decision D25 says so
    assert "Alerts reach no one yet" in warning and "as decision D25 accepts for now" in warning
    from clusterbook.pure.docpages import bringup_steps

    step = next(line for line in bringup_steps(c).splitlines() if "`invoke deploy.monitoring`" in line)
    assert "Its alerts reach no one yet (decision D25)" in step  # the bring-up says so where the operator is
    secret = "https://hooks.example.org/services/T000/B000/s3cr3t"
    mail = AlertEmail(to=["oncall@example.org"], sender="alertmanager@example.org", smarthost="smtp.example.org:587")
    both = c.model_copy(update={"monitoring": c.monitoring.model_copy(
        update={"alert_webhook": secret, "alert_email": mail})})
    text = alertmanager_config(both, "test")
    assert "to: oncall@example.org" in text and "smarthost: smtp.example.org:587" in text and secret in text
    verdicts = validate([Artifact("slurm-ctl", "/etc/prometheus/alertmanager.yml", text, "alertmanager")])
    assert [(v.validator, v.ok) for v in verdicts] == [("amtool check-config", True)], verdicts
    said = where_alerts_go(both).replace("\\", "")  # Markdown's escapes of . and - aside
    assert "reach no one" not in next(line for line in bringup_steps(both).splitlines() if "deploy.monitoring" in line)
    assert "a webhook on hooks.example.org" in said and "oncall@example.org" in said and "s3cr3t" not in said
    rendered = render_artifacts(both)
    assert any(secret in a.text for a in rendered)  # what the monitoring node gets
    shown = published(both, rendered)
    assert not any("s3cr3t" in a.text for a in shown)
    assert any("https://hooks.example.org/REDACTED-on-slurm-ctl-only" in a.text for a in shown)
