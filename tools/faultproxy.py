"""A fault-injecting TCP proxy to put between a member and ZooKeeper (tests and chaos only).

Modes, switchable at any time:
- pass: forward bytes both ways;
- blackhole: accept, forward nothing, and read nothing: bytes wait in the sockets' buffers
  and go on, in order, once the mode changes (a partition: both sides hear silence, and TCP
  delivers what was sent, late, if the connection is still open when the path heals; its
  session expires on the server after the timeout);
- reset: abort every connection with RST and refuse new ones the same way;
- delay: forward each chunk `delay` seconds late, each way, order kept;
- throttle: forward replies at `rate` bytes a second, in small slices, order kept (a
  saturated server or link: every reply comes, steadily, but a deep queue takes long);
- drop-replies: forward requests to the server; when a reply comes back, abort the
  connection instead of delivering it (a create that succeeds on the server while the client
  sees ConnectionLoss). Bytes are never dropped from a live stream: TCP does not do that.
- corrupt-once: swallow the next reply chunk on every live connection, then pass (a broken
  middlebox; kazoo's connection loop dies on the desynchronised stream).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

PASS, BLACKHOLE, RESET, DELAY = "pass", "blackhole", "reset", "delay"
THROTTLE = "throttle"
_SLICE = 256  # bytes a throttled reply stream moves at a time
DROP_REPLIES = "drop-replies"
CORRUPT_ONCE = "corrupt-once"


def _abort(sock: socket.socket) -> None:
    """Close with RST rather than FIN (SO_LINGER 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    closed: bool = False
    corrupted: bool = False


@dataclass
class FaultProxy:
    """Listens on 127.0.0.1:`port` (0: any free port) and forwards to `target`."""

    target: tuple[str, int]
    port: int = 0
    mode: str = PASS
    delay: float = 0.0
    rate: float = 0.0  # THROTTLE: bytes a second
    _listener: socket.socket | None = None
    _pairs: list[_Pair] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _delayed: list[tuple[float, int, socket.socket, bytes]] = field(default_factory=list)
    _delay_cv: threading.Condition = field(default_factory=threading.Condition)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _queued: dict[socket.socket, int] = field(default_factory=dict)  # per destination
    _last_due: dict[socket.socket, float] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()
        threading.Thread(target=self._delay_loop, name="proxy-delay", daemon=True).start()
        return self

    def set_mode(self, mode: str, delay: float = 0.0, rate: float = 0.0) -> None:
        if mode not in (PASS, BLACKHOLE, RESET, DELAY, THROTTLE, DROP_REPLIES, CORRUPT_ONCE):
            raise ValueError(f"unknown proxy mode {mode!r}")
        if mode == THROTTLE and rate <= 0:
            raise ValueError("throttle needs a rate in bytes a second")
        self.mode, self.delay, self.rate = mode, delay, rate
        if mode == RESET:
            with self._lock:
                pairs, self._pairs = self._pairs, []
            for pair in pairs:
                self._close(pair, abort=True)

    def stop(self) -> None:
        self._stopped.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            self._close(pair, abort=True)
        with self._delay_cv:
            self._delay_cv.notify_all()

    # -- internals --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == RESET:
                _abort(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _abort(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair: _Pair) -> None:
        peers = {pair.client: pair.upstream, pair.upstream: pair.client}
        while not pair.closed and not self._stopped.is_set():
            if self.mode == BLACKHOLE:
                time.sleep(0.01)  # held, not dropped: a stream is never cut short mid-way
                continue
            try:
                readable, _, _ = select.select(list(peers), [], [], 0.2)
            except (OSError, ValueError):
                break
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self._close(pair, abort=False)
                    return
                mode = self.mode
                if mode == CORRUPT_ONCE and sock is pair.upstream and not pair.corrupted:
                    pair.corrupted = True
                    continue
                if mode == DROP_REPLIES and sock is pair.upstream:
                    self._close(pair, abort=True)
                    return  # swallowed: the other side hears nothing
                if mode == RESET:
                    self._close(pair, abort=True)
                    return
                if mode == THROTTLE and sock is pair.upstream:
                    for at in range(0, len(data), _SLICE):
                        piece = data[at : at + _SLICE]
                        self._schedule(peers[sock], piece, len(piece) / self.rate)
                    continue
                if (mode == DELAY and self.delay > 0) or self._queued.get(peers[sock], 0):
                    # Still-queued chunks go first, even after the delay is switched off:
                    # TCP never reorders a stream (kazoo dies on reordered replies).
                    self._schedule(peers[sock], data)
                    continue
                try:
                    peers[sock].sendall(data)
                except OSError:
                    self._close(pair, abort=False)
                    return
        self._close(pair, abort=False)

    def _schedule(self, dest: socket.socket, data: bytes, spacing: float = 0.0) -> None:
        with self._delay_cv:
            delay = self.delay if self.mode == DELAY else 0.0
            # Never earlier than what is queued for the same socket: order is kept.
            due = max(time.monotonic() + delay, self._last_due.get(dest, 0.0) + spacing)
            self._last_due[dest] = due
            self._queued[dest] = self._queued.get(dest, 0) + 1
            heapq.heappush(self._delayed, (due, next(self._seq), dest, data))
            self._delay_cv.notify()

    def _delay_loop(self) -> None:
        while not self._stopped.is_set():
            with self._delay_cv:
                while not self._delayed and not self._stopped.is_set():
                    self._delay_cv.wait(0.5)
                if self._stopped.is_set():
                    return
                due, _, dest, data = self._delayed[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._delay_cv.wait(wait)
                    continue
                heapq.heappop(self._delayed)
                self._queued[dest] -= 1
            with contextlib.suppress(OSError):
                dest.sendall(data)

    def _close(self, pair: _Pair, abort: bool) -> None:
        if pair.closed:
            return
        pair.closed = True
        for sock in (pair.client, pair.upstream):
            if abort:
                _abort(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.close()
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
