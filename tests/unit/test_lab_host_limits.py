"""The lab raises the host's inotify instances for its nodes (on a copy of the proc file): a low limit is raised to
the floor and named, a higher one is left alone."""

from clusterbook.effects.lab import machines


def test_a_low_inotify_limit_is_raised_to_the_floor_and_a_higher_one_kept(tmp_path):
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    assert machines.raise_inotify_limit(limit) == 128
    assert int(limit.read_text()) == machines.INOTIFY_FLOOR
    limit.write_text("8192\n")
    assert machines.raise_inotify_limit(limit) is None
    assert limit.read_text() == "8192\n"
