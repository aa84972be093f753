"""Carrying out the fire core's actions: what zksched's fire engine and its ZooKeeper work do.

Each action the core returns is done here, or handed to the lease or the commands: timers,
reading a job's history and skip ranges, claims with a nonce (and resolving one whose reply
was lost), results written until they land, skip records. What comes back is fed to the
core as the job's next event.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sim.member.base import RETRY
from sim.member.redelivery import Redelivery, marker_path
from sim.records import decode, encode, fires_of, record_path
from sim.world import ConnectionLoss, expired
from sim.zkmodel import NodeExists, NoNode, ZkError, ZkModel
from zksched.core.fire import model as m
from zksched.core.firekey import format_utc, parse_utc


class FireActions(Redelivery):
    """The fire core's actions, carried out (a part of `SimMember`)."""

    def _act(self, actions: list[m.Action]) -> None:
        tracing = self.world.tracing
        for action in actions:
            self.ledger.count(action)
            if tracing and not isinstance(action, m.Skip | m.Warn):
                self.world.note(self.name, f"-> {action}")
            self._do(action)

    def _event(self, job: str, event: m.JobEvent) -> None:
        if self.alive:
            if self.world.tracing and not isinstance(event, m.Tick):
                self.world.note(self.name, f"{job} <- {event}")
            self._act(self.core.handle(job, event, self.now()))

    def _do(self, action: m.Action) -> None:
        match action:
            case m.SetTimer(job, at):
                self.timers[job] = at
                self.world.at(at - self.skew, self._timer, job, at, self.incarnation)
            case m.ReadHistory(job, orphans_since):
                self._read_history(job, orphans_since)
            case m.FindOrphans(job, since):
                self._find_orphans(job, since)
            case m.ReadRanges(job, instants):
                self._read_ranges(job, instants)
            case m.TakeLease(job, wait, take):
                self._take_lease(job, take, self.world.t + wait)
            case m.GiveBackLease(job, take):
                path = self.locks.pop((job, take), None)
                if path is not None:
                    self._delete_lock(path)
            case m.Claim(job, instant, kind, late, attempt):
                self._claim(job, instant, kind, late, attempt)
            case m.Resolve(job, instant):
                self._resolve(job, instant)
            case m.Withdraw(job, instant):
                self._withdraw(job, instant)
            case m.Start(job, instant, kind, token, attempt):
                self.world.after(
                    self.world.rng.uniform(0.0005, 0.003),
                    self._start,
                    job,
                    instant,
                    kind,
                    token,
                    attempt,
                    self.incarnation,
                )
            case m.Terminate(job, instant, why):
                run = self.runs.get((job, instant))
                if run is not None:
                    self._terminate(run, why)
            case m.WriteResult(job, instant, status, reason, _error):
                nonce = self.nonces.pop((job, instant), "")
                self._write(
                    job,
                    instant,
                    encode(
                        status, self.name, self.session, nonce, "", reason.value if reason else ""
                    ),
                    nonce,
                )
            case m.RecordSkip(job, instant, kind, reason, covers_from, count):
                data = encode(
                    "skipped",
                    self.name,
                    self.session,
                    "",
                    kind,
                    reason.value,
                    format_utc(covers_from) if covers_from else "",
                    count,
                )
                self._record_skip(job, instant, data, 20)
            case m.Skip(job, instant, reason, detail, count):
                self.skips[reason.value] = self.skips.get(reason.value, 0) + count
                self.world.note(
                    self.name, f"skip {job}@{format_utc(instant)} {reason.value} {detail}"
                )
            case m.ReturnTrigger(job, trigger):
                self.world.note(self.name, f"trigger {trigger} handed back")
                self.ledger.trigger_returned(trigger)
                self._call(
                    lambda zk: zk.create(self.session or 0, f"/triggers/{job}.", sequential=True),
                    lambda r: None,
                )
            case m.Warn(job, event, text):
                self.world.note(self.name, f"warn {job} {event}: {text}")

    def _timer(self, job: str, at: float, incarnation: int) -> None:
        if incarnation == self.incarnation and self.timers.get(job) == at:
            self._event(job, m.Tick())

    def _read_history(self, job: str, orphans_since: datetime | None) -> None:
        session = self.session or 0

        def read(zk: ZkModel) -> tuple[list[str], tuple[tuple[datetime, int], ...]]:
            try:
                names = zk.get_children(session, fires_of(job))
            except NoNode:
                names = []
            if orphans_since is None:
                return names, ()
            return names, self._orphans(zk, session, job, orphans_since)

        def done(result: Any) -> None:
            if isinstance(result, ZkError):
                self._event(job, m.HistoryRead(ok=False))
            else:
                instants = tuple(sorted(parse_utc(n) for n in result[0]))
                self._event(job, m.HistoryRead(instants, orphans=result[1]))

        self._call(read, done)

    def _find_orphans(self, job: str, since: datetime) -> None:
        session = self.session or 0

        def done(result: Any) -> None:
            ok = not isinstance(result, ZkError)
            self._event(job, m.OrphansFound(result if ok else (), ok))

        self._call(lambda zk: self._orphans(zk, session, job, since), done)

    def _read_ranges(self, job: str, instants: tuple[datetime, ...]) -> None:
        session = self.session or 0

        def read(zk: ZkModel) -> list[tuple[datetime, datetime]]:
            ranges = []
            for instant in instants:
                fields = decode(zk.get(session, record_path(job, instant))[0])
                if fields[0] == "skipped" and len(fields) > 6 and fields[6]:
                    ranges.append((parse_utc(fields[6]), instant))
            return ranges

        def done(result: Any) -> None:
            ok = not isinstance(result, ZkError)
            self._event(job, m.RangesRead(tuple(result) if ok else (), ok))

        self._call(read, done)

    # -- claims and records -------------------------------------------------------------------

    def _claim(self, job: str, instant: datetime, kind: str, late: bool, attempt: int) -> None:
        self.ledger.claim_sent[(job, instant)] = self.world.t
        self._nonce += 1
        nonce = f"{self.name}:{self._nonce}"
        self.nonces[(job, instant)] = nonce
        session, path = self.session or 0, record_path(job, instant)
        name = format_utc(instant)
        data = encode("running", self.name, session, nonce, kind, "", "", "", attempt)
        live = self._at_least_once(job)

        def create(zk: ZkModel) -> tuple[str, int, str]:
            if live and attempt > 1:
                return self._claim_again(zk, session, job, instant, data, nonce)
            if late:
                # refused behind a newer record: a late claim never goes out of order
                # (modelled as one step; zksched reads the folder, then creates)
                try:
                    newer = sorted(n for n in zk.get_children(session, fires_of(job)) if n > name)
                except NoNode:
                    newer = []
                if newer and not zk.exists(session, path):
                    fields = decode(zk.data_of(f"{fires_of(job)}/{newer[0]}"))
                    if (
                        fields[0] == "skipped"
                        and len(fields) > 6
                        and fields[6]
                        and (fields[6] <= name)
                    ):
                        return "passed", 0, f"a skip range ({newer[0]})"
            try:
                zk.create(session, path, data, makepath=True)
                if live:
                    zk.create(session, marker_path(job, instant, nonce), b"", True, False, True)
                return "created", zk.stat_of(path).czxid, ""
            except NodeExists:
                fields = decode(zk.data_of(path))
                if fields[3] == nonce:
                    return "created", zk.stat_of(path).czxid, ""
                return "taken", 0, fields[1]

        self._call(create, lambda r: self._claim_answer(job, instant, r))

    def _resolve(self, job: str, instant: datetime) -> None:
        nonce, session, path = self.nonces.get((job, instant)), self.session or 0, ""
        path = record_path(job, instant)

        def look(zk: ZkModel) -> tuple[str, int, str]:
            try:
                data, stat = zk.get(session, path)
            except NoNode:
                return "absent", 0, ""
            fields = decode(data)
            if fields[3] == nonce:  # claimed again (at-least-once): the write's zxid
                return "created", stat.czxid if stat.version == 0 else stat.mzxid, ""
            return "taken", 0, fields[1]

        self._call(look, lambda r: self._claim_answer(job, instant, r))

    def _withdraw(self, job: str, instant: datetime) -> None:
        """Delete the record if it is still our unstarted claim (the version of its create)."""
        nonce, session, path = self.nonces.get((job, instant)), self.session or 0, ""
        path = record_path(job, instant)
        live = self._at_least_once(job)

        def delete(zk: ZkModel) -> None:
            try:
                data, stat = zk.get(session, path)
            except NoNode:
                return
            if decode(data)[3] != nonce:
                return
            if live:  # at-least-once: the marker goes too; a claim again leaves the orphan
                marker = marker_path(job, instant, nonce)
                if zk.exists(session, marker) is not None:
                    zk.delete(session, marker)
            if stat.version == 0:
                zk.delete(session, path, stat.version)

        def done(result: Any) -> None:
            ok = not isinstance(result, ZkError)
            if ok:
                self.ledger.withdrawn(job, instant)
            self._event(job, m.Withdrawn(instant, ok))

        self._call(delete, done)

    def _claim_answer(self, job: str, instant: datetime, result: Any) -> None:
        if isinstance(result, ZkError):
            event = m.ClaimAnswered(instant, m.ClaimOutcome.UNKNOWN)
        else:
            what, token, holder = result
            passed = what == "passed"
            outcome = m.ClaimOutcome.TAKEN if passed else m.ClaimOutcome(what)
            event = m.ClaimAnswered(instant, outcome, token or None, holder or None, passed)
            if what == "created":
                self.ledger.claimed(job, instant, self.name, self.world.t)
        self._event(job, event)

    def _write(self, job: str, instant: datetime, data: bytes, nonce: str) -> None:
        if not self.alive:
            return
        session, path = self.session or 0, record_path(job, instant)

        def done(result: Any) -> None:
            if isinstance(result, NoNode) or not isinstance(result, ZkError):
                self._event(job, m.ResultWritten(instant))
            elif self.alive:
                self.world.after(RETRY, self._write, job, instant, data, nonce)

        if self._at_least_once(job):
            self._call(lambda zk: self._complete(zk, session, job, instant, data, nonce), done)
        else:
            self._call(lambda zk: zk.set(session, path, data), done)

    def _record_skip(self, job: str, instant: datetime, data: bytes, tries: int) -> None:
        if not self.alive or tries <= 0:
            return
        session, path = self.session or 0, record_path(job, instant)

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss) or expired(result):
                self.world.after(RETRY, self._record_skip, job, instant, data, tries - 1)

        self._call(lambda zk: zk.create(session, path, data, makepath=True), done)
