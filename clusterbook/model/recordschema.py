"""The cluster file's records: targets and their levels, decisions and the claims they judge, rehearsals,
observations, the earlier setup, success criteria and troubleshooting."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clusterbook.model.schemabase import CacheType, Strict
from clusterbook.model.valuetypes import (
    AbsPath,
    Line,
    Name,
    Prose,
    Quantization,
    UserName,
)


class Level(Strict):
    """A metric's levels: target, acceptable and critical."""

    target: float = Field(ge=0, le=1_000_000, description="what we aim for")
    acceptable: float = Field(ge=0, le=1_000_000, description="still fine")
    critical: float = Field(ge=0, le=1_000_000, description="act now")


DEFAULT_RECOVERY = Level(target=120, acceptable=200, critical=300)  # a tier whose targets give no recovery_s


class Targets(Strict):
    """Success criteria of one tier (direction per metric is fixed: see the reference)."""

    tier: Name = Field(description="tier name")
    decode_tps: Level | None = Field(None, description="decode tokens/s, higher is better")
    ttft_s: Level | None = Field(None, description="time to first token, seconds, lower is better")
    gpu_util_pct: Level | None = Field(None, description="GPU utilisation during generation, %, higher is better")
    gpu_mem_gib: Level | None = Field(None, description="memory per GPU, GiB, lower is better")
    fabric_gbps: Level | None = Field(None, description="fabric bandwidth during inference, Gbit/s, higher is better")
    recovery_s: Level | None = Field(None, description="answer again after a worker crash, seconds, lower is better")
    api_response_s: Level | None = Field(None, description="a short request answers within, seconds, lower is better")

    @field_validator("decode_tps", "ttft_s", "gpu_util_pct", "gpu_mem_gib", "fabric_gbps", "recovery_s",
                     "api_response_s")
    @classmethod
    def _meaningful(cls, level: Level | None, info: ValidationInfo) -> Level | None:
        """Each metric's levels within what it can mean, ordered from the best."""
        if level is None:
            return level
        metric = info.field_name
        if max(level.target, level.acceptable, level.critical) > LEVEL_MAX[metric][0]:
            most, unit = LEVEL_MAX[metric]
            raise ValueError(f"a level is at most {most:,} {unit}")
        lo_first = metric in LOWER_IS_BETTER
        seq = [level.target, level.acceptable, level.critical]
        if seq != sorted(seq, reverse=not lo_first):
            raise ValueError("levels must be ordered " + ("target <= acceptable <= critical" if lo_first
                                                          else "target >= acceptable >= critical"))
        return level


LOWER_IS_BETTER = {"ttft_s", "gpu_mem_gib", "recovery_s", "api_response_s"}


LEVEL_MAX = {  # the most a level can mean: past it, a target is a typo (or an alert that waits for ever)
    "decode_tps": (100_000, "tok/s"), "ttft_s": (3_600, "s"), "gpu_util_pct": (100, "%"),
    "gpu_mem_gib": (4_096, "GiB"), "fabric_gbps": (10_000, "Gbit/s"), "recovery_s": (86_400, "s (a day)"),
    "api_response_s": (3_600, "s")}


HIGHER_IS_BETTER = {"decode_tps", "gpu_util_pct", "fabric_gbps"}


class Claim(Strict):
    """A figure a seed document claimed; the planner computes the real one and the docs show both."""

    source: Line = Field(description="where the claim was made, e.g. seed 000")
    what: Line = Field(description="what the claim is about")
    metric: Literal["weights_gb", "decode_tps", "context"] = Field(
        description="weights_gb: model size; decode_tps: decode speed on a tier; context: context that fits a tier")
    claimed: float = Field(ge=1e-6, le=1e9, description="the claimed value")
    model: Name | None = Field(None, description="model id (or give params_b and quantization)")
    tier: Name | None = Field(None, description="tier whose hardware decodes it (decode_tps)")
    params_b: float | None = Field(None, ge=1e-6, le=100_000,
                                   description="parameters, billions (a model not in the file)")
    quantization: Quantization | None = Field(None, description="GGUF file type (a model not in the file)")


class Contact(Strict):
    """Someone to reach, and how."""

    name: Line = Field(description="a person, team or rota")
    contact: Line = Field(description="how to reach them: an address, a chat channel, a phone number")
    when: Line = Field("", description="when to go to them (escalation: after how long, for what)")


class Owner(Contact):
    """Who answers for the cluster, and whom to escalate to."""

    escalation: list[Contact] = Field(default_factory=list, max_length=10,
                                      description="in order: whom to reach when the owner does not answer")


class Decision(Strict):
    """An entry of the decision log."""

    id: Name = Field(description="short id, e.g. D01")
    title: Line = Field(description="one line")
    date: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description="YYYY-MM-DD")
    context: Prose = Field(description="what forced the decision")
    decision: Prose = Field(description="what was decided")
    consequences: Prose = Field(description="what follows")
    sources: list[Line] = Field(default_factory=list, description="seed documents or issues it rests on")
    supersedes: list[Name] = Field(default_factory=list, description="earlier decisions of the log this one "
                                   "replaces: the log says so at their top, and keeps them as the record of their day")
    claims: list[Claim] = Field(default_factory=list,
                                description="figures this decision refutes, computed by the planner")


class RehearsedSettings(Strict):
    """The tier settings a rehearsal ran with (the planner plans the same for the comparison)."""

    ctx_size: int = Field(ge=256, le=1_048_576, description="--ctx-size")
    ubatch_size: int = Field(ge=1, le=1_048_576, description="--ubatch-size (and --batch-size)")
    flash_attn: Literal["on", "off"] = Field(description="flash attention")
    cache_type_k: CacheType = Field(description="K cache type")
    cache_type_v: CacheType = Field(description="V cache type")


class Rehearsal(Strict):
    """A figure measured at full size on the tier's own command lines, on other cards held to this cluster's."""

    tier: Name = Field(description="the RPC tier rehearsed")
    what: Literal["peak_gib", "load_s", "recovery_s", "decode_tps", "prompt_tps", "prompt_s"] = Field(
        description="peak_gib: a device's peak memory through a prompt that fills the context; load_s: start to "
                    "/health; recovery_s: a worker's SIGKILL to /health; decode_tps: at an empty context; prompt_tps: "
                    "through a full prompt; prompt_s: the server's time for a prompt of prompt_tokens before its "
                    "first token")
    prompt_tokens: int | None = Field(None, ge=1, le=1_048_576, description="a prompt_s figure's prompt length")
    device: Name | None = Field(None, description="llama.cpp's device name (CUDA0, RPC0, ...), for peak_gib")
    value: float = Field(ge=0, le=1_000_000, description="the figure")
    settings: RehearsedSettings = Field(description="what the tier ran with")
    card: Line = Field(description="the card it ran on and how it was held to this cluster's")
    card_bandwidth_gbs: float | None = Field(None, ge=10, le=100_000,
                                             description="that card's memory bandwidth, GB/s: a decode_tps figure "
                                                         "is compared with the planner's bound on it")
    card_tflops: float | None = Field(None, ge=0.1, le=100_000,
                                      description="that card's dense FP16 tensor TFLOP/s: with card_bandwidth_gbs, a "
                                                  "prompt figure is compared with the planner's estimate on it")
    source: Line = Field(description="where the raw figures are, e.g. benchmarks/results/h200x2-full-size")
    date: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description="YYYY-MM-DD")


class Observation(Strict):
    """A figure measured on this cluster before clusterbook (the seeds), kept with its source and date."""

    what: Line = Field(description="what was measured, e.g. generation speed at 64K tokens")
    value: float = Field(ge=0, le=1e12, description="the figure")
    unit: Line = Field(description="its unit, e.g. tok/s, MiB, s")
    tier: Name | None = Field(None, description="the tier it was measured on")
    setup: Line = Field("", description="how it ran, where that differs from the cluster file today")
    source: Line = Field(description="where it was recorded, e.g. seed 004")
    date: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description="YYYY-MM-DD")


LEGACY_UNIT = r"^(llama|ai-|vllm|ollama)[a-z0-9_.@-]*$"  # the inference services clusterbook replaces, nothing else


LEGACY_FOLDERS = ("/etc/nginx/", "/usr/local/bin/", "/usr/local/sbin/", "/etc/systemd/system/")


class LegacyUnit(Strict):
    """A systemd unit of the earlier setup, stopped and disabled (never deleted)."""

    name: str = Field(max_length=64, description="unit name without .service; only an inference service's (llama…, "
                                                 "ai-…, vllm…, ollama…): sshd, slurmd or nginx can never be named here")
    nodes: list[Name] = Field(min_length=1, description="the nodes that run it")

    @field_validator("name")
    @classmethod
    def _inference_service(cls, value: str) -> str:
        if not re.fullmatch(LEGACY_UNIT, value):
            raise ValueError(f"'{value}' is not an inference service's unit: only units named llama…, ai-…, vllm… or "
                             "ollama… can be retired (lower-case letters, digits and . _ @ -)")
        return value


class LegacyFile(Strict):
    """A file of the earlier setup, moved aside into generations_dir/legacy/ (kept, never deleted)."""

    node: Name = Field(description="the node that holds it")
    path: AbsPath = Field(description="where it is: under /etc/nginx/, /usr/local/bin/, /usr/local/sbin/, "
                                      "/etc/systemd/system/ or storage.shared_dir, and not a file clusterbook writes")


class Legacy(Strict):
    """What ran before clusterbook, retired by `invoke stop.legacy` before the tiers need its GPUs and ports: its
    SLURM jobs cancelled (in the tiers' partitions only), its units stopped and disabled, its files moved aside."""

    source: Line = Field(description="where it is described, e.g. seed 004")
    slurm_jobs: list[Annotated[str, Field(pattern=LEGACY_UNIT, max_length=64)]] = Field(
        default_factory=list, max_length=50, description="job names to cancel: an inference service's (llama…, ai-…, "
                                                         "vllm…, ollama…), and only slurm_user's")
    slurm_user: UserName | None = Field(None, description="the user whose jobs they are (seed 004: root); scancel "
                                                          "and squeue take --user, so no other user's job of that "
                                                          "name is touched")
    units: list[LegacyUnit] = Field(default_factory=list, max_length=50, description="systemd units to stop")
    files: list[LegacyFile] = Field(default_factory=list, max_length=200, description="files to move aside")
    models_dir: AbsPath | None = Field(None, description="where the earlier setup kept its model files: models.fetch "
                                                         "takes a file from there (a hard link, else a copy) when it "
                                                         "is whole, instead of downloading it again; it stays there")


class Criterion(Strict):
    """A success criterion the cluster's earlier records set, and what checks it now: acceptance scenarios (by
    name, as `invoke verify --only` takes them) or the decision that replaced it."""

    text: Line = Field(description="the criterion, in its source's words")
    source: Line = Field(description="where it was set, e.g. seed 003")
    scenarios: list[Line] = Field(default_factory=list, max_length=20,
                                  description="the acceptance scenarios that check it (their names)")
    decision: Name | None = Field(None, description="the decision that changed or replaced it (its id)")
    note: Line = Field("", description="what differs today, in one line")


class FixStep(Strict):
    """A fix command, a Jinja template over the cluster, run on some hosts: a diagnosis (read-only, bounded in time,
    safe to paste at 3 a.m.) unless it says it acts."""

    hosts: Line = Field("local", description="where to run: local, all, a node, a role, gateway, "
                                            "TIER.head / TIER.workers / TIER.nodes")
    run: Prose = Field(description="command template; variables: cluster, tier, node, engine, units")
    act: bool = Field(False, description="it changes something (restarts, requeues, cancels, loads): shown apart, "
                                         "under a warning, with what it disturbs")
    disturbs: Line = Field("", description="with act: what it disturbs, e.g. the tier's users for its reload")

    @model_validator(mode="after")
    def _act_says_what_it_disturbs(self) -> FixStep:
        if self.act and not self.disturbs:
            raise ValueError("a step that acts says what it disturbs (disturbs: …)")
        return self


class Trouble(Strict):
    """A troubleshooting entry: symptom -> cause -> fix."""

    id: Name = Field(description="short id")
    symptom: Line = Field(min_length=1, description="what the operator sees")
    cause: Prose = Field(description="why it happens")
    tier: Name | None = Field(None, description="tier it concerns (template variable `tier`)")
    each_tier: bool | Literal["slurm", "systemd"] = Field(
        False, description="it concerns every tier (true), or every tier of that manager: the site shows it once per "
                           "tier (ID-TIER), its commands filled with that tier's (hosts `tier.nodes`, `tier.head`, "
                           "`tier.workers`), and each tier's alerts lead to their own; leave out tier")
    fix: list[FixStep] = Field(min_length=1, description="commands, in order")

    @model_validator(mode="after")
    def _one_tier_or_each(self) -> Trouble:
        if self.each_tier and self.tier:
            raise ValueError("an entry for every tier (each_tier) names no tier of its own: leave out tier")
        return self

