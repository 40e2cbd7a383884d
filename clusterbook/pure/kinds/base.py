"""What a tier kind is to the rest of clusterbook: the questions each kind answers in its own module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clusterbook.model.schema import Cluster
from clusterbook.pure.flags import Flag
from clusterbook.pure.planner.capacity import TierPlan
from clusterbook.pure.planner.shape import Shape
from clusterbook.pure.render.artifact import Artifact


@dataclass(frozen=True)
class JobSteps:
    """A SLURM tier's job: the steps before its server (an RPC tier's workers), what the job runs, and the server
    step's name."""

    before: list[dict]
    summary: str
    server: str


@dataclass(frozen=True)
class TierKind:
    """One kind of tier (router, rpc, …): its words, its llama-server flags, its capacity plan, its files and its
    SLURM job. Everything else about a tier is the same for every kind, or a setting its schema class answers."""

    name: str
    what: str  # how the pages name it: "router mode", "split over RPC"
    restart_order: str  # how a restart goes, for the pages ("" or " (workers, then head)")
    deploys: str  # how a deploy goes under systemd, for the pages
    deploy_order: str  # the same, after the deploy's command on the guide ("" where it is one step)
    server_word: str  # what its llama-server is called on the architecture diagram
    server_flags: Callable[[Cluster, object], list[Flag]]
    plan: Callable[[Cluster, object, Shape | None], TierPlan]
    one_model: bool  # it serves one model file: planned from its GGUF header where at hand, with its own cache,
    # batch and flash-attention settings (a prompt's time is planned for it)
    files: Callable[[Cluster, object, bool], list[Artifact]]  # its own files (systemd: the units too)
    job: Callable[[Cluster, object], JobSteps]
    http_servers: Callable[[Cluster, object], list[str]]  # the nodes that may serve its HTTP API
    role: Callable[[object, str, str], str]  # what it runs on a node (head, worker), for a device's share
    request: Callable[[str], tuple[str, dict]]  # one short request to a model of it: (path, JSON body)
    endpoint: tuple[str, str]  # what its clients POST to, and what it answers (the API page)
    examples: Callable[[Cluster, object, float | None], dict[str, str]]  # the API page's tabs, curl first


def chat_request(model: str) -> tuple[str, dict]:
    """A one-token chat completion: the probe's and the scenarios' request to a chat tier (its time is the time to
    first token)."""
    return "/v1/chat/completions", {"model": model, "max_tokens": 1,
                                    "messages": [{"role": "user", "content": "Say OK."}]}
