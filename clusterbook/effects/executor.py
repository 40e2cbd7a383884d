"""Run an expanded runbook through a transport: hosts in parallel per step, idempotent uploads, handlers.
It prints nothing: it emits events (step started, host outcome, step finished) that reporters consume."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from clusterbook.effects.transport import UNREACHABLE, Result, Transport
from clusterbook.pure.generations import Recording
from clusterbook.pure.runbooks import Command, ExpandedStep, Expansion, PutFile


@dataclass
class Outcome:
    """What one action did on one host (an event, and a line of the run log)."""

    step: str
    host: str
    action: str
    status: str  # ok | changed | failed | waiting (a tier's job waits for nodes other jobs hold)
    seconds: float
    returncode: int = 0
    stderr_tail: str = ""
    stdout: str = ""


@dataclass(frozen=True)
class RunStarted:
    """A runbook run begins."""

    runbook: str
    title: str


@dataclass(frozen=True)
class StepStarted:
    """A step begins on its hosts."""

    runbook: str
    index: int
    total: int
    step: str
    title: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class StepFinished:
    """A step ended on every host (its outcomes were emitted before this)."""

    runbook: str
    index: int
    total: int
    step: str
    title: str
    seconds: float


Event = RunStarted | StepStarted | Outcome | StepFinished
Listener = Callable[[Event], None]


@dataclass
class Report:
    """The whole run: outcomes in order, seconds per step, and whether it failed."""

    runbook: str
    outcomes: list[Outcome] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    waiting: str | None = None  # the run stopped, not failed, where a tier waits for its nodes (its host and why)

    def count(self, host: str, status: str) -> int:
        return sum(1 for o in self.outcomes if o.host == host and o.status == status)


@dataclass(frozen=True)
class Reply:
    """A host's whole answer to the look-ahead, and this machine's clock when it was asked and when it answered (for
    clock checks)."""

    result: Result
    asked: tuple[float, float]


class Executor:
    """Runs expansions through a transport and tells its listeners what happens."""

    def __init__(self, transport: Transport, state_dir: Path, listeners: Iterable[Listener] = (),
                 sleep: Callable[[float], None] = time.sleep, recording: Recording | None = None,
                 claim: Callable[[str], str | None] | None = None):
        self.transport = transport
        self.recording = recording  # keep what this run replaces as a generation on each node (rollback's source)
        self.claim = claim  # per host, the command claiming clusterbook's folders there (pure/ownership.py)
        self.begun: set[str] = set()
        self.state_dir = state_dir  # last content uploaded per host/path: the base of --dry diffs
        self.listeners = list(listeners)
        self.sleep = sleep  # between retries (host-free tests pass a no-op)
        self.known: dict[tuple[str, int, int], str] = {}  # (host, step, action) -> digest or `unless` status
        self.unchanged = True  # no step of this run has changed anything yet: what `known` says still holds
        self.acted: set[str] = set()  # hosts where a guarded command ran (e.g. a daemon-reload): check them live

    def emit(self, event: Event) -> None:
        for listener in self.listeners:
            listener(event)

    def run(self, expansion: Expansion, known: dict[tuple[str, int, int], str] | None = None) -> Report:
        """Run every step in order; `known` is look_ahead's answer when the caller asked for it already (beside
        another round trip, e.g. the preflight's)."""
        report = Report(expansion.runbook)
        total = len(expansion.steps)
        self.emit(RunStarted(expansion.runbook, expansion.title))
        self.begun: set[str] = set()  # hosts where this run's generation began (at their first change)
        self.known = self.look_ahead(expansion) if known is None else known
        self.unchanged, self.acted = True, set()
        try:
            self._steps(expansion, report, total)
        finally:
            if self.recording and self.begun:  # a failed run's generation is kept too: rollback needs it most
                self._on_each(sorted(self.begun), self.recording.end())
        return report

    def _on_each(self, hosts: list[str], command: str) -> None:
        """One bookkeeping command on every host in parallel (a host that fails it keeps what it has)."""
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            list(pool.map(lambda h: self.transport.run(h, command, timeout=60), hosts))

    def look_ahead(self, expansion: Expansion) -> dict[tuple[str, int, int], str]:
        """One round trip per host, in parallel, before the first step: the digest of every file the run uploads
        there, the exit status of every `unless` check, and whether each wait (a probe) holds already. Until some
        step changes something, each step reads its answer from here, so a converged run costs one round trip per
        host for all of them (it cost one per file, check and wait). A host that cannot answer is checked step by
        step."""
        return self.ask_ahead(expansion)[0]

    def ask_ahead(self, expansion: Expansion, also: dict[str, str] | None = None
                  ) -> tuple[dict[tuple[str, int, int], str], dict[str, Reply]]:
        """The look-ahead, with one more read-only command per host in the same round trip (`also`: e.g. the
        preflight's facts); the answers, and each host's whole reply."""
        also = also or {}
        scripts: dict[str, list[str]] = {}
        puts: dict[str, dict[str, list[tuple[int, int]]]] = {}  # per host, each uploaded path and its actions
        for s, step in enumerate(expansion.steps):
            for host, actions in step.hosts.items():
                lines = scripts.setdefault(host, [])
                for a, action in enumerate(actions):
                    if isinstance(action, PutFile):
                        puts.setdefault(host, {}).setdefault(action.path, []).append((s, a))
                    elif isinstance(action, Command) and action.unless:
                        lines.append(f"(\n{action.unless}\n) </dev/null >/dev/null 2>&1; "
                                     f"printf 'K {s} {a} %s\\n' \"$?\"")
                    elif isinstance(action, Command) and action.probe and action.until:  # 0: it holds already
                        lines.append(f"if out=$( (\n{action.command}\n) </dev/null 2>/dev/null ) && case \"$out\" in "
                                     f"*{shlex.quote(action.until)}*) true;; *) false;; esac; then echo 'K {s} {a} 0'; "
                                     f"else echo 'K {s} {a} 1'; fi")
        hosts = list(dict.fromkeys([h for h in scripts if scripts[h] or puts.get(h)] + list(also)))
        if not hosts:
            return {}, {}

        def ask(host: str) -> Reply:
            # every digest from one sha256sum, first; then the checks, which only read, side by side: the answer
            # takes as long as the slowest (each systemctl asks systemd over D-Bus: 5-10 ms, a dozen on a head node)
            paths = " ".join(shlex.quote(p) for p in puts.get(host, {}))
            digests = [f"sha256sum -- {paths} 2>/dev/null | sed 's/^/H /'; echo 'H done'"] if paths else []
            started = time.time()
            result = self.transport.run(host, "\n".join([*digests, side_by_side(scripts.get(host, []),
                                                                                 also.get(host))]), timeout=60)
            return Reply(result, (started, time.time()))

        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            replies = dict(zip(hosts, pool.map(ask, hosts)))
        known: dict[tuple[str, int, int], str] = {}
        for host, reply in replies.items():
            if not reply.result.ok:
                continue
            held: dict[str, str] = {}  # path -> digest (sha256sum's "<digest>  <path>"); a file it lacks: none
            for line in reply.result.stdout.splitlines():
                parts = line.split(" ")
                if len(parts) == 4 and parts[0] == "K" and parts[1].isdigit() and parts[2].isdigit():
                    known[(host, int(parts[1]), int(parts[2]))] = parts[3]
                elif line.startswith("H ") and len(line) > 68 and line[66:68] == "  ":
                    held[line[68:]] = line[2:66]
            if "H done" in reply.result.stdout.splitlines():  # the digests' line ran: a file not named is not there
                for path, places in puts.get(host, {}).items():
                    known.update({(host, s, a): held.get(path, "") for s, a in places})
        return known, replies

    def _begin(self, step: ExpandedStep, host: str, started: float) -> Outcome | None:
        """Before the first change on a host: clusterbook's folders there are claimed (each carries its marker, or
        the run stops before writing in a folder that is not its own), and its generation begins (where the engine
        link points, the meta). A converged run changes nothing and costs no extra round trip. A failure is the
        action's failure."""
        if host in self.begun:
            return None
        claim = self.claim(host) if self.claim else None
        parts = [f"(\n{claim}\n)"] if claim else []
        parts += [f"(\n{self.recording.begin()}\n)"] if self.recording else []
        if not parts:
            return None
        result = self.transport.run(host, " && ".join(parts), timeout=60)
        if not result.ok:
            what = " and ".join((["claim clusterbook's folders"] if claim else []) + (
                [f"keep what this run replaces (generation {self.recording.gid})"] if self.recording else []))
            return Outcome(step.id, host, what, "failed", time.monotonic() - started, result.returncode,
                           result.tail())
        self.begun.add(host)  # one thread per host: no two threads add the same host
        return None

    def _steps(self, expansion: Expansion, report: Report, total: int) -> None:
        for index, step in enumerate(expansion.steps, 1):
            started = time.monotonic()
            hosts = list(step.hosts)
            self.emit(StepStarted(expansion.runbook, index, total, step.id, step.title, tuple(hosts)))
            with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
                results = list(pool.map(self._host, [step] * len(hosts), hosts, [index - 1] * len(hosts)))
            if any(o.status == "changed" for outcomes in results for o in outcomes):
                self.unchanged = False  # what the look-ahead saw may no longer hold: check live from here on
            for outcome in (o for outcomes in results for o in outcomes):  # in host order, whatever finished first
                report.outcomes.append(outcome)
                self.emit(outcome)
            elapsed = time.monotonic() - started
            report.step_seconds[f"{expansion.runbook}:{step.id}"] = elapsed
            self.emit(StepFinished(expansion.runbook, index, total, step.id, step.title, elapsed))
            failed = [o for outcomes in results for o in outcomes if o.status == "failed"]
            if failed:
                f = failed[0]
                report.failure = (f"{f.host}: step '{step.id}' ({step.title}) failed: {f.action}\n"
                                  f"exit status {f.returncode}; end of stderr:\n{f.stderr_tail or '(empty)'}")
                break
            waiting = [o for outcomes in results for o in outcomes if o.status == "waiting"]
            if waiting:  # the steps after it (the gateway's) would wait for the same job: they come when it starts
                report.waiting = f"{expansion.runbook}: {waiting[0].host}: {waiting[0].action}"
                break

    # --- one host ------------------------------------------------------------------------------
    def _host(self, step: ExpandedStep, host: str, index: int = 0) -> list[Outcome]:
        outcomes: list[Outcome] = []
        notified: list[str] = []
        fresh = self.unchanged  # on this host, until its first change in this step
        for a, action in enumerate(step.hosts[host]):
            known = self.known.get((host, index, a)) if fresh and host not in self.acted else None
            if isinstance(action, PutFile):
                outcome = self._put(step, host, action, known)
            else:
                outcome = self._command(step, host, action, known)
            outcomes.append(outcome)
            if outcome.status == "failed":
                return outcomes
            if outcome.status == "changed":
                fresh = False
                notified += [n for n in action.notify if n not in notified]
        for name in notified:
            command = step.handlers[host][name]
            started = time.monotonic()
            result = self.transport.run(host, command, timeout=300)
            outcomes.append(Outcome(step.id, host, f"handler {name}: {command}", "changed" if result.ok else "failed",
                                    time.monotonic() - started, result.returncode, result.tail()))
            if not result.ok:
                break
        return outcomes

    def _put(self, step: ExpandedStep, host: str, put: PutFile, known: str | None = None) -> Outcome:
        """Upload unless the host has the same content (its digest: from the look-ahead while nothing changed)."""
        started = time.monotonic()
        if known is not None:
            digest = known
        else:
            current = self.transport.run(host, f"sha256sum {shlex.quote(put.path)} 2>/dev/null || true", timeout=60)
            if not current.ok:
                return Outcome(step.id, host, put.describe(), "failed", time.monotonic() - started,
                               current.returncode, current.tail())
            digest = (current.stdout.split() or [""])[0]
        if digest == put.sha256:
            self._remember(host, put)
            return Outcome(step.id, host, put.describe(), "ok", time.monotonic() - started)
        if self.recording:  # keep the file this upload replaces (or note that it is new)
            failed = self._begin(step, host, started)
            if failed:
                return failed
            kept = self.transport.run(host, self.recording.save(put.path), timeout=60)
            if not kept.ok:
                return Outcome(step.id, host, f"keep the previous {put.path}", "failed", time.monotonic() - started,
                               kept.returncode, kept.tail())
        result = self.transport.put(host, put.path, put.content.encode(), put.mode)
        if result.ok:
            self._remember(host, put)
        return Outcome(step.id, host, put.describe(), "changed" if result.ok else "failed",
                       time.monotonic() - started, result.returncode, result.tail())

    def _command(self, step: ExpandedStep, host: str, cmd: Command, known: str | None = None) -> Outcome:
        """Run unless its check passes (the check's status: from the look-ahead while nothing changed)."""
        started = time.monotonic()
        label = cmd.label
        if (cmd.unless or cmd.probe) and known is not None:
            if known == "0":
                return Outcome(step.id, host, label, "ok", time.monotonic() - started)
        elif cmd.unless:
            check = self.transport.run(host, cmd.unless, timeout=cmd.timeout)
            if check.returncode == 0:
                return Outcome(step.id, host, label, "ok", time.monotonic() - started)
            if check.returncode == UNREACHABLE:  # ssh itself failed: the host is unreachable
                return Outcome(step.id, host, label, "failed", time.monotonic() - started, 255, check.tail())
        if cmd.unless:
            self.acted.add(host)  # one thread per host: no two threads add the same host
        if cmd.changed_when == "always" and (failed := self._begin(step, host, started)):
            return failed
        result: Result | None = None
        for attempt in range(cmd.retries + 1):
            result = self.transport.run(host, cmd.command, timeout=cmd.timeout)
            good = result.ok and (cmd.until is None or cmd.until in result.stdout)
            if good or result.returncode == UNREACHABLE or (cmd.abort_when and cmd.abort_when in result.stdout) \
                    or (cmd.waits_when and result.ok and cmd.waits_when in result.stdout):
                break
            if attempt < cmd.retries:
                self.sleep(cmd.delay)
        good = result.ok and (cmd.until is None or cmd.until in result.stdout)
        if not good and cmd.waits_when and result.ok and cmd.waits_when in result.stdout:
            line = next(ln for ln in reversed(result.stdout.splitlines()) if cmd.waits_when in ln)
            return Outcome(step.id, host, f"{label}: not yet → {line.strip()}", "waiting", time.monotonic() - started,
                           stdout=result.stdout[-20000:])
        status = "failed" if not good else ("changed" if cmd.changed_when == "always" else "ok")
        tail = result.tail() or (f"stdout: {result.stdout.strip()[-300:]}" if not good else "")
        if not good and cmd.name:  # a failure names the command itself, not only its label
            label = f"{label}: {cmd.command}"
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


def side_by_side(lines: list[str], foreground: str | None = None) -> str:
    """A shell script that runs each line in the background, then `foreground`, and waits for all; each line
    prints one short line (one write, shorter than a pipe's atomic size), so the answers never interleave."""
    return "\n".join([*(f"(\n{line}\n) &" for line in lines), *([foreground] if foreground else []), "wait"])

