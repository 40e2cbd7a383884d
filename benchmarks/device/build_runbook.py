"""Stage 1 of issue 17 on the device machine: build llama.cpp with the install runbook's own build steps (what
`invoke deploy.build` runs), through the local transport, for the cluster file that describes this machine."""

import sys
import time
from pathlib import Path

from clusterbook.effects.executor import Executor
from clusterbook.effects.reporters import ConsoleReporter
from clusterbook.effects.transport import LocalTransport
from clusterbook.model.loader import load_cluster
from clusterbook.pure.engine_build import plan_build
from clusterbook.pure.operations import BUILD_STEPS
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.runbooks import available, expand

cluster = load_cluster(sys.argv[1])
plan = plan_build(cluster)
print("cmake options:", " ".join(plan.options))
expansion = expand(available()["install"], cluster, steps=list(BUILD_STEPS), artifacts=render_artifacts(cluster))
started = time.monotonic()
report = Executor(LocalTransport(), Path("/tmp/clusterbook-state"), [ConsoleReporter()]).run(expansion)
if report.failure:
    sys.exit(f"build failed: {report.failure}")
print(f"built by the runbook in {time.monotonic() - started:.0f} s: {plan.tree}/bin, release {plan.release}")
