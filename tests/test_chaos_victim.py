"""The chaos suite's choice of a member to fault: one that owns jobs now."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from tools.chaos.lab import ChaosCluster
from tools.chaos.scenarios import ScenarioContext
from zksched.core.firekey import fire_key


def test_a_member_that_handed_its_jobs_on_is_not_picked(tmp_path: Path) -> None:
    # The first member to start fires every job until the others join and take them over;
    # for two seconds it has fired something, yet owns nothing a fault could take over.
    now = time.time()
    log = tmp_path / "fires.log"
    lines = []
    for job, member, started in [
        ("job-0000", "first", now - 1.5),
        ("job-0001", "first", now - 1.5),
        ("job-0000", "second", now - 0.5),
        ("job-0001", "third", now - 0.5),
    ]:
        key = fire_key(job, datetime.fromtimestamp(int(started), UTC))
        lines.append(f"{key} {member} 1 {started:.6f}\n")
    log.write_text("".join(lines))
    members = [SimpleNamespace(member_id=m) for m in ("first", "second", "third")]
    cluster = cast(ChaosCluster, SimpleNamespace(fire_log=log, members=members))
    picked = {
        ScenarioContext(cluster, random.Random(seed), 1.0, 3).pick_victim().member_id
        for seed in range(40)
    }
    assert picked == {"second", "third"}
