"""The rendered bodies the daemon hands to its HTTP child (runtime/status/child_server.py)."""

from __future__ import annotations

import time
from pathlib import Path

from zksched.runtime.status.child_server import PublishedBodies


def test_a_copy_is_served_until_its_time(tmp_path: Path) -> None:
    bodies = PublishedBodies(str(tmp_path))
    body = b"# HELP x\nx 1\n\nwith blank lines\n"
    bodies.write("m", "text/plain; version=0.0.4", body, time.monotonic() + 60)
    assert bodies.read("m") == ("text/plain; version=0.0.4", body)
    bodies.write("m", "text/plain", b"newer", time.monotonic() - 0.001)
    assert bodies.read("m") is None  # past its time: the child asks the daemon instead


def test_a_missing_or_damaged_copy_is_not_served(tmp_path: Path) -> None:
    bodies = PublishedBodies(str(tmp_path))
    assert bodies.read("p") is None
    (tmp_path / "p").write_bytes(b"not json\nbody")
    assert bodies.read("p") is None
    (tmp_path / "p").write_bytes(b'{"type": "text/html"}\nbody')  # no "until"
    assert bodies.read("p") is None


def test_a_copy_is_replaced_whole(tmp_path: Path) -> None:
    bodies = PublishedBodies(str(tmp_path))
    bodies.write("p", "text/html", b"a" * 100_000, time.monotonic() + 60)
    bodies.write("p", "text/html", b"b", time.monotonic() + 60)
    assert bodies.read("p") == ("text/html", b"b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no temporary left
