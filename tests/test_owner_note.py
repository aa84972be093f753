"""`zksched jobs list`'s note on why a job has no owner, with apps in the cluster."""

from __future__ import annotations

from typing import Any, cast

import zksched.cli.main  # noqa: F401 - jobs_cmds is imported through the CLI (an import cycle)
from zksched.cli.jobview import ClusterReader
from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import JobEntry
from zksched.core.members import Member
from zksched.zk.membership import MemberSnapshot
from zksched.zk.paths import ClusterPaths

CMD = JobSpec("backup", "0 2 * * *", ("/usr/bin/backup",), labels={"role": "db"})
ENTRY = JobEntry("backup", CMD, None, "2026-01-01T00:00:00Z")


def note(*members: Member) -> str | None:
    none = cast(Any, None)
    c = ClusterReader(none, none, none, {}, MemberSnapshot(members), ClusterPaths("c"), 1.0)
    return c.owner_note(ENTRY)


def test_a_command_job_in_a_cluster_of_apps_only_says_no_daemon() -> None:
    app = Member("a1", labels={"role": "db"}, functions={})
    assert note(app) == "no live daemon: app members (zksched.Cluster) run function jobs only"
    daemon = Member("d1", labels={"role": "web"})
    assert note(app, daemon) == "no live member has its labels"
    assert note(Member("d2", labels={"role": "db"}, allowed_commands=("/bin/true",))) == (
        "no member allows this command"
    )
    assert note() == "no live member"
