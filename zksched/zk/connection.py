"""Connecting to ZooKeeper: connect strings, ACLs, TLS, retries, bounded calls.

Rules this module enforces (see ZOOKEEPER-NOTES.md):
- never read-only connections (they look CONNECTED and fail on write);
- with a digest credential, every znode zksched creates is writable by that credential
  only and readable by anyone;
- no call may block forever while SUSPENDED: callers use `wait()` with a deadline.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import socket
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.connection import WATCH_XID
from kazoo.protocol.serialization import Connect
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_acl, make_digest_acl

from zksched.zk.handler import Handshake, PollingHandler

log = logging.getLogger(__name__)

T = TypeVar("T")

_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:(\d{1,5}))?$")
_CHROOT_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")


class ZkUnreachable(Exception):
    """ZooKeeper could not be reached within the connect timeout."""

    def __init__(self, hosts: str, timeout: float) -> None:
        super().__init__(f"cannot reach ZooKeeper at {hosts} within {timeout:g}s")
        self.hosts = hosts
        self.timeout = timeout


@dataclass(frozen=True)
class ConnectString:
    hosts: tuple[tuple[str, int], ...]
    chroot: str | None

    def __str__(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        return hosts + (self.chroot or "")


CONNECT_STRING_FORM = "HOST[:PORT][,HOST[:PORT]...][/chroot], e.g. 127.0.0.1:2181"


def parse_connect_string(text: str) -> ConnectString:
    """Validate `h1:2181,h2:2181/chroot`; raise ValueError naming what is wrong and the form
    that is accepted."""
    text = text.strip()
    if not text:
        raise ValueError(f"the ZooKeeper connect string is empty; expected {CONNECT_STRING_FORM}")
    host_part, slash, chroot_part = text.partition("/")
    chroot: str | None = None
    if slash:
        chroot = "/" + chroot_part.rstrip("/")
        if chroot == "/":
            chroot = None
        elif not _CHROOT_RE.fullmatch(chroot) or any(
            part in (".", "..") for part in chroot.split("/")
        ):
            raise ValueError(
                f"invalid chroot {chroot!r} in ZooKeeper connect string {text!r}; expected "
                f"{CONNECT_STRING_FORM}, a chroot of letters, digits, '_', '.' and '-'"
            )
    hosts: list[tuple[str, int]] = []
    for item in host_part.split(","):
        item = item.strip()
        match = _HOST_RE.fullmatch(item)
        if not match:
            raise ValueError(
                f"invalid host {item!r} in ZooKeeper connect string {text!r}; expected "
                f"{CONNECT_STRING_FORM}"
            )
        port = int(match.group(3)) if match.group(3) else 2181
        if not 0 < port < 65536:
            raise ValueError(
                f"invalid port {port} in ZooKeeper connect string {text!r}; ports are 1 to 65535"
            )
        hosts.append((match.group(1), port))
    return ConnectString(tuple(hosts), chroot)


@dataclass(frozen=True)
class ZkSettings:
    """How to reach ZooKeeper. `hosts` is a full connect string, chroot included."""

    hosts: str = "127.0.0.1:2181"
    session_timeout: float = 10.0
    auth: str | None = None  # digest "user:password"
    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_check_hostname: bool = True

    def validate(self) -> None:
        """Raise ValueError with an operator-readable message for any bad setting."""
        parse_connect_string(self.hosts)
        if not 1.0 <= self.session_timeout <= 600.0:
            raise ValueError(
                f"session timeout {self.session_timeout:g}s is out of range (1s to 600s)"
            )
        if self.auth is not None:
            user, sep, password = self.auth.partition(":")
            if not sep or not user or not password:
                raise ValueError("--auth must be USER:PASSWORD (digest credential)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS client certificate and key go together: give both or neither")

    @property
    def credential(self) -> tuple[str, str] | None:
        if self.auth is None:
            return None
        user, _, password = self.auth.partition(":")
        return user, password

    def acl(self) -> list[ACL] | None:
        """zksched's credential may do everything; the world may read. None: open ACL."""
        credential = self.credential
        if credential is None:
            return None
        return [
            make_digest_acl(credential[0], credential[1], all=True),
            make_acl("world", "anyone", read=True),
        ]


def handshake_for(session_timeout: float) -> Handshake:
    """Connect attempts bounded by an eighth of the session (0.2 s to 1 s) while the session
    may live, so that after a short cut the member is back with the same session: an attempt
    made while the path answered nothing is abandoned well before the session can expire on
    the server, and the attempt under way when the path heals ends soon."""
    first = min(1.0, max(0.2, session_timeout / 8))
    return Handshake(first=first, limit=session_timeout, session=session_timeout)


def make_client(
    settings: ZkSettings, *, max_connect_delay: float | None = None, logger: Any = None
) -> KazooClient:
    """A KazooClient that retries connecting forever (the daemon never gives up on ZooKeeper),
    at most `max_connect_delay` seconds apart (default: a sixth of the session, 0.2 s to
    1 s: while the session may still be alive on the server, the next attempt comes soon).
    `logger`: what kazoo logs this client's events to (default: its "kazoo.client").

    Commands are not retried by kazoo itself: callers bound every call with `wait()`.
    """
    settings.validate()
    if max_connect_delay is None:
        max_connect_delay = min(1.0, max(0.2, settings.session_timeout / 6))
    kwargs: dict[str, Any] = {}
    if logger is not None:
        kwargs["logger"] = logger
    credential = settings.credential
    if credential is not None:
        kwargs["auth_data"] = [("digest", f"{credential[0]}:{credential[1]}")]
        kwargs["default_acl"] = settings.acl()
    if settings.tls:
        kwargs.update(
            use_ssl=True,
            verify_certs=True,
            ca=settings.tls_ca,
            certfile=settings.tls_cert,
            keyfile=settings.tls_key,
            check_hostname=settings.tls_check_hostname,
        )
    handler = PollingHandler(handshake=handshake_for(settings.session_timeout))
    client = KazooClient(
        hosts=settings.hosts,
        timeout=settings.session_timeout,
        read_only=False,
        handler=handler,
        connection_retry=KazooRetry(
            max_tries=-1,
            delay=0.1,
            backoff=2,
            max_jitter=0.3,
            max_delay=max_connect_delay,
            sleep_func=handler.sleep_func,  # short pauses while the session may live
        ),
        command_retry=KazooRetry(
            max_tries=3, delay=0.1, max_delay=1.0, deadline=5.0, sleep_func=handler.sleep_func
        ),
        **kwargs,
    )
    _watch_the_server(client, handler, settings.session_timeout)
    _refuse_past_the_wake_limit(client)
    return client


def _refuse_past_the_wake_limit(client: KazooClient) -> None:
    """kazoo wakes its connection thread with one byte per request on a socketpair, which
    nothing reads while it is not connected (nor the bytes of requests a dropped connection
    failed): after ~278 of them (Linux) the next call blocks its caller, whatever timeout it
    waits with, until a connection is made. While not connected, a request fails at once
    (ConnectionLoss) when that socket no longer takes a byte without waiting (a Unix socket
    stops being writable with three quarters of its room left: kazoo's own close fits)."""
    call = client._call

    def call_or_refuse(request: Any, async_object: Any) -> Any:
        if not client.connected:
            wake = client._connection._write_sock
            if wake is not None and not select.select([], [wake], [], 0)[1]:
                async_object.set_exception(
                    ConnectionLoss("too many requests wait for a connection already")
                )
                return False
        return call(request, async_object)

    client._call = call_or_refuse


def _watch_the_server(client: KazooClient, handler: PollingHandler, asked: float) -> None:
    """Two facts kazoo works out and keeps to itself, recorded on `handler`:
    - `last_reply`: an answer from the server (to a request, and also to a ping or to the
      connect, which kazoo reads without a result to set) proves it heard us just before;
      a watch notification does not (it can come when the server no longer hears us);
    - `granted_timeout`: the session timeout the server granted at the latest connect (its
      min/maxSessionTimeout clamp the one asked for, which is all kazoo keeps), noted from
      the connect's answer before kazoo reports CONNECTED."""
    connection = client._connection
    read_header = connection._read_header
    invoke = connection._invoke

    def read_header_and_note(*args: Any) -> Any:
        answer = read_header(*args)
        if answer[0].xid != WATCH_XID:
            handler.last_reply = time.monotonic()
        return answer

    def invoke_and_note(timeout: float, request: Any, *args: Any, **kwargs: Any) -> Any:
        answer = invoke(timeout, request, *args, **kwargs)
        if isinstance(request, Connect):
            granted_ms = answer[0].time_out
            if granted_ms > 0:  # 0: the session had expired (kazoo raises next)
                handler.last_reply = time.monotonic()
                _note_granted(handler, granted_ms / 1000, asked)
        return answer

    connection._read_header = read_header_and_note
    connection._invoke = invoke_and_note


def _note_granted(handler: PollingHandler, granted: float, asked: float) -> None:
    if handler.handshake is not None:
        handler.handshake.session = granted  # how long the session may live unheard
    if granted != handler.granted_timeout:
        handler.granted_timeout = granted
        _say_granted(granted, asked)


def _say_granted(granted: float, asked: float) -> None:
    if granted < asked:
        log.warning(
            "ZooKeeper granted a session timeout of %gs, not the %gs asked for (its "
            "maxSessionTimeout): sessions end, and this member gives up a silent "
            "connection, by %gs",
            granted,
            asked,
            granted,
            extra={"event": "session-timeout", "granted": granted, "asked": asked},
        )
    elif granted > asked:
        log.info(
            "ZooKeeper granted a session timeout of %gs, not the %gs asked for (its "
            "minSessionTimeout): a dead member's jobs move after %gs",
            granted,
            asked,
            granted,
            extra={"event": "session-timeout", "granted": granted, "asked": asked},
        )


def connect(settings: ZkSettings, timeout: float) -> KazooClient:
    """Start a client for a one-shot command; ZkUnreachable after `timeout` seconds."""
    client = make_client(settings, max_connect_delay=0.5)
    try:
        with warnings.catch_warnings():
            # kazoo warns when the chroot does not exist yet; ensure_paths() creates it.
            warnings.filterwarnings("ignore", message="No chroot path exists")
            client.start(timeout=timeout)
    except KazooTimeoutError:
        raise ZkUnreachable(settings.hosts, timeout) from None
    except Exception as exc:  # DNS failure, TLS setup, auth failure: all mean "not reachable"
        log.debug("connect failed", exc_info=True)
        close_quietly(client)
        raise ZkUnreachable(settings.hosts, timeout) from exc
    return client


def abandon_connection(client: KazooClient) -> bool:
    """Make kazoo give up its current connection and connect again, keeping its session if
    the server still has it. For a connection that answers nothing while kazoo's requests
    keep it from pinging (so kazoo itself would wait for the session to expire). Reaches
    into kazoo's connection for its socket; False when there is none."""
    sock = getattr(getattr(client, "_connection", None), "_socket", None)
    if not isinstance(sock, socket.socket):
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)  # kazoo's loop reads EOF and reconnects
    except OSError:  # already closed
        return False
    return True


def close_quietly(client: KazooClient) -> None:
    try:
        client.stop()
    except Exception:  # already stopped or never started
        log.debug("stop failed", exc_info=True)
    try:
        client.close()
    except Exception:
        log.debug("close failed", exc_info=True)


def wait(async_result: Any, timeout: float) -> Any:
    """The result of a kazoo `*_async` call, or KazooTimeoutError after `timeout` seconds.

    A timed-out request may still reach the server later; callers that create must be able
    to recognise their own node afterwards.
    """
    return async_result.get(timeout=timeout)


def ensure_paths(client: KazooClient, paths: Sequence[str], timeout: float) -> None:
    """Create folders (and a chroot) that must exist before watches are set on them."""
    if client.chroot:
        wait(client.ensure_path_async("/"), timeout)
    for path in paths:
        wait(client.ensure_path_async(path), timeout)


def finish_delete(client: KazooClient, path: str, pending: Any, timeout: float) -> bool:
    """Wait for `pending`, a delete of `path` (sent already, so that many go pipelined);
    a node somebody gave children goes with them. False: it was gone already. Other
    errors raise."""
    try:
        wait(pending, timeout)
    except NoNodeError:
        return False
    except NotEmptyError:
        delete_tree(client, path, timeout)
    return True


def delete_tree(client: KazooClient, path: str, timeout: float) -> None:
    """Delete `path` and everything below it, each call bounded by `timeout` (kazoo's own
    recursive delete has no deadline). Nodes already gone are fine; others' errors raise."""
    stack, order = [path], []
    while stack:  # each node listed before what is below it; deleted in reverse
        node = stack.pop()
        order.append(node)
        try:
            children = wait(client.get_children_async(node), timeout)
        except NoNodeError:
            continue
        stack.extend(f"{node}/{child}" for child in children)
    for node in reversed(order):
        with contextlib.suppress(NoNodeError):
            wait(client.delete_async(node), timeout)
