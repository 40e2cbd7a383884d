"""What a runbook run looks like to people and to the record: the console reporter, the JSON-lines run log,
the recap tables, and the dry-run plan."""

from __future__ import annotations

import difflib
import json
import re
import threading
import time
from dataclasses import asdict
from pathlib import Path

from rich.markup import escape
from rich.status import Status
from rich.table import Table

from clusterbook.effects.console import console
from clusterbook.effects.executor import Event, Outcome, Report, RunStarted, StepFinished, StepStarted
from clusterbook.pure.runbooks import Expansion, PutFile

STYLE = {"ok": "green", "changed": "yellow", "failed": "red", "waiting": "cyan"}


class ConsoleReporter:
    """Prints a run as it goes: a spinner while a step runs, then the step's time and each host's outcomes."""

    def __init__(self) -> None:
        self.status: Status | None = None
        self.pending: list[Outcome] = []
        self.done = threading.Event()

    def _tick(self, status: Status, label: str, started: float, done: threading.Event) -> None:
        """The spinner's line counts the seconds of a long step (a build, a download)."""
        while not done.wait(1):
            status.update(f"{label} {time.monotonic() - started:.0f} s")

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            console.print(f"[bold]{escape(event.title)}[/]")
        elif isinstance(event, StepStarted):
            label = f"[{event.index}/{event.total}] {escape(event.title)}{hosts_suffix(event.title, event.hosts)} …"
            self.status = console.status(label)
            self.status.start()
            self.done = threading.Event()
            threading.Thread(target=self._tick, args=(self.status, label, time.monotonic(), self.done),
                             daemon=True).start()
        elif isinstance(event, Outcome):
            self.pending.append(event)
        elif isinstance(event, StepFinished):
            self.done.set()
            if self.status:
                self.status.stop()
            console.print(f"[{event.index}/{event.total}] {escape(event.title)} [dim]({event.seconds:.1f} s)[/]")
            for o in self.pending:
                console.print(f"  [dim]{o.host:>10}[/] [{STYLE[o.status]}]{o.status:<7}[/] {escape(o.action)}",
                              markup=True, highlight=False, soft_wrap=True)
            self.pending = []


def hosts_suffix(title: str, hosts: tuple[str, ...]) -> str:
    """' on a, b' for a step's status line, or nothing where its title names every host already."""
    if all(re.search(rf"(?<![\w.-]){re.escape(h)}(?![\w.-])", title) for h in hosts):
        return ""
    return f" on {', '.join(hosts)}"


def run_log_path(runs: Path, cluster: str, what: str) -> Path:
    """runs/<UTC time to the millisecond>-<cluster>-<what>.jsonl: two runs started in one second keep a log each
    (to the second, their lines went into one file)."""
    now = time.time()
    stamp = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{int(now % 1 * 1000):03d}Z"
    return runs / f"{stamp}-{cluster}-{what}.jsonl"


class RunLog:
    """Appends every outcome to a JSON-lines file (run_log_path)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, event: Event) -> None:
        if isinstance(event, Outcome):
            with self.path.open("a") as log:
                log.write(json.dumps({"time": time.time(), **asdict(event)}) + "\n")


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


DIFF_LINES, DIFF_WIDTH = 400, 1000  # a longer diff (a packed file, a big rewrite) is summarised, not printed


def dry_run(expansion: Expansion, state_dir: Path) -> None:
    """Print the plan: per step and host the exact commands and the files that would change. Connects to nothing."""
    console.print(f"[bold]{escape(expansion.title)}[/] [dim](dry run: nothing is contacted)[/]")
    for index, step in enumerate(expansion.steps, 1):
        console.print(f"\n[bold]\\[{index}/{len(expansion.steps)}] {escape(step.title)}[/]  [dim]({step.id})[/]")
        for host, actions in step.hosts.items():
            for action in actions:
                if isinstance(action, PutFile):
                    console.print(f"  [cyan]{host}[/] {escape(action.describe())}", highlight=False, soft_wrap=True)
                    known = state_dir / host / action.path.lstrip("/")
                    if known.exists():
                        diff = list(difflib.unified_diff(known.read_text().splitlines(), action.content.splitlines(),
                                                         f"{host}:{action.path} (last uploaded)",
                                                         f"{host}:{action.path} (rendered)", lineterm=""))
                        if len(diff) > DIFF_LINES or any(len(line) > DIFF_WIDTH for line in diff):
                            diff = [f"(changed: {len(diff)} diff lines, too long to show)"] if diff else []
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
