"""Steps of embeddings.feature: an embeddings tier's vectors, through the gateway where the tier has a route."""

import math

import httpx
import pytest
from pytest_bdd import then

from clusterbook.acceptance.steps.helpers import through_gateway, url_of
from clusterbook.effects import probes


@then("every embeddings tier answers three inputs through the gateway with three vectors of its model's width, "
      "the first and the last alike")
def _vectors(cluster, transport, tiers, measured):
    chosen = [t for t in tiers if t.api == "embeddings"]
    if not chosen:
        pytest.skip("no embeddings tier in this cluster file")
    routed = {r.tier for r in cluster.gateway.routes} if cluster.gateway else set()
    for tier in chosen:
        url = through_gateway(cluster, tier) if tier.name in routed else url_of(cluster, transport, tier)
        key = probes.api_key(transport, cluster, tier)
        model = cluster.model(tier.model)
        inputs = ["The cluster belongs to VASP first.", "llama.cpp splits a model by layers.",
                  "The cluster belongs to VASP first."]
        r = httpx.post(f"{url}/v1/embeddings", timeout=60, headers={"Authorization": f"Bearer {key}"} if key else {},
                       json={"model": model.id, "input": inputs})
        assert r.status_code == 200, f"{url}/v1/embeddings: expected 200, got {r.status_code}: {r.text[:200]}"
        vectors = [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
        width = model.architecture.embedding
        measured(f"{tier.name} vector width", len(vectors[0]))
        assert len(vectors) == 3 and all(len(v) == width for v in vectors), \
            f"tier {tier.name}: expected 3 vectors of {width}, got {[len(v) for v in vectors]}"
        assert all(math.isfinite(x) for v in vectors for x in v), f"tier {tier.name}: a vector holds NaN or inf"
        same, other = cosine(vectors[0], vectors[2]), cosine(vectors[0], vectors[1])
        measured(f"{tier.name} cosine of the same text, of two texts", f"{same:.6f}, {other:.6f}")
        assert same > 0.9999 and other < same, \
            f"tier {tier.name}: the same text gave another vector (cosine {same:.6f}), or two texts alike ({other:.6f})"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
