"""A troubleshooting command is a read-only diagnosis only when every program, option and subcommand in it is on
readonly.py's list (issue 44: pkill, find -delete and systemctl --no-block restart passed the old deny-list)."""

import pytest

from clusterbook.model.fixlint import fix_lint
from clusterbook.model.readonly import not_read_only

READS = [
    "cat {{ cluster.storage.endpoint_dir }}/{{ tier.name }}.json",
    "curl -sf {{ cluster.gateway.url }}/v1/models | jq '.data[] | {id, status}'",
    "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/health",
    "dmesg -T | grep -iE 'oom|kill|xid' | tail -n 20",
    "docker inspect --format '{% raw %}{{.State.Status}}{% endraw %}' exporter; NODES=(a1 a2); echo \"${#NODES[@]}\"",
    "firewall-cmd --list-rich-rules --zone=\"$(firewall-cmd --get-default-zone)\"",
    "invoke models.fetch --dry",
    "invoke plan --tier reasoning",
    "ip route get {{ rpc_addresses[0] }}",
    "ip -br addr",
    "journalctl -u clusterbook-wake -n 20 --no-pager",
    "nvidia-smi --query-gpu=memory.used,memory.total --format=csv",
    "ss -Htlnp 'sport = :{{ tier.port }}' || true",
    "tail -n 40 $(ls -t {{ cluster.storage.log_dir }}/{{ units.job }}-*.log | head -n 1)",
    "squeue -h -n x 2>/dev/null; while squeue -h -n x | grep -q .; do sleep 1; done",
    "systemctl --no-pager status llama-fast",
    "scontrol show job 5",
    "timeout 10 ibstat",
    "find /var/log -name '*.log' -mmin -5",
    "date -u +%FT%T",
    "hostname -f",
    "ps aux | sort -k 3 -r | uniq | head -n 5",
    "env | grep -i cuda",
    "{{ jobs }} squeue {{ tier.name }} -o '%i %T %R'; {{ jobs }} others {{ tier.name }}",
]
ACTS = [  # (command, the part named)
    ("pkill llama-server", "pkill"),
    ("find /tmp -name x -delete", "find -delete"),
    ("find / -exec rm {} ;", "find -exec"),
    ("systemctl --no-block restart llama-fast", "systemctl restart"),
    ("scontrol requeue 5", "scontrol requeue"),
    ("cat /etc/passwd > /tmp/x", "> /tmp/x"),
    ("curl -X POST http://x", "curl -X"),
    ("curl -d @/etc/shadow http://x", "curl -d"),
    ("curl -o /etc/x http://x", "curl -o /etc/x"),
    ("dmesg -c", "dmesg -c"),
    ("ip addr add 10.0.0.1/24 dev eth0", "ip addr add"),
    ("invoke deploy.reasoning", "invoke deploy.reasoning"),
    ("nvidia-smi -r", "nvidia-smi -r"),
    ("numactl --membind=0 rm -rf /", "numactl --membind=0"),
    ("timeout 10 reboot", "reboot"),
    ("ls | xargs rm", "rm"),
    ("firewall-cmd --add-port=1/tcp", "firewall-cmd --add-port=1/tcp"),
    ("awk 'BEGIN{system(\"id\")}'", "awk"),
    ("echo $(shutdown now)", "shutdown"),
    ("echo `halt`", "halt"),
    ("journalctl --vacuum-time=1s", "journalctl --vacuum-time=1s"),
    ("bash -c 'ls'", "bash"),
    ("{{ cluster.engine.install_dir }}/llama-server --version", "llama-server"),
    ("squeue 'unterminated", "the command's quoting"),
    ("env rm -rf /x", "rm"),  # env, like timeout, runs what follows it
    ("date -s '2020-01-01'", "date -s 2020-01-01"),
    ("hostname vasp-09", "hostname vasp-09"),
    ("sort -o /etc/passwd x", "sort -o /etc/passwd x"),
    ("uniq x /etc/passwd", "uniq x /etc/passwd"),
    ("ldd /bin/ls", "ldd"),
    ("{{ jobs }} cancel {{ tier.name }}", "clusterbook-jobs cancel"),  # a tier's own jobs: cancel and submit act
    ("{{ jobs }} submit {{ tier.name }} --export=ALL,X=1", "clusterbook-jobs submit"),
]


@pytest.mark.parametrize("run", READS)
def test_what_only_reads_is_a_diagnosis(run):
    assert not_read_only(run) is None
    assert fix_lint(run, act=False) == []


@pytest.mark.parametrize("run, part", ACTS)
def test_anything_else_must_be_an_act_step(run, part):
    assert not_read_only(run) == part
    (problem,) = fix_lint(run, act=False)
    assert f"'{part}' is not known to only read: mark the step act: true" in problem
    assert fix_lint(run, act=True) == []
