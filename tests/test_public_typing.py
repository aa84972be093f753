"""The public API is typed for the app's own checker (`py.typed`): `Cluster.cron`'s options
are checked by name and type, not swallowed by `**options: Any`."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent

APP = textwrap.dedent(
    """
    from datetime import timedelta

    from zksched import Cluster, Fire, JobOptions

    cluster = Cluster(zk="127.0.0.1:2181", client_id="billing")

    @cluster.cron("0 2 * * *", tz="Europe/Berlin", timeout="1h", overlap="skip")
    def nightly(fire: Fire) -> None: ...

    @cluster.cron(None, at="2026-12-24T18:00:00+01:00", retries=2, retry_backoff=timedelta(0, 5))
    def once(fire: Fire) -> None: ...

    options: JobOptions = {"catchup": "all", "labels": {"role": "db"}}
    cluster.add_job(nightly, "*/5 * * * *", name="every-five", **options)

    @cluster.cron("0 3 * * *", overlap="never")  # not an overlap policy
    def wrong_value(fire: Fire) -> None: ...

    @cluster.cron("0 4 * * *", timezone="UTC")  # a job file's key: cron() says tz
    def wrong_name(fire: Fire) -> None: ...

    @cluster.cron("0 5 * * *", retries="2")
    def wrong_type(fire: Fire) -> None: ...
    """
)


def test_cron_options_are_checked_by_name_and_type(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    out, _err, status = api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--follow-imports",
            "silent",
            str(app),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    lines = sorted(int(line.split(":")[1]) for line in errors)
    source = APP.splitlines()
    wrong = [n for n, text in enumerate(source, 1) if "def wrong_" in text]
    # each wrong decorator is reported on its own line, and nothing else is
    assert lines == [n - 1 for n in wrong], out
    assert status == 1
