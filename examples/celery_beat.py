"""Celery beat on every replica, each due instant sent once (ClusterScheduler).

Run beat as many times as you like (one per host or container); each entry's due instant
is sent by one of them. From the repository's root:

    scripts/zookeeper start
    python3 -m celery -A examples.celery_beat beat -S zksched.integrations.celery:ClusterScheduler
    # the same in a second and a third terminal; with BEAT_SENDS=/tmp/beat-sends.log each beat
    # appends "<entry> <due instant> <pid>" there for every message it publishes

Environment: CELERY_BROKER_URL (default memory://: the messages stay in the beat process,
enough to watch the sends), ZKSCHED_ZK (default 127.0.0.1:2181), ZKSCHED_CLIENT_ID
(default example-beat), BEAT_SENDS (optional: the file of sends). A worker for the tasks
is the usual `python3 -m celery -A examples.celery_beat worker` with a real broker.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.schedules import crontab  # type: ignore[import-untyped]
from celery.signals import before_task_publish  # type: ignore[import-untyped]

app = Celery("examples.celery_beat", broker=os.environ.get("CELERY_BROKER_URL", "memory://"))
app.conf.update(
    # zksched's keys (docs/library.md, "Integrations")
    zksched_zk=os.environ.get("ZKSCHED_ZK", "127.0.0.1:2181"),
    zksched_client_id=os.environ.get("ZKSCHED_CLIENT_ID", "example-beat"),
    zksched_session_timeout=5,
    # `-S zksched.integrations.celery:ClusterScheduler` on the command line does the same
    beat_scheduler="zksched.integrations.celery:ClusterScheduler",
    beat_schedule={
        # names are the claims' names: letters, digits, '_', '.', '-'
        "heartbeat": {"task": "examples.celery_beat.heartbeat", "schedule": timedelta(seconds=1)},
        "report": {"task": "examples.celery_beat.report", "schedule": crontab(minute="*")},
    },
    timezone="UTC",
)


@app.task(name="examples.celery_beat.heartbeat")
def heartbeat() -> None:
    print("heartbeat")


@app.task(name="examples.celery_beat.report")
def report() -> None:
    print("report")


@before_task_publish.connect
def record_send(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Append `<entry> <due instant> <pid>` for each message this beat publishes (from the
    fire key header ClusterScheduler adds), when BEAT_SENDS names a file."""
    path = os.environ.get("BEAT_SENDS")
    key = (headers or {}).get("zksched_fire_key")
    if not path or not key:
        return
    entry, _, instant = str(key).partition("@")
    # one O_APPEND write a line: the beats' lines never interleave
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{entry} {instant} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
