"""The local transport keeps the interface's promises on this machine: run, put (atomic, with its mode), get."""

import stat

from clusterbook.effects.transport import UNREACHABLE, LocalTransport


def test_run_put_get_on_this_machine(tmp_path):
    t = LocalTransport()
    result = t.run("here", "echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr.strip(), result.ok) == (3, "out\n", "err", False)
    target = tmp_path / "dir" / "file"
    assert t.put("here", str(target), b"content\n", 0o640).ok
    assert target.read_bytes() == b"content\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not (tmp_path / "dir" / "file.clusterbook").exists()  # written aside, then moved into place
    assert t.get("here", str(target)) == b"content\n"
    assert t.get("here", str(tmp_path / "missing")) is None
    assert t.run("here", "sleep 5", timeout=0.2).returncode == 124
    assert UNREACHABLE == 255
