"""A simulated member: the fire core behind a shell that talks to the ZooKeeper model.

The shell does what zksched's runtime does, in miniature: a session with a contact
watchdog (no reply for T/3: not connected; T/2: the session counts as lost), an ephemeral
sequential member node, watches on members, the job table and triggers, claims with a
nonce, the job lease as a lock recipe, commands that take time, and results written until
they land. A crash takes its commands with it (zksched's supervisor does that for real).
What the commands did is written to the `Ledger`, the ground truth the checker reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore
from zksched.core.firekey import format_utc, parse_utc
from zksched.core.jobspec import JobSpec
from zksched.core.owners import Member, OwnerTable
from zksched.sim.world import ConnectionLoss, World, expired
from zksched.sim.zkmodel import NodeExists, NoNode, WatchEvent, ZkError, ZkModel

if TYPE_CHECKING:
    from zksched.sim.ledger import Ledger

RETRY = 0.5  # a failed write is sent again this long after


def fires_of(job: str) -> str:
    return f"/fires/{job}"


def record_path(job: str, instant: datetime) -> str:
    return f"/fires/{job}/{format_utc(instant)}"


def encode(*fields: object) -> bytes:
    return "|".join("" if f is None else str(f) for f in fields).encode()


def decode(data: bytes) -> list[str]:
    return data.decode().split("|")


@dataclass
class Run:
    job: str
    instant: datetime
    kind: str
    member: str
    session: int
    token: int
    started: float  # true time
    local_started: float
    ended: float | None = None
    status: str = ""


class SimMember:
    def __init__(
        self,
        world: World,
        ledger: Ledger,
        name: str,
        skew: float,
        labels: dict[str, str],
        session_timeout: float,
        tunables: m.FireTunables,
        durations: Callable[[str], float],
    ) -> None:
        self.world, self.ledger, self.name = world, ledger, name
        self.skew, self.labels, self.timeout = skew, labels, session_timeout
        self.durations = durations
        self.core = MemberFireCore(tunables)
        self.incarnation = 0
        self.alive = False
        self.stopping = False
        self.session: int | None = None
        self.connected = False  # as the core was told
        self.lost = False  # the watchdog gave the session up
        self.refreshing = False
        self.last_heard = 0.0
        self.table_version = -1
        self.table: dict[str, tuple[JobSpec, float]] = {}
        self.owners = OwnerTable()
        self.nonces: dict[tuple[str, datetime], str] = {}
        self.locks: dict[str, str] = {}  # job -> our contender node, once held
        self.taking: set[str] = set()  # jobs whose lease is being taken
        self.leftovers: set[str] = set()  # lock nodes to delete once connected
        self.runs: dict[tuple[str, datetime], Run] = {}
        self.timers: dict[str, float] = {}
        self.skips: dict[str, int] = {}
        self._nonce = 0

    # -- life -----------------------------------------------------------------------------

    def now(self) -> float:
        return self.world.t + self.skew

    def boot(self) -> None:
        self.alive, self.stopping, self.lost, self.connected = True, False, False, False
        self.core = MemberFireCore(self.core.tunables)
        self.last_heard = self.world.t
        self._open_session()
        self._watchdog()
        self._ping()

    def crash(self) -> None:
        """Dies at once: its commands with it, its session left to expire."""
        self.world.note(self.name, "crash")
        for run in self.runs.values():
            self.ledger.ended(run, self.world.t, "killed")
        self._die()

    def sigterm(self, grace: float) -> None:
        self.world.note(self.name, "sigterm")
        self.stopping = True
        self._act(self.core.stop(self.now()))
        if self.session is not None and self.connected:
            session = self.session
            def leave(zk: ZkModel) -> None:
                for path in zk.ephemerals_of(session):
                    if path.startswith("/members/"):
                        zk.delete(session, path)

            self._call(leave, lambda r: None)
        self.world.after(0.05, self._stop_step, self.world.t + grace)

    def _stop_step(self, give_up: float) -> None:
        if not self.alive:
            return
        if self.runs and self.world.t >= give_up:
            for run in self.runs.values():
                self._terminate(run, "stop grace over")
        if self.runs or (self.core.busy() and self.world.t < give_up + 2.0):
            self.world.after(0.05, self._stop_step, give_up)
            return
        if self.session is not None:
            session = self.session
            self.world.request(self, session, lambda zk: zk.close_session(session), lambda r: None)
        self._die()

    def _die(self) -> None:
        self.ledger.died(self.name, self.world.t)
        self.runs.clear()
        self.alive = False
        self.incarnation += 1
        self.session = None
        self.locks.clear()
        self.taking.clear()
        self.leftovers.clear()

    # -- the session ----------------------------------------------------------------------

    def _call(self, apply: Callable[[ZkModel], Any], on_reply: Callable[[Any], None]) -> None:
        def heard(result: Any) -> None:
            if not isinstance(result, ConnectionLoss):
                self._contact(result)
            on_reply(result)

        self.world.request(self, self.session, apply, heard)

    def _open_session(self) -> None:
        timeout, t = self.timeout, self.world.t

        def opened(result: Any) -> None:
            if isinstance(result, ZkError):
                self.world.after(RETRY, self._open_session)
                return
            self.session = result
            self.world.sessions[result] = self
            self.last_heard = self.world.t
            self.world.note(self.name, f"session {result}")
            self._register()

        self.world.request(self, None, lambda zk: zk.open_session(timeout, t), opened)

    def _register(self) -> None:
        session, name = self.session, self.name
        assert session is not None

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss):
                # it may have landed: ours are found by their session when we look
                self.world.after(RETRY, self._register_checked)
            elif not isinstance(result, ZkError) or isinstance(result, NodeExists):
                self._refresh()

        self._call(
            lambda zk: zk.create(session, f"/members/{name}.", b"", True, True, True), done
        )

    def _register_checked(self) -> None:
        session = self.session
        if session is None or not self.alive:
            return

        def found(result: Any) -> None:
            if isinstance(result, ZkError):
                self.world.after(RETRY, self._register_checked)
            elif result:
                self._refresh()
            else:
                self._register()

        self._call(
            lambda zk: [p for p in zk.ephemerals_of(session) if p.startswith("/members/")], found
        )

    def _contact(self, result: Any) -> None:
        if expired(result):
            if self.session is not None and self.alive and not self.refreshing:
                self.world.note(self.name, "session expired (told on reconnect)")
                self._session_gone()
                self.session = None
                self._open_session()
            return
        self.last_heard = self.world.t
        if not self.connected and not self.refreshing and self.session is not None:
            self._refresh()

    def _session_gone(self) -> None:
        if not self.lost:
            self._act(self.core.session_lost(self.now()))
        self.lost, self.connected = True, False
        self.locks.clear()
        self.leftovers.clear()

    def _watchdog(self) -> None:
        if not self.alive:
            return
        silence = self.world.t - self.last_heard
        if self.connected and silence > self.timeout / 3:
            self.world.note(self.name, "no contact: not connected")
            self.connected = False
            self._act(self.core.view_changed(None, self._owns, self.now()))
        if not self.lost and self.session is not None and silence > self.timeout / 2:
            self.world.note(self.name, "no contact: session treated as lost")
            self.lost = True
            self._act(self.core.session_lost(self.now()))
            self.leftovers.update(self.locks.values())
            self.locks.clear()
        self.world.after(self.timeout / 12, self._watchdog)

    def _ping(self) -> None:
        if not self.alive:
            return
        if self.session is not None:
            self._call(lambda zk: None, lambda r: None)
        self.world.after(self.timeout / 6, self._ping)

    def _refresh(self) -> None:
        """Read members, the job table and triggers (with watches), then tell the core."""
        session = self.session
        if session is None:
            return
        self.refreshing = True

        def read(zk: ZkModel) -> tuple[list[str], int, list[str]]:
            members = zk.get_children(session, "/members", watch=True)
            version = int(zk.get(session, "/jobs", watch=True)[0] or b"0")
            triggers = zk.get_children(session, "/triggers", watch=True)
            return members, version, triggers

        def done(result: Any) -> None:
            self.refreshing = False
            if isinstance(result, ZkError):
                if not expired(result) and self.alive:
                    self.world.after(RETRY, self._refresh)
                return
            members, version, triggers = result
            self._set_members(members)
            self._set_table(version)
            if self.lost and self.leftovers:
                self._clear_leftovers()
            was = self.connected
            self.connected, self.lost = True, False
            if not was:
                self.world.note(self.name, f"connected (session {session})")
            self._act(self.core.view_changed(session, self._owns, self.now()))
            self._take_triggers(triggers)

        self._call(read, done)

    def _set_members(self, names: list[str]) -> None:
        ids = {n.rsplit(".", 1)[0] for n in names}
        labels = self.ledger.labels
        self.owners = OwnerTable(Member(i, labels=labels.get(i, {})) for i in sorted(ids))

    def _set_table(self, version: int) -> None:
        if version != self.table_version:
            self.table_version = version
            self.table = self.ledger.tables[version]
            self._act(self.core.table_changed(self.table, self.now()))

    def _owns(self, job: str, spec: JobSpec) -> bool:
        return self.owners.owner(job, spec.labels) == self.name

    def watch_fired(self, event: WatchEvent) -> None:
        # also while the watchdog has us "not connected": the session is fine, and a watch
        # is one-shot (kazoo calls it back whatever our own view of the connection is)
        if not self.alive or self.session is None:
            return
        session = self.session
        if event.path == "/members":
            self._call(
                lambda zk: zk.get_children(session, "/members", watch=True), self._members_read
            )
        elif event.path == "/jobs":
            self._call(
                lambda zk: int(zk.get(session, "/jobs", watch=True)[0] or b"0"), self._table_read
            )
        elif event.path == "/triggers":
            self._call(
                lambda zk: zk.get_children(session, "/triggers", watch=True), self._take_triggers
            )

    def _reread(self, path: str) -> None:
        """A watch's re-read failed: its watch may not be set either, so read again (kazoo's
        watch recipes retry the same way)."""
        if self.alive and self.session is not None:
            self.watch_fired(WatchEvent(self.session, "changed", path))

    def _members_read(self, result: Any) -> None:
        if isinstance(result, ZkError):
            if not expired(result):
                self.world.after(RETRY, self._reread, "/members")
            return
        self._set_members(result)
        if self.connected:
            self._act(self.core.view_changed(self.session, self._owns, self.now()))

    def _table_read(self, result: Any) -> None:
        if isinstance(result, ZkError):
            if not expired(result):
                self.world.after(RETRY, self._reread, "/jobs")
            return
        self._set_table(result)

    def _take_triggers(self, result: Any) -> None:
        if isinstance(result, ZkError):
            if not expired(result):
                self.world.after(RETRY, self._reread, "/triggers")
            return
        if not self.connected:
            return
        for node in result:
            job = node.rsplit(".", 1)[0]
            entry = self.table.get(job)
            if entry is None or not self._owns(job, entry[0]):
                continue
            self._take_trigger(job, node)

    def _take_trigger(self, job: str, node: str) -> None:
        """Deleting the trigger's node takes it: one member does."""
        session = self.session or 0

        def taken(result: Any) -> None:
            if isinstance(result, ZkError):
                return  # another member took it, or it is looked at again on the next change
            self.ledger.trigger_taken(node, self)
            self._act(self.core.handle(job, m.Triggered(node), self.now()))

        self._call(lambda zk: zk.delete(session, f"/triggers/{node}"), taken)

    def _clear_leftovers(self) -> None:
        for path in list(self.leftovers):
            self.leftovers.discard(path)
            self._delete_lock(path)

    # -- actions --------------------------------------------------------------------------

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
            case m.ReadHistory(job):
                self._read_history(job)
            case m.ReadRanges(job, instants):
                self._read_ranges(job, instants)
            case m.TakeLease(job, wait):
                self._take_lease(job, self.world.t + wait)
            case m.GiveBackLease(job):
                path = self.locks.pop(job, None)
                if path is not None:
                    self._delete_lock(path)
            case m.Claim(job, instant, kind, late):
                self._claim(job, instant, kind, late)
            case m.Resolve(job, instant):
                self._resolve(job, instant)
            case m.Start(job, instant, kind, token):
                self.world.after(self.world.rng.uniform(0.0005, 0.003), self._start,
                                 job, instant, kind, token, self.incarnation)
            case m.Terminate(job, instant, why):
                run = self.runs.get((job, instant))
                if run is not None:
                    self._terminate(run, why)
            case m.WriteResult(job, instant, status, reason, _error):
                nonce = self.nonces.pop((job, instant), "")
                self._write(job, instant, encode(status, self.name, self.session, nonce,
                                                 "", reason.value if reason else ""))
            case m.RecordSkip(job, instant, kind, reason, covers_from, count):
                data = encode("skipped", self.name, self.session, "", kind, reason.value,
                              format_utc(covers_from) if covers_from else "", count)
                self._record_skip(job, instant, data, 20)
            case m.Skip(job, instant, reason, detail, count):
                self.skips[reason.value] = self.skips.get(reason.value, 0) + count
                self.world.note(self.name, f"skip {job}@{format_utc(instant)} {reason.value}"
                                f" {detail}")
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

    def _read_history(self, job: str) -> None:
        session = self.session or 0

        def read(zk: ZkModel) -> list[str]:
            try:
                return zk.get_children(session, fires_of(job))
            except NoNode:
                return []

        def done(result: Any) -> None:
            if isinstance(result, ZkError):
                self._event(job, m.HistoryRead(ok=False))
            else:
                instants = tuple(sorted(parse_utc(n) for n in result))
                self._event(job, m.HistoryRead(instants))

        self._call(read, done)

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

    def _take_lease(self, job: str, give_up: float) -> None:
        session = self.session or 0
        folder = f"/locks/{job}"
        self.taking.add(job)

        def create(zk: ZkModel) -> str:
            # a contender of ours left by a take whose reply was lost goes first (kazoo's
            # Lock finds its own node by a unique prefix the same way)
            for path in zk.ephemerals_of(session):
                if path.startswith(folder + "/"):
                    zk.delete(session, path)
            return zk.create(session, f"{folder}/{self.name}-", b"", True, True, True)

        def created(result: Any) -> None:
            if isinstance(result, ZkError):
                self.taking.discard(job)
                if isinstance(result, ConnectionLoss):
                    self.world.after(RETRY, self._orphan_check, job)
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN))
                return
            self._lease_turn(job, result, give_up)

        self._call(create, created)

    def _lease_turn(self, job: str, path: str, give_up: float) -> None:
        session = self.session or 0
        folder = f"/locks/{job}"

        def listed(result: Any) -> None:
            if isinstance(result, ZkError):
                self.taking.discard(job)
                self._delete_lock(path)  # our contender would block the job (kazoo #732)
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN))
                return
            order = sorted(result, key=lambda n: n.rsplit("-", 1)[1])
            if order and f"{folder}/{order[0]}" == path:
                self.taking.discard(job)
                self.locks[job] = path
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.TAKEN))
            elif self.world.t + 0.1 < give_up:
                self.world.after(0.1, self._lease_turn, job, path, give_up)
            else:
                self.taking.discard(job)
                self._delete_lock(path)
                holder = order[0].rsplit("-", 1)[0] if order else None
                self._call(lambda zk: self._holder_runs(zk, job),
                           lambda r: self._event(job, m.LeaseAnswered(
                               m.LeaseOutcome.BUSY, holder, r is not False)))

        self._call(lambda zk: zk.get_children(session, folder), listed)

    def _holder_runs(self, zk: ZkModel, job: str) -> bool:
        """Whether the job's newest record says a run is going."""
        session = self.session or 0
        try:
            names = zk.get_children(session, fires_of(job))
        except NoNode:
            return False
        if not names:
            return False
        return decode(zk.get(session, f"{fires_of(job)}/{max(names)}")[0])[0] == "running"

    def _orphan_check(self, job: str) -> None:
        """A contender create whose reply was lost may have landed: ours go, once we can."""
        session = self.session
        if session is None or not self.alive:
            return

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss):
                self.world.after(RETRY, self._orphan_check, job)

        def clear(zk: ZkModel) -> None:
            if job in self.taking or job in self.locks:
                return  # taken again since: that take clears what it finds
            for path in zk.ephemerals_of(session):
                if path.startswith(f"/locks/{job}/"):
                    zk.delete(session, path)

        self._call(clear, done)

    def _delete_lock(self, path: str) -> None:
        session = self.session or 0

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss):
                self.leftovers.add(path)
                self.world.after(RETRY, self._retry_leftovers)

        self._call(lambda zk: zk.delete(session, path), done)

    def _retry_leftovers(self) -> None:
        if self.alive and self.connected:
            self._clear_leftovers()

    def _claim(self, job: str, instant: datetime, kind: str, late: bool) -> None:
        self.ledger.claim_sent[(job, instant)] = self.world.t
        self._nonce += 1
        nonce = f"{self.name}:{self._nonce}"
        self.nonces[(job, instant)] = nonce
        session, path = self.session or 0, record_path(job, instant)
        name = format_utc(instant)
        data = encode("running", self.name, session, nonce, kind)

        def create(zk: ZkModel) -> tuple[str, int, str]:
            if late:
                # refused behind a newer record: a late claim never goes out of order
                # (modelled as one step; zksched reads the folder, then creates)
                try:
                    newer = sorted(n for n in zk.get_children(session, fires_of(job)) if n > name)
                except NoNode:
                    newer = []
                if newer and not zk.exists(session, path):
                    fields = decode(zk.data_of(f"{fires_of(job)}/{newer[0]}"))
                    if fields[0] == "skipped" and len(fields) > 6 and fields[6] and (
                        fields[6] <= name
                    ):
                        return "passed", 0, f"a skip range ({newer[0]})"
            try:
                zk.create(session, path, data, makepath=True)
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
            if fields[3] == nonce:
                return "created", stat.czxid, ""
            return "taken", 0, fields[1]

        self._call(look, lambda r: self._claim_answer(job, instant, r))

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

    def _start(self, job: str, instant: datetime, kind: str, token: int, incarnation: int) -> None:
        if incarnation != self.incarnation or not self.alive:
            return  # killed between its claim and its start: the at-most-once window
        run = Run(job, instant, kind, self.name, self.session or 0, token, self.world.t,
                  self.now())
        self.runs[(job, instant)] = run
        self.ledger.started(run, self)
        self._event(job, m.Started(instant))
        self.world.after(self.durations(job), self._exit, run, "ok", self.incarnation)

    def _exit(self, run: Run, status: str, incarnation: int) -> None:
        if incarnation != self.incarnation or self.runs.get((run.job, run.instant)) is not run:
            return
        del self.runs[(run.job, run.instant)]
        self.ledger.ended(run, self.world.t, status)
        self._event(run.job, m.Exited(run.instant, status))

    def _terminate(self, run: Run, why: str) -> None:
        self.world.note(self.name, f"terminate {run.job}@{format_utc(run.instant)}: {why}")
        self.world.after(0.005, self._exit, run, "terminated", self.incarnation)

    def _write(self, job: str, instant: datetime, data: bytes) -> None:
        if not self.alive:
            return
        session, path = self.session or 0, record_path(job, instant)

        def done(result: Any) -> None:
            if isinstance(result, NoNode) or not isinstance(result, ZkError):
                self._event(job, m.ResultWritten(instant))
            elif self.alive:
                self.world.after(RETRY, self._write, job, instant, data)

        self._call(lambda zk: zk.set(session, path, data), done)

    def _record_skip(self, job: str, instant: datetime, data: bytes, tries: int) -> None:
        if not self.alive or tries <= 0:
            return
        session, path = self.session or 0, record_path(job, instant)

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss) or expired(result):
                self.world.after(RETRY, self._record_skip, job, instant, data, tries - 1)

        self._call(lambda zk: zk.create(session, path, data, makepath=True), done)


def utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)
