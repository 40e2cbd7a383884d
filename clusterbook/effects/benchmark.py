"""Benchmark a live tier over its HTTP API: baseline prompts, a concurrency sweep and a context sweep."""

from __future__ import annotations

import itertools
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from clusterbook.effects import probes

# The seeds' baseline tests (beads task 0o50): short, long, and code generation.
PROMPTS = {
    "short": "Say hello from distributed inference.",
    "long": "Write a comprehensive analysis of distributed inference architectures. Include code examples in Rust.",
    "code": "Write a Rust function to calculate fibonacci numbers.",
}

_NONCE = itertools.count(int(time.time()))  # each request's first line: no two share a cached prompt

# More server slots are worth it when aggregate throughput grows by at least this factor over one slot/client.
PARALLEL_GAIN = 1.2


@dataclass
class Figure:
    """Median and spread of repeated measurements."""

    median: float
    low: float
    high: float
    samples: list[float]

    @classmethod
    def of(cls, values: list[float]) -> Figure:
        return cls(statistics.median(values), min(values), max(values), [round(v, 3) for v in values])


@dataclass
class BenchReport:
    tier: str
    model: str
    url: str
    started: str
    decode_bound_tps: float | None
    baseline: dict[str, dict[str, Figure]] = field(default_factory=dict)  # prompt -> metric -> figure
    concurrency: list[dict] = field(default_factory=list)
    context: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _one(url: str, model: str, key: str | None, prompt: str, tokens: int) -> probes.ChatTiming:
    """Decode and prompt speed from a plain request (llama.cpp's timings); TTFT from a streamed one. Each begins with
    a line of its own, so neither reuses the other's prompt from the server's cache: the prompt is read whole."""
    answer = probes.chat(url, model, key, max_tokens=tokens, prompt=f"Request {next(_NONCE)}.\n{prompt}",
                         timeout=600)
    timings = answer.get("timings", {})
    ttft = probes.timed_chat(url, model, key, 1, f"Request {next(_NONCE)}.\n{prompt}").ttft_s
    return probes.ChatTiming(ttft, timings.get("predicted_per_second", 0.0), timings.get("prompt_per_second", 0.0),
                             timings.get("predicted_n", 0), timings.get("prompt_n", 0))


def _decode_only(url: str, model: str, key: str | None, prompt: str, tokens: int) -> float:
    answer = probes.chat(url, model, key, max_tokens=tokens, prompt=prompt, timeout=600)
    return answer.get("timings", {}).get("predicted_per_second", 0.0)


def decode_samples(url: str, model: str, key: str | None, tokens: int = 128, repeats: int = 3) -> list[float]:
    """Decode tokens/s of the baseline prompts, each repeated, after a warm-up: what the bench's baseline measures."""
    _decode_only(url, model, key, "warm up", 8)
    return [_decode_only(url, model, key, prompt, tokens) for prompt in PROMPTS.values() for _ in range(repeats)]


def baseline_decode_samples(report: BenchReport) -> list[float]:
    return [s for figures in report.baseline.values() for s in figures["decode_tps"].samples]


def _count_tokens(url: str, model: str, key: str | None, text: str) -> int:
    """Tokens of a text by the server's own tokenizer (llama-server POST /tokenize)."""
    import httpx  # lazy: httpx (0.2 s) only when a benchmark runs (see probes.chat)

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{url}/tokenize", headers=headers, json={"content": text, "model": model}, timeout=30)
    return len(r.json().get("tokens", [])) if r.status_code == 200 else len(text) // 4


def run_bench(url: str, model: str, key: str | None, tier: str, bound: float | None, *, tokens: int = 128,
              repeats: int = 3, clients: tuple[int, ...] = (1, 2, 4, 8), contexts: tuple[int, ...] = (256, 1024),
              max_context: int | None = None, progress=lambda text: None,
              planned_prompt_s=lambda tokens: None) -> BenchReport:
    """The baseline prompts, the concurrency sweep and the context sweep; each context's prompt time beside
    planned_prompt_s(its tokens), the planner's estimate (None where it has none)."""
    report = BenchReport(tier, model, url, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), bound)
    _one(url, model, key, "warm up", 8)
    for name, prompt in PROMPTS.items():
        progress(f"baseline: {name} prompt × {repeats}")
        runs = [_one(url, model, key, prompt, tokens) for _ in range(repeats)]
        report.baseline[name] = {"decode_tps": Figure.of([r.decode_tps for r in runs]),
                                 "prompt_tps": Figure.of([r.prompt_tps for r in runs]),
                                 "ttft_s": Figure.of([r.ttft_s for r in runs])}
    for n in clients:
        progress(f"concurrency: {n} client(s)")
        report.concurrency.append(concurrency_point(url, model, key, n, tokens))
    sentence = "Context line about the cluster and its tiers. "
    per_sentence = max(1, _count_tokens(url, model, key, sentence))
    for ctx in contexts:
        if max_context and ctx + tokens + 64 > max_context:
            continue
        progress(f"context: about {ctx} prompt tokens")
        prompt = sentence * max(1, ctx // per_sentence)
        run = _one(url, model, key, prompt, tokens)
        planned = planned_prompt_s(run.prompt_tokens or ctx)
        report.context.append({"prompt_tokens_about": ctx, "prompt_tokens": run.prompt_tokens,
                               "prompt_tps": round(run.prompt_tps, 1), "decode_tps": round(run.decode_tps, 1),
                               "ttft_s": round(run.ttft_s, 3),
                               "prompt_s": round(run.prompt_tokens / run.prompt_tps, 3) if run.prompt_tps else None,
                               "planned_prompt_s": None if planned is None else round(planned, 3)})
    return report


def _or_dash(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def concurrency_point(url: str, model: str, key: str | None, clients: int, tokens: int) -> dict:
    """n clients at once, one request each: aggregate tokens/s over the wall clock, and per-client figures."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        runs = list(pool.map(lambda _: probes.timed_chat(url, model, key, tokens, PROMPTS["code"]), range(clients)))
    wall = time.monotonic() - started
    return {"clients": clients, "aggregate_tps": round(clients * tokens / wall, 1),
            "per_client_tps": round(statistics.median(r.decode_tps for r in runs), 1),
            "ttft_s": round(statistics.median(r.ttft_s for r in runs), 3), "wall_s": round(wall, 2)}


def markdown(report: BenchReport, card: str = "") -> str:
    bound = f"{report.decode_bound_tps:.1f} tok/s" if report.decode_bound_tps else "n/a"
    lines = [f"Bench of tier **{report.tier}** ({report.model}) at `{report.url}`, {report.started}"
             + (f", on {card}" if card else "") + f". Planner's decode bound: **{bound}**.", "",
             "| prompt | decode tok/s (median, range) | prompt tok/s | TTFT s | decode / bound |",
             "|---|---|---|---|---|"]
    for name, figures in report.baseline.items():
        d, p, t = figures["decode_tps"], figures["prompt_tps"], figures["ttft_s"]
        share = f"{d.median / report.decode_bound_tps:.0%}" if report.decode_bound_tps else "–"
        lines.append(f"| {name} | {d.median:.1f} ({d.low:.1f}–{d.high:.1f}) | {p.median:.0f} | "
                     f"{t.median:.3f} | {share} |")
    lines += ["", "| clients | aggregate tok/s | per client tok/s | TTFT s |", "|---|---|---|---|"]
    lines += [f"| {c['clients']} | {c['aggregate_tps']} | {c['per_client_tps']} | {c['ttft_s']} |"
              for c in report.concurrency]
    lines += ["", "| prompt tokens | prompt tok/s | decode tok/s | TTFT s | prompt s | planned prompt s |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {c.get('prompt_tokens') or c['prompt_tokens_about']} | {c['prompt_tps']} | {c['decode_tps']} | "
              f"{c['ttft_s']} | {_or_dash(c.get('prompt_s'))} | {_or_dash(c.get('planned_prompt_s'))} |"
              for c in report.context]
    if report.concurrency:
        one = report.concurrency[0]["aggregate_tps"]
        best = max(report.concurrency, key=lambda c: c["aggregate_tps"])
        if best["aggregate_tps"] >= PARALLEL_GAIN * one:
            lines += ["", f"Aggregate throughput grows to {best['aggregate_tps']} tok/s at {best['clients']} clients "
                          f"({best['aggregate_tps'] / one:.1f}× one client): the tier's `parallel` can rise toward "
                          f"{best['clients']} if the latency per client is acceptable."]
        else:
            lines += ["", "No aggregate gain from concurrent clients at the tier's current `parallel`: keep it, or "
                          "raise `parallel` and run the sweep again."]
    return "\n".join(lines) + "\n"
