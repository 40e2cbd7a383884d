"""What a node installs from its operating system's packages: one name per need, the command per family (apt on
Debian; dnf on EL, with EPEL or PowerTools only for the needs whose packages are there)."""

from __future__ import annotations

import shlex

from clusterbook.model.schema import OperatingSystem

# need -> family -> package names. A need with no entry for a family is not packaged for it by clusterbook yet:
# its command fails, naming the need, instead of installing something else.
PACKAGES: dict[str, dict[str, list[str]]] = {
    # the source comes as a file (curl, its sha256 checked before anything of it runs): no pip, no Python 3.9
    "build": {"debian": ["cmake", "ninja-build", "g++", "curl", "patch"],
              "el": ["cmake", "ninja-build", "curl", "patch"]},  # + the node's gcc-toolset
    "jq": {"debian": ["jq"], "el": ["jq"]},
    # the node programs (keeper, wake service, probe) run on /usr/bin/python3: a minimal EL 8 has only
    # platform-python until the python3 package (3.6) is installed
    "python3": {"debian": ["python3"], "el": ["python3"]},
    "iperf3": {"debian": ["iperf3"], "el": ["iperf3"]},
    "numactl": {"debian": ["numactl"], "el": ["numactl"]},
    # EPEL 8's package (1.3.1 on packages.fedoraproject.org) installs /usr/bin/node_exporter; its unit's name differs
    # between EPEL releases, so EL nodes run clusterbook's own unit (layout: node_exporter_unit)
    "node-exporter": {"debian": ["prometheus-node-exporter"], "el": ["golang-github-prometheus-node-exporter"]},
    # EL packages neither (EPEL 8 has only the node exporter): an EL monitoring node installs their release tarballs
    # (monitoring.el_releases; the monitoring runbook's releases step), which this need's check then finds
    "prometheus": {"debian": ["prometheus", "prometheus-alertmanager"]},
    "nginx": {"debian": ["nginx"], "el": ["nginx", "policycoreutils-python-utils"]},  # EL: semanage, for SELinux
}


# the EL repositories a need's packages come from beyond BaseOS and AppStream (the others are enabled for no package)
EL_REPOS = {"node-exporter": "epel", "build": "powertools"}  # EPEL's exporter; EL 8's ninja-build is in PowerTools


# need -> family -> the commands its packages give, where they are not the need's own name: a node that has every one
# installs nothing (the package action's check)
COMMANDS: dict[str, dict[str, list[str]]] = {
    "node-exporter": {"debian": ["prometheus-node-exporter"], "el": ["node_exporter"]},
    "nginx": {"debian": ["nginx"], "el": ["nginx", "semanage"]},
    "prometheus": {"debian": ["prometheus", "prometheus-alertmanager"],
                   "el": ["prometheus", "prometheus-alertmanager"]},  # the release tarballs' links, Debian's names
}


def installed_check(os: OperatingSystem, need: str) -> str:
    """A shell test, true when a node already has what a need's packages give."""
    commands = COMMANDS.get(need, {}).get(os.family, [need])
    return " && ".join(f"command -v {shlex.quote(c)}" for c in commands)


def packages(os: OperatingSystem, need: str) -> list[str]:
    """The packages of a need on this operating system (empty: not packaged for it)."""
    names = list(PACKAGES[need].get(os.family, []))
    if need == "build" and os.family == "el" and names and os.gcc_toolset:
        names.append(f"gcc-toolset-{os.gcc_toolset}")
    return names


def install_command(os: OperatingSystem, need: str) -> str:
    """The shell command that installs a need's packages on a node of this operating system."""
    names = packages(os, need)
    if not names:
        return (f"echo '{need}: clusterbook has no {os.family} packages for it yet; install it by hand' >&2; "
                "exit 1")
    words = " ".join(shlex.quote(n) for n in names)
    if os.family == "debian":
        return f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {words}"
    repo = EL_REPOS.get(need)
    if repo == "epel":
        return f"dnf install -y -q epel-release && dnf install -y -q {words}"
    if repo == "powertools":
        return f"dnf install -y -q --enablerepo=powertools {words}"
    return f"dnf install -y -q {words}"


def toolset_bin(os: OperatingSystem) -> str | None:
    """Where an EL node's gcc-toolset keeps gcc and g++ (None: the system compilers)."""
    return f"/opt/rh/gcc-toolset-{os.gcc_toolset}/root/usr/bin" if os.family == "el" and os.gcc_toolset else None
