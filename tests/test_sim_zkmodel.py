"""Unit tests of the deterministic ZooKeeper model used by the cluster simulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.zkmodel import (
    BadArguments,
    BadVersion,
    Check,
    Create,
    Delete,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    Op,
    RolledBack,
    SessionExpired,
    SetData,
    Stat,
    WatchEvent,
    ZkError,
    ZkModel,
)


def fresh() -> tuple[ZkModel, int]:
    zk = ZkModel()
    return zk, zk.open_session(10.0, 0.0)


def snapshot(zk: ZkModel) -> tuple[int, list[tuple[str, bytes, Stat]]]:
    return zk.zxid, [(p, zk.data_of(p), zk.stat_of(p)) for p in zk.node_paths()]


# ---- errors: each raises, and changes nothing ----


def _setup(zk: ZkModel, s: int) -> None:
    zk.create(s, "/p", b"x")
    zk.create(s, "/p/c")
    zk.create(s, "/eph", ephemeral=True)


ERROR_CASES: list[tuple[str, Callable[[ZkModel, int], Any], type[ZkError]]] = [
    ("create taken", lambda zk, s: zk.create(s, "/p"), NodeExists),
    ("create root", lambda zk, s: zk.create(s, "/"), NodeExists),
    ("create no parent", lambda zk, s: zk.create(s, "/nope/x"), NoNode),
    ("create seq no parent", lambda zk, s: zk.create(s, "/nope/x", sequential=True), NoNode),
    ("create under ephemeral", lambda zk, s: zk.create(s, "/eph/x"), NoChildrenForEphemerals),
    (
        "makepath under ephemeral",
        lambda zk, s: zk.create(s, "/eph/a/b", makepath=True),
        NoChildrenForEphemerals,
    ),
    ("makepath over existing", lambda zk, s: zk.create(s, "/p/c", makepath=True), NodeExists),
    ("create relative", lambda zk, s: zk.create(s, "p2"), BadArguments),
    ("create empty", lambda zk, s: zk.create(s, ""), BadArguments),
    ("create trailing slash", lambda zk, s: zk.create(s, "/p2/"), BadArguments),
    ("create double slash", lambda zk, s: zk.create(s, "//p2"), BadArguments),
    ("set missing", lambda zk, s: zk.set(s, "/nope", b""), NoNode),
    ("set bad version", lambda zk, s: zk.set(s, "/p", b"", version=3), BadVersion),
    ("delete missing", lambda zk, s: zk.delete(s, "/nope"), NoNode),
    ("delete bad version", lambda zk, s: zk.delete(s, "/p/c", version=1), BadVersion),
    ("delete bad version beats not empty", lambda zk, s: zk.delete(s, "/p", 7), BadVersion),
    ("delete not empty", lambda zk, s: zk.delete(s, "/p"), NotEmpty),
    ("delete root", lambda zk, s: zk.delete(s, "/"), BadArguments),
    ("get missing", lambda zk, s: zk.get(s, "/nope"), NoNode),
    ("children missing", lambda zk, s: zk.get_children(s, "/nope"), NoNode),
    ("data_of missing", lambda zk, s: zk.data_of("/nope"), NoNode),
    ("stat_of missing", lambda zk, s: zk.stat_of("/nope"), NoNode),
]


@pytest.mark.parametrize(("name", "call", "error"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors_raise_and_change_nothing(
    name: str, call: Callable[[ZkModel, int], Any], error: type[ZkError]
) -> None:
    zk, s = fresh()
    _setup(zk, s)
    before = snapshot(zk)
    with pytest.raises(error):
        call(zk, s)
    assert snapshot(zk) == before
    # The sequential counter (parent cversion) did not move either.
    assert zk.create(s, "/p/q", sequential=True) == "/p/q0000000001"


DEAD_CALLS: list[tuple[str, Callable[[ZkModel, int], Any]]] = [
    ("touch", lambda zk, s: zk.touch(s, 1.0)),
    ("timeout", lambda zk, s: zk.session_timeout(s)),
    ("close", lambda zk, s: zk.close_session(s)),
    ("get", lambda zk, s: zk.get(s, "/")),
    ("exists", lambda zk, s: zk.exists(s, "/")),
    ("children", lambda zk, s: zk.get_children(s, "/")),
    ("create", lambda zk, s: zk.create(s, "/x")),
    ("set", lambda zk, s: zk.set(s, "/", b"")),
    ("delete", lambda zk, s: zk.delete(s, "/x")),
    ("multi", lambda zk, s: zk.multi(s, [Create("/x")])),
]


@pytest.mark.parametrize(("name", "call"), DEAD_CALLS, ids=[c[0] for c in DEAD_CALLS])
def test_dead_session_is_refused(name: str, call: Callable[[ZkModel, int], Any]) -> None:
    zk, s = fresh()
    zk.expire(s)
    zk.expire(s)  # idempotent
    with pytest.raises(SessionExpired):
        call(zk, s)
    with pytest.raises(SessionExpired):
        call(zk, 99)  # never opened
    assert not zk.alive(s)
    assert zk.node_paths() == ["/"]


# ---- sequential nodes ----


def test_sequential_counter_is_parent_cversion_and_grows_across_deletes() -> None:
    zk, s = fresh()
    zk.create(s, "/q")
    first = zk.create(s, "/q/n-", sequential=True)
    assert first == "/q/n-0000000000"
    zk.create(s, "/q/plain")
    zk.delete(s, first)
    zk.delete(s, "/q/plain")
    assert zk.create(s, "/q/n-", sequential=True) == "/q/n-0000000004"
    assert zk.create(s, "/q/", sequential=True) == "/q/0000000005"  # name is just the counter
    assert zk.create(s, "/r-", sequential=True, ephemeral=True) == "/r-0000000001"
    assert zk.create(s, "/new/deep/x-", sequential=True, makepath=True) == "/new/deep/x-0000000000"
    assert zk.get_children(s, "/q") == ["0000000005", "n-0000000004"]


def test_makepath_creates_persistent_parents_in_one_zxid() -> None:
    zk, s = fresh()
    w = zk.open_session(10.0, 0.0)
    assert zk.exists(w, "/a", watch=True) is None
    zk.get_children(w, "/", watch=True)
    assert zk.create(s, "/a/b/c", b"d", ephemeral=True, makepath=True) == "/a/b/c"
    assert zk.zxid == 1
    assert [zk.stat_of(p).czxid for p in ("/a", "/a/b", "/a/b/c")] == [1, 1, 1]
    assert zk.stat_of("/a").ephemeral_owner == 0
    assert zk.stat_of("/a/b/c").ephemeral_owner == s
    assert zk.ephemerals_of(s) == ["/a/b/c"]
    assert zk.take_events(w) == [WatchEvent(w, "created", "/a"), WatchEvent(w, "child", "/")]


# ---- stats ----


def test_stats_track_zxids_and_versions() -> None:
    zk, s = fresh()
    zk.create(s, "/n", b"0")  # zxid 1
    assert zk.stat_of("/n") == Stat(1, 1, 1, 0, 0, 0, 0)
    st1 = zk.set(s, "/n", b"1", version=0)  # zxid 2
    assert st1 == Stat(1, 2, 1, 1, 0, 0, 0)
    zk.create(s, "/n/c", ephemeral=False)  # zxid 3
    zk.create(s, "/n/e", ephemeral=True)  # zxid 4
    assert zk.stat_of("/n") == Stat(1, 2, 4, 1, 2, 0, 2)
    assert zk.stat_of("/n/e").ephemeral_owner == s
    zk.delete(s, "/n/c", version=0)  # zxid 5
    assert zk.stat_of("/n") == Stat(1, 2, 5, 1, 3, 0, 1)
    data, stat = zk.get(s, "/n")
    assert (data, stat) == (b"1", zk.stat_of("/n"))
    assert zk.exists(s, "/n") == stat
    assert zk.stat_of("/").pzxid == 1 and zk.stat_of("/").cversion == 1
    assert zk.zxid == 5


# ---- multi ----


def test_multi_applies_all_in_one_zxid_with_per_op_results() -> None:
    zk, s = fresh()
    zk.create(s, "/old")
    results = zk.multi(
        s,
        [
            Create("/m", b"a"),
            Create("/m/c", ephemeral=True),
            Create("/m/s-", sequential=True),
            SetData("/m", b"b", version=0),
            Check("/m", 1),
            Delete("/old", version=0),
            Delete("/m/c"),
            Create("/m/c", b"again"),
        ],
    )
    assert zk.zxid == 2
    assert results[:3] == ["/m", "/m/c", "/m/s-0000000001"]
    assert results[3] == Stat(2, 2, 2, 1, 2, 0, 2)
    assert results[4:7] == [None, None, None]
    assert results[7] == "/m/c"
    assert zk.node_paths() == ["/", "/m", "/m/c", "/m/s-0000000001"]
    assert zk.data_of("/m") == b"b" and zk.data_of("/m/c") == b"again"
    assert zk.ephemerals_of(s) == []
    assert zk.stat_of("/m") == Stat(2, 2, 2, 1, 4, 0, 2)


@pytest.mark.parametrize(
    ("ops", "bad", "error"),
    [
        ([Create("/x"), Create("/x/y"), SetData("/missing", b"")], 2, NoNode),
        ([Check("/base", 5), Create("/x")], 0, BadVersion),
        ([Create("/x"), Create("/x")], 1, NodeExists),
        ([Delete("/base/k"), Delete("/base", version=0), Create("/y")], 2, NodeExists),
        ([Create("/base/s", sequential=True), Delete("/base")], 1, NotEmpty),
        ([SetData("/base", b"z"), Check("/base", 0)], 1, BadVersion),
        ([Create("/e", ephemeral=True), Create("/e/c")], 1, NoChildrenForEphemerals),
        ([Delete("/base/k"), Create("/base/k/z")], 1, NoNode),
        ([Create("bad")], 0, BadArguments),
    ],
)
def test_failed_multi_applies_nothing(ops: list[Op], bad: int, error: type[ZkError]) -> None:
    zk, s = fresh()
    w = zk.open_session(10.0, 0.0)
    zk.create(s, "/base", b"v")
    zk.create(s, "/base/k", b"k")
    zk.create(s, "/y")
    zk.get(w, "/base", watch=True)
    zk.get_children(w, "/base", watch=True)
    zk.exists(w, "/x", watch=True)
    before = snapshot(zk)
    results = zk.multi(s, ops)
    assert len(results) == len(ops)
    assert type(results[bad]) is error
    assert all(type(r) is RolledBack for i, r in enumerate(results) if i != bad)
    assert snapshot(zk) == before
    assert zk.ephemerals_of(s) == []
    assert zk.take_events(w) == []
    # Watches survived the failed multi and the sequential counter did not move.
    assert zk.create(s, "/base/n", sequential=True) == "/base/n0000000001"
    assert zk.take_events(w) == [WatchEvent(w, "child", "/base")]


def test_failed_multi_restores_deleted_ephemerals_to_their_session() -> None:
    zk, s = fresh()
    zk.create(s, "/e", ephemeral=True)
    results = zk.multi(s, [Delete("/e"), Create("/e/never")])
    assert [type(r) for r in results] == [RolledBack, NoNode]
    assert zk.ephemerals_of(s) == ["/e"]
    zk.expire(s)
    assert zk.node_paths() == ["/"]


def test_multi_of_checks_and_empty_multi_spend_no_zxid() -> None:
    zk, s = fresh()
    zk.create(s, "/a")
    assert zk.multi(s, [Check("/a", 0), Check("/a", -1)]) == [None, None]
    assert zk.multi(s, []) == []
    assert zk.zxid == 1


def test_multi_events_in_op_order() -> None:
    zk, s = fresh()
    w = zk.open_session(10.0, 0.0)
    zk.create(s, "/a")
    zk.get(w, "/a", watch=True)
    zk.get_children(w, "/", watch=True)
    zk.exists(w, "/b", watch=True)
    zk.multi(s, [SetData("/a", b"1"), Create("/b"), SetData("/a", b"2")])
    assert zk.take_events(w) == [
        WatchEvent(w, "changed", "/a"),
        WatchEvent(w, "created", "/b"),
        WatchEvent(w, "child", "/"),
    ]


# ---- sessions ----


@pytest.mark.parametrize(
    ("tick", "asked", "negotiated"),
    [
        (0.5, 0.1, 1.0),
        (0.5, 1.0, 1.0),
        (0.5, 4.0, 4.0),
        (0.5, 10.0, 10.0),
        (0.5, 60.0, 10.0),
        (2.0, 1.0, 4.0),
        (2.0, 100.0, 40.0),
    ],
)
def test_timeout_is_clamped(tick: float, asked: float, negotiated: float) -> None:
    zk = ZkModel(tick=tick)
    assert zk.session_timeout(zk.open_session(asked, 0.0)) == negotiated


def test_session_ids_count_up_and_expiry_follows_last_contact() -> None:
    zk = ZkModel()
    a, b, c = (zk.open_session(4.0, 0.0) for _ in range(3))
    assert (a, b, c) == (1, 2, 3)
    zk.touch(a, 3.0)
    zk.touch(c, 1.0)
    assert zk.expire_due(4.0) == []  # exactly the timeout is not past it
    assert zk.expire_due(5.5) == [b, c]
    assert zk.alive(a) and not zk.alive(b)
    assert zk.expire_due(7.01) == [a]
    assert zk.open_session(4.0, 8.0) == 4  # ids are never reused
    assert zk.zxid == 0  # no ephemerals: no transaction


def test_expiry_deletes_ephemerals_in_one_zxid_and_notifies_others() -> None:
    zk = ZkModel()
    owner = zk.open_session(2.0, 0.0)
    other = zk.open_session(10.0, 0.0)
    zk.create(other, "/g")
    zk.create(other, "/other")
    zk.create(owner, "/g/e1", ephemeral=True)
    zk.create(owner, "/g/e2", b"2", ephemeral=True)
    zk.create(owner, "/g/persistent")
    assert zk.ephemerals_of(owner) == ["/g/e1", "/g/e2"]
    zk.get_children(other, "/g", watch=True)
    zk.exists(other, "/g/e1", watch=True)
    zk.get(other, "/g/e2", watch=True)
    zk.get(owner, "/other", watch=True)  # dropped when owner dies
    zk.set(other, "/other", b"before")  # queued for owner before it died
    zk.get(owner, "/other", watch=True)
    zk.get_children(owner, "/g", watch=True)
    zk.touch(other, 3.0)
    before = zk.zxid
    assert zk.expire_due(3.0) == [owner]
    assert zk.zxid == before + 1
    assert zk.node_paths() == ["/", "/g", "/g/persistent", "/other"]
    assert zk.stat_of("/g").pzxid == before + 1
    assert zk.stat_of("/g").cversion == 5
    assert zk.ephemerals_of(owner) == []
    assert zk.take_events(other) == [
        WatchEvent(other, "deleted", "/g/e1"),
        WatchEvent(other, "child", "/g"),
        WatchEvent(other, "deleted", "/g/e2"),
    ]
    zk.set(other, "/other", b"after")
    assert zk.take_events(owner) == [WatchEvent(owner, "changed", "/other")]
    assert zk.take_events(owner) == []


def test_close_session_is_like_expiry() -> None:
    zk, s = fresh()
    w = zk.open_session(10.0, 0.0)
    zk.create(s, "/e", ephemeral=True)
    zk.exists(w, "/e", watch=True)
    zk.close_session(s)
    assert not zk.alive(s)
    assert zk.node_paths() == ["/"]
    assert zk.zxid == 2
    assert zk.take_events(w) == [WatchEvent(w, "deleted", "/e")]
    with pytest.raises(SessionExpired):
        zk.close_session(s)


# ---- watches ----


def test_watches_are_one_shot_and_kinds_are_distinct() -> None:
    zk, s = fresh()
    w = zk.open_session(10.0, 0.0)
    zk.create(s, "/n")
    zk.get(w, "/n", watch=True)
    zk.set(s, "/n", b"1")
    zk.set(s, "/n", b"2")
    assert zk.take_events(w) == [WatchEvent(w, "changed", "/n")]
    # A child watch does not fire on a set; a data watch does not fire on a child change.
    zk.get_children(w, "/n", watch=True)
    zk.set(s, "/n", b"3")
    assert zk.take_events(w) == []
    zk.exists(w, "/n", watch=True)
    zk.create(s, "/n/c")
    assert zk.take_events(w) == [WatchEvent(w, "child", "/n")]
    zk.set(s, "/n/c", b"")  # a child's data is not a child change
    zk.set(s, "/n", b"4")
    assert zk.take_events(w) == [WatchEvent(w, "changed", "/n")]


def test_deleted_node_fires_data_and_child_watches_once_per_session() -> None:
    zk, s = fresh()
    w = zk.open_session(10.0, 0.0)
    v = zk.open_session(10.0, 0.0)
    zk.create(s, "/n")
    zk.get(w, "/n", watch=True)
    zk.get_children(w, "/n", watch=True)
    zk.get_children(v, "/n", watch=True)
    zk.delete(s, "/n")
    assert zk.take_events(w) == [WatchEvent(w, "deleted", "/n")]
    assert zk.take_events(v) == [WatchEvent(v, "deleted", "/n")]
    zk.create(s, "/n")
    assert zk.take_events(w) == [] and zk.take_events(v) == []


def test_exists_watch_on_missing_node_fires_created_and_writer_sees_own_events() -> None:
    zk, s = fresh()
    zk.exists(s, "/n", watch=True)
    zk.get_children(s, "/", watch=True)
    zk.exists(s, "/n", watch=True)  # registering twice still fires once
    zk.create(s, "/n")
    assert zk.take_events(s) == [WatchEvent(s, "created", "/n"), WatchEvent(s, "child", "/")]
    with pytest.raises(NoNode):
        zk.get(s, "/m", watch=True)  # a failed get sets no watch
    zk.create(s, "/m")
    assert zk.take_events(s) == []


# ---- random sequences keep the invariants ----

PATHS = ["/a", "/a/b", "/a/c", "/b", "/b/x"]
path_st = st.sampled_from(PATHS)
version_st = st.sampled_from([-1, -1, 0, 1])
sub_op_st = st.one_of(
    st.builds(Create, path_st, st.sampled_from([b"", b"d"]), st.booleans(), st.booleans()),
    st.builds(Delete, path_st, version_st),
    st.builds(SetData, path_st, st.sampled_from([b"1", b"2"]), version_st),
    st.builds(Check, path_st, version_st),
)
session_st = st.integers(0, 2)
step_st = st.one_of(
    st.tuples(st.just("create"), session_st, path_st, st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("delete"), session_st, path_st, version_st),
    st.tuples(st.just("set"), session_st, path_st, version_st),
    st.tuples(st.just("multi"), session_st, st.lists(sub_op_st, max_size=4)),
    st.tuples(st.just("watch"), session_st, path_st),
    st.tuples(st.just("expire"), session_st),
    st.tuples(st.just("time"), st.sampled_from([0.5, 3.0, 12.0])),
)


def check_invariants(zk: ZkModel, sessions: list[int]) -> None:
    paths = set(zk.node_paths())
    for p in paths - {"/"}:
        parent = p.rsplit("/", 1)[0] or "/"
        assert parent in paths
        stat = zk.stat_of(p)
        assert stat.czxid <= stat.mzxid <= zk.zxid and stat.czxid <= stat.pzxid <= zk.zxid
        if stat.ephemeral_owner:
            assert zk.alive(stat.ephemeral_owner)
            assert p in zk.ephemerals_of(stat.ephemeral_owner)
            assert stat.num_children == 0
    for p in paths:
        kids = sum(1 for q in paths if q != p and (q.rsplit("/", 1)[0] or "/") == p)
        assert zk.stat_of(p).num_children == kids
    for sid in sessions:
        assert all(p in paths for p in zk.ephemerals_of(sid))


@settings(max_examples=150, deadline=None)
@given(st.lists(step_st, max_size=40))
def test_random_sequences_keep_invariants(steps: list[tuple[Any, ...]]) -> None:
    zk = ZkModel()
    now = 0.0
    slots = [zk.open_session(6.0, now) for _ in range(3)]
    every = list(slots)
    for step in steps:
        kind = step[0]
        if kind == "time":
            now += step[1]
            for sid in slots:
                if zk.alive(sid) and sid % 2:  # some sessions heartbeat, others lapse
                    zk.touch(sid, now)
            zk.expire_due(now)
            continue
        if kind == "expire":
            zk.expire(slots[step[1]])
            slots[step[1]] = zk.open_session(6.0, now)
            every.append(slots[step[1]])
            continue
        sid = slots[step[1]]
        if not zk.alive(sid):
            slots[step[1]] = sid = zk.open_session(6.0, now)
            every.append(sid)
        before = snapshot(zk)
        try:
            if kind == "create":
                zk.create(sid, step[2], b"c", step[3], step[4], step[5])
            elif kind == "delete":
                zk.delete(sid, step[2], step[3])
            elif kind == "set":
                zk.set(sid, step[2], b"s", step[3])
            elif kind == "watch":
                zk.exists(sid, step[2], watch=True)
                assert snapshot(zk) == before
                continue
            else:
                ops: list[Op] = step[2]
                results = zk.multi(sid, ops)
                assert len(results) == len(ops)
                errors = [r for r in results if isinstance(r, ZkError)]
                if errors:
                    assert len(errors) == len(ops)
                    assert sum(not isinstance(r, RolledBack) for r in errors) == 1
                    raise errors[
                        next(i for i, r in enumerate(errors) if not isinstance(r, RolledBack))
                    ]
                if all(isinstance(o, Check) for o in ops):
                    assert snapshot(zk) == before
                    continue
        except ZkError:
            assert snapshot(zk) == before  # a failed write changes nothing, zxid included
        else:
            assert zk.zxid == before[0] + 1
        for s in every:
            for ev in zk.take_events(s):
                assert ev.session == s
        check_invariants(zk, every)
