"""Which missed instants to run when a member takes a job over (pure).

Missed instants are those after the job's newest fire record (and after the job last
changed, e.g. was resumed) up to now. The policy picks among them:
    all     every missed instant inside the catch-up window, oldest first
    latest  only the newest missed instant, if it is inside the window
    none    none
Instants not run are reported as `outside-catchup-window` skips.

Holes: a scheduled instant with no record behind a newer one that has a record. A member can
claim out of order (an earlier instant's claim or lock take came back unknown and went to be
retried) and then die, or lose the earlier one; catch-up after the newest record would never
look back at it. `holes` finds them; the policy treats them as missed instants (`all` runs
them, the others record them skipped). Never one that pruning made: a pruned record's
instant ran (or was skipped), and running it again would run it twice; pruning raises the
job's horizon before it deletes anything, and only instants after it can be holes.
"""

from __future__ import annotations

import bisect
import collections
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta

from zksched.core.schedule.instants import ScheduleError
from zksched.core.schedule.schedule import Schedule

COUNT_LIMIT = 10_000  # counting skipped instants of an every-second job must stay cheap
RUN_LIMIT = 10_000  # catch-up of `all` runs at most the newest this many missed instants
HOLE_LIMIT = 1_000  # holes looked at per job and catch-up (one is rare; thousands, a bug)


@dataclass(frozen=True)
class CatchupPlan:
    run: tuple[datetime, ...]  # oldest first
    skipped: int  # instants not run (at most COUNT_LIMIT counted)
    first_skipped: datetime | None = None
    last_skipped: datetime | None = None


def plan_catchup(
    schedule: Schedule,
    policy: str,
    window: float,
    after: datetime,
    now: datetime,
) -> CatchupPlan:
    """Plan the instants in (after, now]; `after` = newest record / job change / lower bound."""
    if after >= now:
        return CatchupPlan((), 0)
    window_start = max(after, now - timedelta(seconds=window))
    if policy == "all":
        # The newest RUN_LIMIT instants of the window; older ones count as skipped, so that
        # the skip record covers them (none is left neither run nor recorded).
        newest: collections.deque[datetime] = collections.deque(maxlen=RUN_LIMIT)
        for instant in itertools.islice(schedule.fires_between(window_start, now), 10 * RUN_LIMIT):
            newest.append(instant)
        run = tuple(newest)
    elif policy == "latest":
        latest = schedule.latest_fire(window_start, now)
        run = (latest,) if latest is not None else ()
    else:
        run = ()
    chosen = set(run)
    skipped = 0
    first: datetime | None = None
    last: datetime | None = None
    for instant in itertools.islice(schedule.fires_between(after, now), COUNT_LIMIT + len(run)):
        if instant in chosen:
            continue
        skipped += 1
        first = first or instant
        last = instant
    return CatchupPlan(run, min(skipped, COUNT_LIMIT), first, last)


def is_scheduled(schedule: Schedule, instant: datetime) -> bool:
    try:
        return schedule.next_fire(instant - timedelta(seconds=1)) == instant
    except ScheduleError:  # it fires no more (a one-off job after its instant)
        return False


def newest_scheduled(schedule: Schedule, instants: list[datetime]) -> datetime | None:
    """The newest of these record instants that is one of the schedule's own: catch-up
    starts after it. Records of manual triggers fall between scheduled instants and must
    not hide the scheduled ones missed before them."""
    for instant in sorted(instants, reverse=True):
        if is_scheduled(schedule, instant):
            return instant
    return None


def holes(schedule: Schedule, recorded: list[datetime], after: datetime) -> list[datetime]:
    """The job's scheduled instants after `after` and before its newest scheduled record that
    have no record, oldest first (at most HOLE_LIMIT). Some may be covered by skip-range
    records (`outside_ranges`) or have been pruned (`unpruned`)."""
    newest = newest_scheduled(schedule, recorded)
    if newest is None or after >= newest:
        return []
    have = set(recorded)
    found = []
    for instant in itertools.islice(schedule.fires_between(after, newest), 10 * HOLE_LIMIT):
        if instant < newest and instant not in have:
            found.append(instant)
            if len(found) == HOLE_LIMIT:
                break
    return found


def unpruned(
    holes: list[datetime], pruned_through: datetime | None, records: int, keep: int
) -> list[datetime]:
    """The holes that pruning cannot have made: those after the job's pruning horizon (the
    newest instant pruning may have deleted, raised before any record goes). Without a
    horizon, none once the job holds `keep` records (pruned before horizons were kept, its
    records could be anywhere); all while it holds fewer (pruning leaves `keep`)."""
    if pruned_through is not None:
        return [h for h in holes if h > pruned_through]
    return [] if records >= keep else list(holes)


def next_records(holes: list[datetime], recorded: list[datetime]) -> list[datetime]:
    """For each hole, the first record after it: the only one that can be a skip range
    covering it (a range ends at its record and holds no other record)."""
    ordered = sorted(set(recorded))
    out: list[datetime] = []
    for hole in holes:
        after = bisect.bisect_right(ordered, hole)
        if after < len(ordered) and (not out or out[-1] != ordered[after]):
            out.append(ordered[after])
    return out


def outside_ranges(
    holes: list[datetime], ranges: list[tuple[datetime, datetime]]
) -> list[datetime]:
    """The holes that no skip range [first, last] covers."""
    return [h for h in holes if not any(first <= h <= last for first, last in ranges)]


def trigger_instant(schedule: Schedule, now: datetime, search: int = 60) -> datetime:
    """The instant a manual trigger is recorded under: the latest whole second at or before
    `now` at which the schedule does not fire, so that a trigger never takes a scheduled
    instant's claim. A job that fires every second has no such second: the trigger then
    shares `now` with the scheduled run (the job runs at that second either way)."""
    second = now.replace(microsecond=0)
    for back in range(search):
        candidate = second - timedelta(seconds=back)
        if not is_scheduled(schedule, candidate):
            return candidate
    return second
