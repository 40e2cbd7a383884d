"""The runbook file format (runbooks/*.yaml, runbooks/fragments/*.yaml): ordered steps of declarative actions, and
steps written once and used by name, validated like the cluster file."""

from __future__ import annotations

from typing import Annotated, Literal, Union, get_args

from pydantic import Discriminator, Field, Tag, model_validator

from clusterbook.model.schema import Name, Strict
from clusterbook.model.tierschema import TierKindName


class ActionBase(Strict):
    """Settings every action has."""

    timeout: int = Field(120, ge=1, description="seconds before the action fails")
    retries: int = Field(0, ge=0, description="extra attempts after a failure")
    delay: float = Field(2, ge=0, description="seconds between attempts")
    notify: list[Name] = Field(default_factory=list, description="handlers to run if this action changed something")
    when: str | None = Field(None, description="Jinja condition; the action is left out when false")
    name: str | None = Field(None, description="short label for output (a template; default: the command)")


class Upload(ActionBase):
    """Put a rendered file on the host; changed only when the content differs (sha256)."""

    upload: str = Field(pattern=r"^[a-z][a-z0-9_]*$",
                        description="artifact id (clusterbook/pure/layout.py): the rendered file of that id for the "
                                    "host (the runbook's tier's, the looped tier's, else the cluster's), at its path")


class Run(ActionBase):
    """Run a shell command (a template over the cluster) on the host."""

    run: str = Field(description="command template")
    unless: str | None = Field(None, description="skip (ok) when this command succeeds: the state is already right")
    until: str | None = Field(None, description="retry until stdout contains this text")
    abort_when: str | None = Field(None, description="stop retrying and fail at once when stdout contains this text "
                                                     "(a wait that sees the service exit)")
    waits_when: str | None = Field(None, description="stop retrying and end the run waiting, not failed (exit status "
                                                     "3), when stdout contains this text: a tier's job waits for "
                                                     "nodes other jobs hold")
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


ServiceState = Literal["started", "stopped", "restarted", "try-restarted", "reloaded"]


class Service(ActionBase):
    """systemd units brought to a state; the systemctl commands and their checks are written once, in Python
    (pure/services.py)."""

    service: str = Field(description="unit name(s), space-separated (a template)")
    state: ServiceState = Field("started", description="started: running (started or enabled --now); stopped; "
                                "restarted; try-restarted: restarted where running; reloaded: reloaded where running")
    enabled: bool | None = Field(None, description="true: started at boot too (enable); false: not (disable); "
                                                   "unset: left as it is")
    daemon_reload: bool = Field(True, description="reload systemd first where a unit file of these units (or of "
                                                  "also_units) differs from what systemd has loaded")
    also_units: str = Field("", description="units whose files these run (a timer's service): counted for the "
                                            "reload only (a template)")
    check: str | None = Field(None, description="a command that must succeed before the unit is restarted or "
                                                "reloaded (nginx -t -q)")


class Package(ActionBase):
    """A need's packages from the node's own repositories (apt; dnf with EPEL), unless the commands they give are
    already there (pure/packages.py knows both per OS)."""

    package: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="package need (pure/packages.py names it per OS)")
    timeout: int = Field(600, ge=1, description="seconds before the action fails")


class KeeperMark(ActionBase):
    """A SLURM tier's mark for the keeper (pure/slurmjob.py owns the marker files): wanted, or none."""

    keeper_mark: str = Field(description="the tier (a template)")
    state: Literal["wanted", "unmarked"] = Field(description="wanted: the keeper keeps a job (a tier on demand "
                                                            "may stay released); unmarked: it leaves the tier stopped")


ACTION_KINDS = {"upload": Upload, "run": Run, "wait_port": WaitPort, "wait_http": WaitHttp, "submit_job": SubmitJob,
                "wait_job": WaitJob, "wait_gateway": WaitGateway, "service": Service, "package": Package,
                "keeper_mark": KeeperMark}  # an action's kind is the one of these keys it has


def _action_kind(value: object) -> str | None:
    keys = [k for k in ACTION_KINDS if isinstance(value, dict) and k in value]
    return keys[0] if len(keys) == 1 else None


Action = Annotated[Union[tuple(Annotated[model, Tag(key)] for key, model in ACTION_KINDS.items())],
                   Discriminator(_action_kind, custom_error_type="action_kind",
                                 custom_error_message="an action has exactly one of: " + ", ".join(ACTION_KINDS))]
Scalar = str | int | float | bool


class StepBody(Strict):
    """What a step does: the same actions on every target host, hosts in parallel."""

    title: str = Field(description="one line")
    explain: str = Field("", description="Markdown shown in the docs")
    hosts: str = Field(description="selector template: all, a node, a role, TIER.head / TIER.workers / TIER.nodes")
    when: str | None = Field(None, description="Jinja condition; the step is left out when false")
    for_each: Literal["model", "systemd_tier"] | None = Field(
        None, description="repeat the actions: for each model the host needs (model), or each systemd tier (each)")
    actions: list[Action] = Field(min_length=1, description="actions in order")


class Step(Strict):
    """One step of a runbook: its own actions, or a fragment's (`use:`, with arguments)."""

    id: Name = Field(description="step id, unique in the runbook")
    title: str | None = Field(None, description="one line (a step that uses a fragment has the fragment's)")
    explain: str = Field("", description="Markdown shown in the docs")
    hosts: str | None = Field(None, description="selector template: all, a node, a role, TIER.head / TIER.workers / "
                                                "TIER.nodes")
    when: str | None = Field(None, description="Jinja condition; the step is left out when false (with `use:`, "
                                               "and the fragment's own)")
    for_each: Literal["model", "systemd_tier"] | None = Field(
        None, description="repeat the actions: for each model the host needs (model), or each systemd tier (each)")
    actions: list[Action] = Field(default_factory=list, description="actions in order")
    use: Name | None = Field(None, description="a fragment (runbooks/fragments/NAME.yaml): its title, hosts and "
                                               "actions")
    with_: dict[Name, Scalar] = Field(default_factory=dict, alias="with",
                                      description="the fragment's arguments (its templates see them as args.NAME)")
    parts: list[Name] = Field(default_factory=list, description="named parts of the runbook the step belongs to: an "
                              "operation may run one part only (deploy.build, deploy.<tier>-workers), and Python "
                              "finds a step by its part, never by its id")

    @model_validator(mode="after")
    def _own_or_used(self) -> Step:
        if self.use is None:
            missing = [f for f in ("title", "hosts") if getattr(self, f) is None]
            missing += [] if self.actions else ["actions"]
            if missing:
                raise ValueError(f"a step without `use:` needs {', '.join(missing)}")
        else:
            given = [f for f in ("title", "hosts", "for_each") if getattr(self, f) is not None]
            given += ["explain"] * bool(self.explain) + ["actions"] * bool(self.actions)
            if given:
                raise ValueError(f"a step that uses a fragment takes its {', '.join(given)} from the fragment")
        if self.with_ and self.use is None:
            raise ValueError("`with:` gives a fragment's arguments: add `use:`")
        return self


class Handler(Strict):
    """A command run once per host at the end of a step, when an action notified it: a shell command, or systemd
    units restarted or reloaded (pure/services.py)."""

    run: str | None = Field(None, description="command template")
    service: str | None = Field(None, description="unit name(s), space-separated (a template)")
    state: Literal["restarted", "try-restarted", "reloaded"] = Field("restarted", description="what happens to them")
    daemon_reload: bool = Field(False, description="systemctl daemon-reload first (alone when no service is named)")
    check: str | None = Field(None, description="a command that must succeed before the restart or reload")
    timeout: int = Field(120, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> Handler:
        if (self.run is None) == (self.service is None and not self.daemon_reload):
            raise ValueError("a handler has either `run:` or `service:`/`daemon_reload:`")
        return self


class Param(Strict):
    """A fragment's parameter."""

    description: str
    default: Scalar | None = Field(None, description="its value when a step gives none (none: the step must)")


class Fragment(StepBody):
    """A step written once (runbooks/fragments/NAME.yaml), used by runbooks' steps by name; its templates see the
    step's arguments as args.NAME."""

    id: Name = Field(description="the fragment's name: its file's")
    params: dict[Name, Param] = Field(default_factory=dict)
    handlers: dict[Name, Handler] = Field(default_factory=dict, description="handlers its actions notify")

    @model_validator(mode="after")
    def _refs(self) -> Fragment:
        for action in self.actions:
            for name in action.notify:
                if name not in self.handlers:
                    raise ValueError(f"fragment {self.id} notifies unknown handler '{name}'")
        return self


class Runbook(Strict):
    """A runbook file."""

    id: Name = Field(description="runbook id; invoke task names derive from it")
    title: str = Field(description="title (a template)")
    explain: str = Field("", description="Markdown introduction (a template)")
    scope: Literal["cluster", "tier"] = Field("cluster",
                                              description="tier: run once per tier given on the command line")
    kinds: list[TierKindName] = Field(default_factory=lambda: list(get_args(TierKindName)),
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
            for action in step.actions:  # a fragment's notify its own handlers (checked with the fragment)
                for name in action.notify:
                    if name not in self.handlers:
                        raise ValueError(f"step {step.id} notifies unknown handler '{name}'")
        return self
