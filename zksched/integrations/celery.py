"""Celery beat on every replica, each due instant sent once: `ClusterScheduler`.

Plain Celery beat must run on exactly one host, or every entry is sent once per beat. With

    celery -A proj beat -S zksched.integrations.celery:ClusterScheduler

every replica runs beat; each one, for each due entry, claims (entry name, due instant) in
the zksched cluster (`Cluster.claim`) and sends the task only when it won. Configuration,
in the Celery app's config (`app.conf.update(...)`, or `zksched_*` in a config module):

- `zksched_client_id` (required; default: env ZKSCHED_CLIENT_ID): the cluster id. Beats
  that share it share claims; it may be an app's or daemons' cluster id too.
- `zksched_zk` (default: env ZKSCHED_ZK, else 127.0.0.1:2181): the ZooKeeper connect string.
- `zksched_session_timeout` (default 10): seconds; a killed beat's session ends after it.
- `zksched_connect_timeout` (default 30): seconds beat waits for ZooKeeper at startup
  (it exits with an error when ZooKeeper cannot be reached: a supervisor restarts it).

The due instant must be the same on every replica, whatever the phase of its timer:
- `crontab` entries: the latest minute that the crontab matches, at or before now (seconds
  00), in the app's time zone; stored in UTC.
- interval entries (`schedule(run_every=...)`, or a number / timedelta): the bucket
  `floor(now / interval) * interval` in UTC epoch seconds. Each replica's beat would send
  at its own start time + n * interval; buckets name the same instant on every replica. This
  scheduler also sets the entry's `last_run_at` to the bucket it sent for (rather than to
  "now"), so every replica wakes at each bucket boundary and competes for every bucket: one
  that is busy or dead loses nothing while another runs. Intervals under 1 s are refused
  (claims are to the second).
- Other schedule types (solar, custom) have no instant the replicas could agree on: refused.

Clocks that differ a little (a few seconds, under the interval) change who sends and when,
never how often: a replica whose clock is ahead claims an instant first and sends it up to
that much early; the others find it claimed. A replica behind by more than an interval
would name an older bucket, which is claimed already: it sends nothing until it catches up.

An unclaimed instant is not sent (logged at debug); beat's bookkeeping advances as usual,
so a replica does not retry it on every tick. Each sent message carries the headers
`zksched_fire_key` (`entry@2026-01-02T02:00:00Z`, an idempotency key for the task) and
`zksched_fencing_token`. The claim's record says `ok` once the message was published (the
task's own outcome is the worker's), `error` when publishing failed: that instant is lost
(at most once), as is one whose beat died between claim and publish.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

from celery.beat import ScheduleEntry, Scheduler  # type: ignore[import-untyped]
from celery.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from celery.schedules import crontab, schedule  # type: ignore[import-untyped]

from zksched import AppClaim, Cluster, ClusterUnavailable, name_problem
from zksched.app import arguments  # Cluster's own argument rules, for its config keys

log = logging.getLogger("zksched.integrations.celery")

CRONTAB_LOOKBACK_DAYS = 366 * 8  # a 29 February on a given weekday recurs within 28 years; 8
# years covers every crontab whose day fields can match at all in practice


def crontab_due(cron: crontab, now: datetime, tz: tzinfo | None = None) -> datetime:
    """The latest minute at or before `now` that `cron` matches (in `tz`, default the
    crontab's app time zone), as a UTC instant. Celery's own rule: the month, day of month
    and day of week must all match (day of week 0 is Sunday)."""
    zone = tz or cron.tz
    local = now.astimezone(zone)
    today = local.date()
    hours = sorted(cron.hour, reverse=True)
    minutes = sorted(cron.minute, reverse=True)
    for back in range(CRONTAB_LOOKBACK_DAYS):
        day = today - timedelta(days=back)
        if not _date_matches(cron, day):
            continue
        for hour in hours:
            if back == 0 and hour > local.hour:
                continue
            for minute in minutes:
                candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
                # compared as instants: a wall-clock time a DST jump skips maps forward
                if candidate.astimezone(UTC) <= now.astimezone(UTC):
                    return candidate.astimezone(UTC)
    raise ValueError(f"{cron} matched no minute in the {CRONTAB_LOOKBACK_DAYS} days before {now}")


def _date_matches(cron: crontab, day: date) -> bool:
    return (
        day.month in cron.month_of_year
        and day.day in cron.day_of_month
        and day.isoweekday() % 7 in cron.day_of_week
    )


def interval_due(every: float, now: datetime) -> datetime:
    """The start of the interval bucket that holds `now`: floor(now / every) * every, in
    UTC epoch seconds, to the second (claims are to the second)."""
    if every < 1:
        raise ValueError(f"interval {every}s is under 1 s: claims are to the second")
    start = (now.timestamp() // every) * every
    return datetime.fromtimestamp(int(start), UTC)


def due_instant(entry_schedule: Any, now: datetime) -> datetime:
    """The instant every replica names for an entry due at `now`."""
    if isinstance(entry_schedule, crontab):
        return crontab_due(entry_schedule, now)
    if isinstance(entry_schedule, schedule):
        return interval_due(entry_schedule.run_every.total_seconds(), now)
    raise ValueError(
        f"schedule {entry_schedule!r} is neither a crontab nor an interval: the replicas "
        "could not agree on its due instants"
    )


def entry_problems(entries: Iterable[tuple[str, Any]]) -> list[str]:
    """Why each (name, schedule) cannot be claimed: a bad name, an unsupported schedule."""
    problems = []
    for name, entry_schedule in entries:
        problem = name_problem(name, "beat entry name")
        if problem is not None:
            problems.append(f"{problem} (the claims' name is the entry's name: rename it)")
            continue
        try:
            due_instant(entry_schedule, datetime.now(UTC))
        except ValueError as exc:
            problems.append(f"beat entry {name!r}: {exc}")
    return problems


def configured_cluster(conf: Mapping[str, Any]) -> tuple[str | None, str]:
    """(cluster id, ZooKeeper connect string) from the `zksched_*` keys, else the
    environment, else the default hosts; the id is None when neither names one."""
    client_id = conf.get("zksched_client_id") or os.environ.get("ZKSCHED_CLIENT_ID")
    zk = conf.get("zksched_zk") or os.environ.get("ZKSCHED_ZK") or "127.0.0.1:2181"
    return client_id, zk


def config_seconds(
    conf: Mapping[str, Any], key: str, default: float, limits: tuple[float, float]
) -> float:
    """A `zksched_*` config key in seconds (a number, or text that is one); the default
    when unset; ImproperlyConfigured naming the key, its value and the range otherwise."""
    value = conf.get(key)
    if value is None:
        return default
    low, high = limits
    seconds = math.nan
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError):
            seconds = float(value)
    if not math.isfinite(seconds) or not low <= seconds <= high:
        raise ImproperlyConfigured(
            f"ClusterScheduler: the Celery config key {key} = {value!r} is not usable: give "
            f"a number of seconds from {low:g} to {high:g} (default {default:g})"
        )
    return seconds


def connect_timeout(conf: Mapping[str, Any]) -> float:
    """`zksched_connect_timeout`: how long beat waits for ZooKeeper at startup."""
    return config_seconds(conf, "zksched_connect_timeout", 30.0, (0.1, 86_400.0))


def cluster_from_config(conf: Mapping[str, Any]) -> Cluster:
    """A Cluster (not started) from the app's `zksched_*` config keys; ImproperlyConfigured
    naming the key when one is wrong."""
    client_id, zk = configured_cluster(conf)
    if not client_id:
        raise ImproperlyConfigured(
            "ClusterScheduler needs the zksched cluster id: set the Celery config key "
            "zksched_client_id (or the environment variable ZKSCHED_CLIENT_ID)"
        )
    problem = name_problem(client_id, "cluster id")
    if problem is not None:
        raise ImproperlyConfigured(
            f"ClusterScheduler: the Celery config key zksched_client_id (or "
            f"ZKSCHED_CLIENT_ID): {problem}"
        )
    problem = arguments.connect_string_problem(str(zk))
    if problem is not None:
        raise ImproperlyConfigured(
            f"ClusterScheduler: the Celery config key zksched_zk (or ZKSCHED_ZK): {problem}"
        )
    session_timeout = config_seconds(
        conf, "zksched_session_timeout", 10.0, arguments.SESSION_TIMEOUT_RANGE
    )
    try:
        return Cluster(zk=zk, client_id=client_id, session_timeout=session_timeout)
    except ValueError as exc:
        raise ImproperlyConfigured(f"ClusterScheduler: {exc}") from None


class ClusterScheduler(Scheduler):  # type: ignore[misc]
    """Celery beat's in-memory scheduler, sending each due instant of each entry only from
    the replica that claimed it. No schedule file: what was sent is in ZooKeeper."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.cluster: Cluster | None = None
        self._due: dict[str, datetime] = {}  # entry name -> instant named by reserve()
        self._refused: set[str] = set()  # entries logged as unclaimable (once each)
        self._outage = False
        self._mutex = threading.Lock()
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        """Beat calls this when it starts (never for a `lazy` introspection instance)."""
        super().setup_schedule()
        problems = entry_problems((n, e.schedule) for n, e in self.schedule.items())
        if problems:
            raise ImproperlyConfigured(
                "ClusterScheduler cannot run this beat schedule: " + "; ".join(problems)
            )
        if self.cluster is None:
            cluster = cluster_from_config(self.app.conf)
            try:
                cluster.start(timeout=connect_timeout(self.app.conf))
            except ClusterUnavailable as exc:
                raise ClusterUnavailable(
                    f"ClusterScheduler: {exc}. Beat sends nothing without it: the Celery "
                    "config key zksched_zk (or ZKSCHED_ZK) names ZooKeeper, and "
                    "zksched_connect_timeout is how long beat waits for it"
                ) from None
            self.cluster = cluster
            log.info("beat joined zksched cluster %s as %s", cluster.client_id, cluster.member_id)

    def reserve(self, entry: ScheduleEntry) -> ScheduleEntry:
        """Advance the entry as beat does; an interval entry's last_run_at becomes the bucket
        it is due for, so that its next wake-up is the next bucket's start on every replica
        (beat's "now" would let each replica drift by its own tick latency)."""
        new_entry = super().reserve(entry)
        try:
            due = due_instant(entry.schedule, datetime.now(UTC))
        except ValueError:
            return new_entry  # refused in apply_entry, with the reason
        self._due[entry.name] = due
        if not isinstance(entry.schedule, crontab):
            new_entry.last_run_at = due
        return new_entry

    def is_due(self, entry: ScheduleEntry) -> tuple[bool, float]:
        """Beat's answer, except that a due interval entry's next check is the next bucket's
        start (beat would say "in one interval" from now, keeping each replica's phase)."""
        due, next_check = super().is_due(entry)
        if due and isinstance(entry.schedule, schedule) and not isinstance(entry.schedule, crontab):
            every = entry.schedule.run_every.total_seconds()
            if every >= 1:
                next_check = every - time.time() % every
        return due, next_check

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """Send the entry's task only when this replica claimed its due instant."""
        due = self._due.pop(entry.name, None)
        if due is None:
            problems = entry_problems([(entry.name, entry.schedule)])
            if problems:
                self._refuse(entry.name, problems[0])
                return
            due = due_instant(entry.schedule, datetime.now(UTC))
        claim = self._claim(entry.name, due)
        if claim is None:
            return
        cluster = self.cluster
        assert cluster is not None
        log.info("Scheduler: Sending due task %s (%s) for %s", entry.name, entry.task, claim.key)
        headers = {
            **(entry.options.get("headers") or {}),
            "zksched_fire_key": claim.key,
            "zksched_fencing_token": claim.fencing_token,
        }
        tagged = copy.copy(entry)  # the schedule's own entry keeps its options untouched
        tagged.options = {**entry.options, "headers": headers}
        try:
            self.apply_async(tagged, producer=producer, advance=False)
        except Exception as exc:
            log.exception("could not send %s (%s): this instant is lost", claim.key, entry.task)
            cluster.finish(claim, "error", f"not sent: {type(exc).__name__}: {exc}")
        else:
            cluster.finish(claim, "ok")

    def _claim(self, name: str, due: datetime) -> AppClaim | None:
        cluster = self.cluster
        if cluster is None or not cluster.connected:
            if not self._outage:
                self._outage = True
                log.warning(
                    "not connected to ZooKeeper: beat sends nothing from this replica until it "
                    "is back (first not sent: %s at %s)",
                    name,
                    due.isoformat(),
                )
            return None
        if self._outage:
            self._outage = False
            log.info("connected to ZooKeeper again: beat entries are claimed again")
        claim = cluster.claim(name, due)
        if claim is None:
            log.debug("%s at %s: claimed by another replica (or undecided): not sent", name, due)
        return claim

    def _refuse(self, name: str, problem: str) -> None:
        with self._mutex:
            if name in self._refused:
                return
            self._refused.add(name)
        log.error("beat entry %r is not sent by ClusterScheduler: %s", name, problem)

    def close(self) -> None:
        """Beat's stop: leave the cluster at once (nothing is claimed after this)."""
        try:
            super().close()
        finally:
            cluster, self.cluster = self.cluster, None
            if cluster is not None:
                cluster.stop()

    @property
    def info(self) -> str:
        """The line `celery beat` prints in its startup banner."""
        client_id, zk = configured_cluster(self.app.conf)
        return f"    . zksched cluster -> {client_id} at {zk}"
