"""One leader per cluster id, for apps that keep their own timer.

Candidates are ephemeral sequential nodes `leader/<nonce>__cand__<seq>`; the lowest live one
leads. Each candidate watches only its nearest predecessor (a leader's exit wakes one
candidate, not the whole folder).

Invariants:
- `is_leader` is True only while our node is the lowest candidate AND kazoo's state is
  CONNECTED. SUSPENDED turns it False at once (the state listener clears the flag before
  anything else): the session may already be gone on the server without our knowing. On
  reconnection the worker re-reads the folder before it says True again.
- The fencing token of a term is the leader node's czxid. Leaders follow each other in
  sequence order (a node created later always has a larger sequence, and a node lower than
  the current leader never appears again), and within one parent a larger sequence means a
  later create, so terms' tokens strictly increase across the cluster; they keep growing
  when the folder is deleted and made again (zxids are global).
- A create whose reply was lost may have landed: the node's name carries our nonce, and
  before any create we list the folder and adopt a node with our nonce owned by our
  session (extra ones, and ones of an earlier session, are deleted). The listing is sent
  after the lost create on the same connection or on a later one, so it sees the create if
  it ever applies. No ghost candidate of ours can lead with nobody acting on it.
- Anything else in the folder is inert: names that are not candidates are ignored, and a
  persistent node (ephemeralOwner 0, hand-made) named like one is skipped, since it would
  otherwise lead forever. A candidate's data is never needed to decide anything.

Threads: one worker thread (`zksched-election`) makes every ZooKeeper call and calls the
listeners, in order, holding no lock of ours (the last call, `(False, None)`, comes from the
thread that calls `stop()`, after the worker has ended). kazoo's state listener and watch callbacks
only set flags and wake the worker (they must not block, ZOOKEEPER-NOTES.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zksched.core.znodedata import load_object
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

Listener = Callable[[bool, "int | None"], None]

_CANDIDATE_RE = re.compile(r"^(?P<nonce>[0-9a-f]{1,64})__cand__(?P<seq>[0-9]{10})$")
RECHECK = 5.0  # seconds between re-reads of the folder while nothing wakes the worker
RETRY = 0.5  # seconds after a failed call


def parse_candidate(name: str) -> tuple[int, str] | None:
    """(sequence, nonce) of a candidate's node name; None when it is no candidate's."""
    match = _CANDIDATE_RE.fullmatch(name)
    if match is None:
        return None
    return int(match.group("seq")), match.group("nonce")


class LeaderElection:
    def __init__(
        self, client: KazooClient, paths: ClusterPaths, member_id: str, call_timeout: float = 3.0
    ) -> None:
        self._client = client
        self._paths = paths
        self._member_id = member_id
        self._timeout = call_timeout
        self._nonce = uuid.uuid4().hex
        self._data = json.dumps({"member_id": member_id}).encode()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._cv = threading.Condition()  # guards the published state below
        self._leading = False
        self._token: int | None = None
        # what the listeners last heard (the state listener clears _leading on its own)
        self._told: tuple[bool, int | None] = (False, None)
        self._listeners: list[Listener] = []
        # the member's own verdict on its contact with ZooKeeper (`contact()`)
        self._contact = True
        self._thread: threading.Thread | None = None
        # the worker's own state (only the worker touches it while it runs)
        self._node: str | None = None  # our candidate's name
        self._node_session: int | None = None
        self._czxid: int | None = None
        self._warned: set[str] = set()

    # -- public ---------------------------------------------------------------------------

    def start(self) -> None:
        """Join the election (idempotent). Returns at once; the worker creates the node."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="zksched-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Leave the election: our node is deleted, so the next candidate leads at once
        (if ZooKeeper cannot be reached, the session's end removes it)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake.set()
        thread.join(self._timeout * 4)
        self._thread = None
        self._client.remove_listener(self._on_state)
        self._publish(False)
        self._leave()

    def _leave(self) -> None:
        """Delete our node, and any other node with our nonce (a create whose reply was
        lost and that was never adopted), so that no candidate of ours outlives us."""
        node, self._node = self._node, None
        try:
            if node is not None:
                self._delete_quietly(node)
            for _seq, name in self._candidates(watch=False):
                if name.startswith(self._nonce + "__"):
                    self._delete_quietly(name)
        except NoNodeError:
            pass  # no folder, no candidate
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("could not delete our leader candidate (%s); its session will", exc)

    @property
    def is_leader(self) -> bool:
        return self._leading and self._contact and self._client.state == KazooState.CONNECTED

    def contact(self, connected: bool) -> None:
        """The member's contact watchdog's verdict (docs/architecture.md, session states: a
        member that keeps sending into a partition may never be told SUSPENDED by kazoo):
        without contact no term is ours; once it is back the worker looks again."""
        self._contact = connected
        if not connected:
            self._leading = False  # at once; the worker tells the listeners
        self._wake.set()

    @property
    def term(self) -> int | None:
        """The fencing token of our current term (our node's czxid), None when not leading."""
        with self._cv:
            return self._token if self.is_leader else None

    def add_listener(self, callback: Listener) -> None:
        """`callback(leading, token)` on every change, from the worker thread (keep it short:
        the next change waits for it). Exceptions are logged and ignored."""
        with self._cv:
            self._listeners.append(callback)

    def remove_listener(self, callback: Listener) -> None:
        with self._cv:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        """Wait until we lead (True), `timeout` passes or `stop()` is called (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._stopping.is_set():
                if self.is_leader:
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cv.wait(remaining)
            return False

    def leader_id(self) -> str | None:
        """The member id the current leader wrote in its node (bounded reads); None when
        there is none, it cannot be read, or its data is not ours to understand."""
        try:
            for _seq, name in self._candidates(watch=False):
                raw, stat = wait(self._client.get_async(self._candidate(name)), self._timeout)
                if stat.ephemeralOwner == 0:
                    continue
                value = load_object(raw, "leader candidate node").get("member_id")
                return value if isinstance(value, str) else None
        except (KazooException, KazooTimeoutError, ValueError, AttributeError):
            return None
        return None

    # -- kazoo's threads: flags only --------------------------------------------------------

    def _on_state(self, state: str) -> bool:
        if state != KazooState.CONNECTED:
            self._leading = False  # at once; the worker tells the listeners
        self._wake.set()
        return False  # stay registered

    def _on_watch(self, _event: Any) -> None:
        self._wake.set()

    # -- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            pause = RECHECK
            try:
                self._publish(self._step())
            except (KazooException, KazooTimeoutError) as exc:
                log.debug("election step failed (%s); trying again", type(exc).__name__)
                self._publish(False)
                pause = RETRY
            except Exception:  # never let the worker die: the election would freeze
                log.exception("election step failed")
                self._publish(False)
                pause = RETRY
            self._wake.wait(pause)

    def _step(self) -> bool:
        if self._client.state != KazooState.CONNECTED or self._stopping.is_set():
            return False
        session = self._client.client_id[0] if self._client.client_id else None
        if self._node is not None and self._node_session != session:
            log.info("leader candidate %s went with its session; joining again", self._node)
            self._node = None
        if self._node is None:
            self._join(session)
            if self._stopping.is_set():  # stop() may have looked before our node existed
                self._leave()
                return False
        return self._evaluate()

    def _join(self, session: int | None) -> None:
        """Adopt our node if a create whose reply was lost landed; else create one."""
        wait(self._client.ensure_path_async(self._paths.leader), self._timeout)
        mine: list[tuple[int, str, int]] = []  # (seq, name, czxid) of this session
        for seq, name in self._candidates(watch=False):
            if parse_candidate(name) != (seq, self._nonce):
                continue
            stat = wait(self._client.exists_async(self._candidate(name)), self._timeout)
            if stat is None:
                continue
            if stat.ephemeralOwner == session:
                mine.append((seq, name, stat.czxid))
            else:  # ours from an earlier session that is ending: never a candidate again
                self._delete_quietly(name)
        if mine:
            mine.sort()
            for _, extra, _ in mine[1:]:
                self._delete_quietly(extra)
            _, self._node, self._czxid = mine[0]
            log.info("adopted leader candidate %s (a create whose reply was lost)", self._node)
        else:
            created, stat = wait(
                self._client.create_async(
                    self._paths.leader_candidate_prefix(self._nonce),
                    self._data,
                    ephemeral=True,
                    sequence=True,
                    include_data=True,
                ),
                self._timeout,
            )
            self._node = created.rsplit("/", 1)[-1]
            self._czxid = stat.czxid
        self._node_session = session

    def _evaluate(self) -> bool:
        """Whether we lead; sets a watch on what we wait for (the nearest live predecessor)
        and on our own node (a hand-deleted node makes us join again)."""
        assert self._node is not None
        own = wait(
            self._client.exists_async(self._candidate(self._node), self._on_watch), self._timeout
        )
        if own is None:
            log.warning("leader candidate %s was deleted; joining again", self._node)
            self._node = None
            self._wake.set()
            return False
        parsed = parse_candidate(self._node)
        assert parsed is not None
        below = [name for seq, name in self._candidates(watch=False) if seq < parsed[0]]
        for name in reversed(below):  # nearest first
            stat = wait(
                self._client.exists_async(self._candidate(name), self._on_watch), self._timeout
            )
            if stat is None:
                continue  # gone meanwhile
            if stat.ephemeralOwner == 0:
                if name not in self._warned:
                    self._warned.add(name)
                    log.warning("ignoring %s in the leader folder: not ephemeral", name)
                continue
            return False
        return True

    def _candidates(self, watch: bool) -> list[tuple[int, str]]:
        names = wait(
            self._client.get_children_async(self._paths.leader, self._on_watch if watch else None),
            self._timeout,
        )
        found = [(parsed[0], name) for name in names if (parsed := parse_candidate(name))]
        return sorted(found)

    def _candidate(self, name: str) -> str:
        return f"{self._paths.leader}/{name}"

    def _delete_quietly(self, name: str) -> None:
        with contextlib.suppress(NoNodeError):
            wait(self._client.delete_async(self._candidate(name)), self._timeout)

    def _publish(self, leading: bool) -> None:
        """Record the outcome; call the listeners (outside our lock) when it changed."""
        # never a term of a session that ended while the worker was evaluating
        session = self._client.client_id[0] if self._client.client_id else None
        leading = (
            leading
            and self._contact
            and not self._stopping.is_set()
            and session == self._node_session
        )
        token = self._czxid if leading else None
        with self._cv:
            changed = (leading, token) != self._told
            self._leading, self._token, self._told = leading, token, (leading, token)
            listeners = list(self._listeners) if changed else []
            self._cv.notify_all()
        for callback in listeners:
            try:
                callback(leading, token)
            except Exception:
                log.exception("leadership listener failed")
