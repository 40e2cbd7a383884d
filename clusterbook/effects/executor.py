"""Run an expanded runbook over SSH: hosts in parallel per step, idempotent uploads, handlers, recap, run log."""

from __future__ import annotations

import difflib
import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..console import console
from ..runbooks import Command, ExpandedStep, Expansion, PutFile
from .ssh import Result


@dataclass
class Outcome:
    """What one action did on one host."""

    step: str
    host: str
    action: str
    status: str  # ok | changed | failed
    seconds: float
    returncode: int = 0
    stderr_tail: str = ""
    stdout: str = ""


@dataclass
class Report:
    """The whole run: outcomes in order, seconds per step, and whether it failed."""

    runbook: str
    outcomes: list[Outcome] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)
    failure: str | None = None

    def count(self, host: str, status: str) -> int:
        return sum(1 for o in self.outcomes if o.host == host and o.status == status)


class Executor:
    """Runs expansions with a transport (SshTransport or anything with run(host, command, timeout, stdin))."""

    def __init__(self, transport, log_path: Path, state_dir: Path):
        self.transport = transport
        self.log_path = log_path
        self.state_dir = state_dir  # last content uploaded per host/path: the base of --dry diffs

    def run(self, expansion: Expansion) -> Report:
        report = Report(expansion.runbook)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        console.print(f"[bold]{expansion.title}[/]")
        for index, step in enumerate(expansion.steps, 1):
            started = time.monotonic()
            hosts = list(step.hosts)
            with console.status(f"[{index}/{len(expansion.steps)}] {step.title} on {', '.join(hosts)} …"):
                with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
                    results = list(pool.map(self._host, [step] * len(hosts), hosts))
            elapsed = time.monotonic() - started
            report.step_seconds[f"{expansion.runbook}:{step.id}"] = elapsed
            console.print(f"[{index}/{len(expansion.steps)}] {step.title} [dim]({elapsed:.1f} s)[/]")
            for outcomes in results:
                for o in outcomes:
                    report.outcomes.append(o)
                    style = {"ok": "green", "changed": "yellow", "failed": "red"}[o.status]
                    console.print(f"  [dim]{o.host:>10}[/] [{style}]{o.status:<7}[/] {escape(o.action)}", markup=True,
                                  highlight=False, soft_wrap=True)
            failed = [o for outcomes in results for o in outcomes if o.status == "failed"]
            if failed:
                f = failed[0]
                report.failure = (f"{f.host}: step '{step.id}' ({step.title}) failed: {f.action}\n"
                                  f"exit status {f.returncode}; end of stderr:\n{f.stderr_tail or '(empty)'}")
                break
        return report

    # --- one host ------------------------------------------------------------------------------
    def _host(self, step: ExpandedStep, host: str) -> list[Outcome]:
        outcomes: list[Outcome] = []
        notified: list[str] = []
        for action in step.hosts[host]:
            if isinstance(action, PutFile):
                outcome = self._put(step, host, action)
            else:
                outcome = self._command(step, host, action)
            outcomes.append(outcome)
            self._log(outcome)
            if outcome.status == "failed":
                return outcomes
            if outcome.status == "changed":
                notified += [n for n in action.notify if n not in notified]
        for name in notified:
            command = step.handlers[host][name]
            started = time.monotonic()
            result = self.transport.run(host, command, timeout=300)
            outcome = Outcome(step.id, host, f"handler {name}: {command}", "changed" if result.ok else "failed",
                              time.monotonic() - started, result.returncode, result.tail())
            outcomes.append(outcome)
            self._log(outcome)
            if not result.ok:
                break
        return outcomes

    def _put(self, step: ExpandedStep, host: str, put: PutFile) -> Outcome:
        started = time.monotonic()
        current = self.transport.run(host, f"sha256sum {shlex.quote(put.path)} 2>/dev/null || true", timeout=60)
        if not current.ok:
            return Outcome(step.id, host, put.describe(), "failed", time.monotonic() - started, current.returncode,
                           current.tail())
        if current.stdout.split()[:1] == [put.sha256]:
            self._remember(host, put)
            return Outcome(step.id, host, put.describe(), "ok", time.monotonic() - started)
        directory = shlex.quote(str(Path(put.path).parent))
        target = shlex.quote(put.path)
        command = (f"mkdir -p {directory} && cat > {target}.clusterbook && chmod {put.mode:o} {target}.clusterbook "
                   f"&& mv {target}.clusterbook {target}")
        result = self.transport.run(host, command, timeout=120, stdin=put.content.encode())
        if result.ok:
            self._remember(host, put)
        return Outcome(step.id, host, put.describe(), "changed" if result.ok else "failed",
                       time.monotonic() - started, result.returncode, result.tail())

    def _command(self, step: ExpandedStep, host: str, cmd: Command) -> Outcome:
        started = time.monotonic()
        label = cmd.label
        if cmd.unless:
            check = self.transport.run(host, cmd.unless, timeout=cmd.timeout)
            if check.returncode == 0:
                return Outcome(step.id, host, label, "ok", time.monotonic() - started)
            if check.returncode == 255:  # ssh itself failed: the host is unreachable
                return Outcome(step.id, host, label, "failed", time.monotonic() - started, 255, check.tail())
        result: Result | None = None
        for attempt in range(cmd.retries + 1):
            result = self.transport.run(host, cmd.command, timeout=cmd.timeout)
            good = result.ok and (cmd.until is None or cmd.until in result.stdout)
            if good or result.returncode == 255:
                break
            if attempt < cmd.retries:
                time.sleep(cmd.delay)
        good = result.ok and (cmd.until is None or cmd.until in result.stdout)
        status = "failed" if not good else ("changed" if cmd.changed_when == "always" else "ok")
        tail = result.tail() or (f"stdout: {result.stdout.strip()[-300:]}" if not good else "")
        if good and cmd.until:  # a wait: show the line that satisfied it (e.g. the job id and endpoint)
            line = next((ln for ln in reversed(result.stdout.splitlines()) if cmd.until in ln), "")
            label = f"{label} → {line.strip()}" if line.strip() and line.strip() != cmd.until else label
        return Outcome(step.id, host, label, status, time.monotonic() - started,
                       result.returncode if not result.ok else (0 if good else 1), tail, result.stdout[-20000:])

    # --- records -------------------------------------------------------------------------------
    def _remember(self, host: str, put: PutFile) -> None:
        path = self.state_dir / host / put.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(put.content)

    def _log(self, outcome: Outcome) -> None:
        with self.log_path.open("a") as log:
            log.write(json.dumps({"time": time.time(), **asdict(outcome)}) + "\n")


def recap(report: Report) -> Table:
    """ok / changed / failed per host, and time per step."""
    table = Table("host", "ok", "changed", "failed", title=f"recap: {report.runbook}")
    for host in dict.fromkeys(o.host for o in report.outcomes):
        failed = report.count(host, "failed")
        table.add_row(host, str(report.count(host, "ok")), f"[yellow]{report.count(host, 'changed')}[/]",
                      f"[red]{failed}[/]" if failed else "0")
    return table


def step_times(report: Report) -> Table:
    table = Table("step", "seconds", title="time per step")
    for step, seconds in report.step_seconds.items():
        table.add_row(step, f"{seconds:.1f}")
    return table


def dry_run(expansion: Expansion, state_dir: Path) -> None:
    """Print the plan: per step and host the exact commands and the files that would change. Connects to nothing."""
    console.print(f"[bold]{expansion.title}[/] [dim](dry run: nothing is contacted)[/]")
    for index, step in enumerate(expansion.steps, 1):
        console.print(f"\n[bold][{index}/{len(expansion.steps)}] {step.title}[/]  [dim]({step.id})[/]")
        for host, actions in step.hosts.items():
            for action in actions:
                if isinstance(action, PutFile):
                    console.print(f"  [cyan]{host}[/] {escape(action.describe())}", highlight=False, soft_wrap=True)
                    known = state_dir / host / action.path.lstrip("/")
                    if known.exists():
                        diff = list(difflib.unified_diff(known.read_text().splitlines(), action.content.splitlines(),
                                                         f"{host}:{action.path} (last uploaded)",
                                                         f"{host}:{action.path} (rendered)", lineterm=""))
                        console.print("\n".join(f"      {line}" for line in diff) or "      (unchanged)",
                                      markup=False, highlight=False, soft_wrap=True)
                    else:
                        console.print("      (content on the host not known here: uploaded if it differs)",
                                      style="dim")
                else:
                    console.print(f"  [cyan]{host}[/] $ {escape(action.describe())}", highlight=False,
                                  soft_wrap=True)
            for name, command in step.handlers.get(host, {}).items():
                console.print(f"  [cyan]{host}[/] [dim]handler {name} (if notified):[/] {escape(command)}",
                              soft_wrap=True)
