"""Who else may change a node (zk/aclcheck.py): anyone but zksched's own digest with more
than read."""

from __future__ import annotations

from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from zksched.zk.aclcheck import strangers

CREDENTIAL = ("zksched", "s3cret")


def test_zksched_s_own_acl_lets_nobody_else_change_the_node() -> None:
    acl = [make_digest_acl(*CREDENTIAL, all=True), make_acl("world", "anyone", read=True)]
    assert strangers(acl, CREDENTIAL) == []


def test_open_nodes_and_other_credentials_are_named_with_what_they_may_do() -> None:
    assert strangers(list(OPEN_ACL_UNSAFE), CREDENTIAL) == ["world:anyone (cdrwa)"]
    other = make_digest_acl("intruder", "pw", create=True, read=True)
    assert strangers([other], CREDENTIAL) == [f"digest:{other.id.id} (cr)"]
    assert strangers([make_digest_acl("zksched", "other-password", all=True)], CREDENTIAL)
