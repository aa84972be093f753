"""A stall of the member's own process is not ZooKeeper's silence.

A full garbage collection of a million jobs holds every thread of the daemon for seconds;
kazoo reads nothing meanwhile, whatever the server sent. Counted as silence, such a pass
made a member stop owning and reconnect (and re-align every job) every few minutes. The
watchdog now counts a stall toward the loss margin (the server heard nothing from us either)
but not toward the silence limit. The stall here is a C call that keeps the GIL, as the
collector does, against a real ZooKeeper."""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from integration.harness import wait_until
from zksched.core.members import Member
from zksched.runtime.membership.cluster_membership import ClusterMembership
from zksched.zk.paths import ClusterPaths

SESSION = 24.0  # silence limit 8 s, loss margin 12 s, a probe every second


def hold_every_thread(seconds: float) -> None:
    """Sleep in C without letting go of the GIL (ctypes.PyDLL keeps it)."""
    libc = ctypes.PyDLL(ctypes.util.find_library("c"))
    libc.usleep(ctypes.c_uint(int(seconds * 1_000_000)))


def test_a_stall_of_this_process_longer_than_the_silence_limit_is_not_silence(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    membership = ClusterMembership(
        zk_client(zk, SESSION), ClusterPaths(client_id), Member(member_id="m"), SESSION
    )
    connected: list[bool] = []
    membership.add_view_listener(lambda view: connected.append(view.connected))
    lost: list[bool] = []
    membership.add_session_loss_listener(lambda: lost.append(True))
    membership.start()
    try:
        wait_until(lambda: membership.view.active, 10, what="joined")
        seen = len(connected)
        stall = membership.silence_limit + 0.5
        # the last reply came up to a probe interval (1 s) before; a loaded machine takes
        # a while to read the first one after: seconds of room below the loss margin
        assert stall + 3 < membership.loss_margin
        hold_every_thread(stall)
        time.sleep(3.0)  # three more looks of the watchdog, with fresh replies
        assert all(connected[seen:]), "the member went silent over its own process's stall"
        assert not lost
        assert membership.view.active
    finally:
        membership.stop()
