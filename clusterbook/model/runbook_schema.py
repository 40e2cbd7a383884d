"""The runbook file format (runbooks/*.yaml): ordered steps of declarative actions, validated like the cluster file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from clusterbook.model.schema import Name, Strict


class ActionBase(Strict):
    """Settings every action has."""

    timeout: int = Field(120, ge=1, description="seconds before the action fails")
    retries: int = Field(0, ge=0, description="extra attempts after a failure")
    delay: float = Field(2, ge=0, description="seconds between attempts")
    notify: list[Name] = Field(default_factory=list, description="handlers to run if this action changed something")


class Upload(ActionBase):
    """Put a rendered file on the host; changed only when the content differs (sha256)."""

    upload: str = Field(pattern=r"^[a-z][a-z0-9_]*$",
                        description="artifact id (clusterbook/pure/layout.py): the rendered file of that id for the "
                                    "host (the runbook's tier's, the looped tier's, else the cluster's), at its path")


class Run(ActionBase):
    """Run a shell command (a template over the cluster) on the host."""

    run: str = Field(description="command template")
    name: str | None = Field(None, description="short label for output (a template; default: the command)")
    unless: str | None = Field(None, description="skip (ok) when this command succeeds: the state is already right")
    until: str | None = Field(None, description="retry until stdout contains this text")
    abort_when: str | None = Field(None, description="stop retrying and fail at once when stdout contains this text "
                                                     "(a wait that sees the service exit)")
    changed_when: Literal["always", "never"] = Field("always", description="what a successful run reports")


class UnitWatch(ActionBase):
    """A wait may watch the systemd unit that should answer: it then fails at once, with the end of the unit's
    journal, when the unit keeps exiting (pure/waits.py)."""

    unit: str | None = Field(None, description="systemd unit to watch (a template)")
    restart_sec: str | None = Field(None, description="the unit's RestartSec= (a template): a unit seen restarting is "
                                                      "looked at again after that")


class WaitPort(UnitWatch):
    """Wait until a TCP port is listening on the host (checked with ss on the host itself); `timeout` is the whole
    wait."""

    wait_port: str = Field(description="port (a template)")


class WaitHttp(UnitWatch):
    """Wait until a URL answers with a status, asked from the host itself; `timeout` is the whole wait."""

    wait_http: str = Field(description="URL template")
    status: int = Field(200, description="expected HTTP status")


class SubmitJob(ActionBase):
    """Submit a SLURM tier's job on the controller, its script's digest as the job's comment (pure/slurmjob.py)."""

    submit_job: str = Field(description="the tier (a template)")
    replace: Literal["older", "always"] = Field("older", description="older: skip when a job already runs this very "
                                                                     "script; always: cancel it and submit again")


class WaitJob(ActionBase):
    """Wait until a SLURM tier's job runs and its registered endpoint answers /health; fails at once when the job
    leaves the queue. `timeout` is the whole wait."""

    wait_job: str = Field(description="the tier (a template)")


class WaitGateway(ActionBase):
    """Rewrite the gateway's upstreams and wait until the tier's route answers /health. `timeout` is the whole
    wait."""

    wait_gateway: str = Field(description="the tier (a template)")


Action = Upload | Run | WaitPort | WaitHttp | SubmitJob | WaitJob | WaitGateway


class Step(Strict):
    """One step: the same actions on every target host, hosts in parallel."""

    id: Name = Field(description="step id, unique in the runbook")
    title: str = Field(description="one line")
    explain: str = Field("", description="Markdown shown in the docs")
    hosts: str = Field(description="selector template: all, a node, a role, TIER.head / TIER.workers / TIER.nodes")
    when: str | None = Field(None, description="Jinja condition; the step is left out when false")
    for_each: Literal["model", "systemd_tier"] | None = Field(
        None, description="repeat the actions: for each model the host needs (model), or each systemd tier (each)")
    actions: list[Action] = Field(min_length=1, description="actions in order")
    parts: list[Name] = Field(default_factory=list, description="named parts of the runbook the step belongs to: an "
                              "operation may run one part only (deploy.build, deploy.<tier>-workers), and Python "
                              "finds a step by its part, never by its id")


class Handler(Strict):
    """A command run once per host at the end of a step, when an action notified it."""

    run: str = Field(description="command template")
    timeout: int = Field(120, ge=1)


class Runbook(Strict):
    """A runbook file."""

    id: Name = Field(description="runbook id; invoke task names derive from it")
    title: str = Field(description="title (a template)")
    explain: str = Field("", description="Markdown introduction (a template)")
    scope: Literal["cluster", "tier"] = Field("cluster",
                                              description="tier: run once per tier given on the command line")
    kinds: list[Literal["router", "rpc"]] = Field(default_factory=lambda: ["router", "rpc"],
                                                  description="tier kinds it applies to (scope tier)")
    steps: list[Step] = Field(min_length=1)
    generation: bool = Field(False, description="keep every file it replaces (and the engine link it moves) as a "
                                                "generation on each node, which `invoke rollback` restores")
    handlers: dict[Name, Handler] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _refs(self) -> Runbook:
        ids = [s.id for s in self.steps]
        if len(ids) != len(set(ids)):
            raise ValueError("step ids must be unique")
        for step in self.steps:
            for action in step.actions:
                for name in action.notify:
                    if name not in self.handlers:
                        raise ValueError(f"step {step.id} notifies unknown handler '{name}'")
        return self
