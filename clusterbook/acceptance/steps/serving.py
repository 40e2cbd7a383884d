"""Steps of serving.feature and router.feature: every tier answers, lists its models, wants its key."""

import json
import threading
import time

import httpx
import pytest
from pytest_bdd import then

from clusterbook.acceptance.steps.helpers import url_of
from clusterbook.effects import probes
from clusterbook.pure import kinds
from clusterbook.pure.kinds import plan_cluster
from clusterbook.pure.planner.residency import plan_residency
from clusterbook.pure.render.artifacts import selector_nodes, selector_rows


@then("every tier answers /health with 200")
def _health(cluster, transport, tiers):
    for tier in tiers:
        url = url_of(cluster, transport, tier) + "/health"
        status = httpx.get(url, timeout=10).status_code
        assert status == 200, f"{url}: expected 200, got {status}"


@then("every tier lists every model it serves")
def _lists_models(cluster, transport, tiers):
    for tier in tiers:
        key = probes.api_key(transport, cluster, tier)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        data = httpx.get(url_of(cluster, transport, tier) + "/v1/models", headers=headers, timeout=10).json()
        ids = {m["id"] for m in data["data"]}
        missing = set(tier.served_models) - ids
        assert not missing, f"tier {tier.name}: expected /v1/models to list {sorted(tier.served_models)}, " \
                            f"it lists {sorted(ids)}"


@then("a request sent to every tier at the same moment is answered by each, unless the plan says the tiers cannot "
      "run together")
def _all_at_once(cluster, transport, measured, tiers):
    """Issue 30: a placement that serves every tier is proven by serving them together, not one after another."""
    excluded = {frozenset((e.first, e.second)) for e in plan_residency(cluster, plan_cluster(cluster)).exclusions}
    together = [t for t in tiers if not any(frozenset((t.name, o.name)) in excluded for o in tiers)]
    if len(together) < 2:
        pytest.skip(f"fewer than two tiers the plan runs together among {', '.join(t.name for t in tiers)}")
    jobs = {t.name: (url_of(cluster, transport, t), t, probes.api_key(transport, cluster, t)) for t in together}
    answers: dict[str, object] = {}
    start = threading.Barrier(len(jobs))

    def ask(name: str) -> None:
        url, tier, key = jobs[name]
        start.wait()  # every request leaves at the same moment
        began = time.monotonic()
        try:
            answer = probes.ask(url, tier, key, max_tokens=32, timeout=120)  # a chat's long enough to overlap
            answers[name] = (answered(tier, answer), began, time.monotonic())
        except httpx.HTTPError as exc:
            answers[name] = exc

    threads = [threading.Thread(target=ask, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    failed = {n: a for n, a in answers.items() if not isinstance(a, tuple)}
    assert not failed and len(answers) == len(jobs), f"expected every tier to answer together, got {failed or answers}"
    chats = [a for n, a in answers.items() if cluster.tier(n).api == "chat"]  # an embedding takes milliseconds
    overlap = min(a[2] for a in chats) - max(a[1] for a in chats) if len(chats) > 1 else 1
    for name, (tokens, began, ended) in answers.items():
        assert tokens > 0, f"tier {name}: answered with nothing (no token, no vector)"
        measured(f"{name} answer while the others ran (s)", round(ended - began, 2))
    assert overlap > 0, "the requests did not overlap: no proof that the tiers served at the same time"
    skipped = sorted({t.name for t in tiers} - set(jobs))
    if skipped:
        measured("not asked together (the plan's exclusion)", ", ".join(skipped))


@then("every model of every tier answers its kind's request within the API response target")
def _every_model_answers(cluster, transport, measured, tiers):
    for tier in tiers:
        targets = cluster.targets_for(tier.name)
        limit = targets.api_response_s.target if targets and targets.api_response_s else None
        key = probes.api_key(transport, cluster, tier)
        for model in tier.served_models:
            started = time.monotonic()
            answer = probes.ask(url_of(cluster, transport, tier), tier, key, max_tokens=8, model=model)
            seconds = time.monotonic() - started
            measured(f"{model} answer (s)", round(seconds, 2))
            want = 8 if tier.api == "chat" else 1  # 8 tokens; one vector
            assert answered(tier, answer) == want, f"{model}: expected {want}, got {answer.get('usage')}"
            if limit is not None:
                # the first request to a router-mode model includes loading it
                assert seconds <= limit, f"{model}: expected an answer within {limit:g} s, took {seconds:.1f} s"


@then("every tier with an API key answers 401 to a request without it")
def _needs_key(cluster, transport):
    tiers = [t for t in cluster.tiers if t.api_key]
    if not tiers:
        pytest.skip("no tier has an API key configured")
    for tier in tiers:
        path, body = kinds.of(tier).request(tier.served_models[0])
        r = httpx.post(url_of(cluster, transport, tier) + path, timeout=30, json=body)
        assert r.status_code == 401, f"tier {tier.name}: expected 401 without the key, got {r.status_code}"


@then("on every node that has the selector, every task maps to the configured model and endpoint")
def _router(cluster, transport):
    if not cluster.router:
        pytest.skip("no model router in the cluster file")
    for node in selector_nodes(cluster):
        for row in selector_rows(cluster):
            out = transport.run(node, f"{cluster.router.script} --json {row['task']}")
            assert out.ok, f"{node}: {cluster.router.script} {row['task']} failed: {out.tail()}"
            assert json.loads(out.stdout) == row, f"{node}: task {row['task']}: expected {row}, got {out.stdout}"



def answered(tier, answer: dict) -> int:
    """What an answer holds: a chat completion's tokens, an embeddings answer's vectors."""
    return answer["usage"]["completion_tokens"] if tier.api == "chat" else len(answer["data"])
