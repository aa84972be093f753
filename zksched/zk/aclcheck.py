"""With `--auth`: the nodes zksched depends on must be changeable by its credential alone.

zksched creates every node with its digest ACL (its credential may do everything, the world
may read). A node that existed before, made by an unauthenticated client or by a cluster
without auth on the same ensemble, keeps the ACL it was made with: whoever made it could
then write the job table and have an authenticated daemon run their command. Such a node
is refused, by name, before a daemon joins and before `jobs apply` writes.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, Permissions, make_digest_acl_credential

from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

CHANGES = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN
_LETTERS = (
    (Permissions.CREATE, "c"),
    (Permissions.DELETE, "d"),
    (Permissions.READ, "r"),
    (Permissions.WRITE, "w"),
    (Permissions.ADMIN, "a"),
)


def guarded_nodes(paths: ClusterPaths) -> list[str]:
    """The folders every other node of the cluster is made under."""
    return [
        paths.base,
        paths.members,
        paths.jobs,
        paths.blobs,
        paths.fires,
        paths.live,
        paths.locks,
        paths.triggers,
        paths.clocks,
        paths.leader,  # a stranger's candidate there would lead the apps' cluster
        paths.applocks,
    ]


def _letters(perms: int) -> str:
    return "".join(letter for bit, letter in _LETTERS if perms & bit)


def strangers(acl: list[ACL], credential: tuple[str, str]) -> list[str]:
    """Who else may change a node with this ACL (`scheme:id (perms)`); [] if nobody."""
    ours = make_digest_acl_credential(*credential)
    return [
        f"{entry.id.scheme}:{entry.id.id} ({_letters(entry.perms)})"
        for entry in acl
        if entry.perms & CHANGES and not (entry.id.scheme == "digest" and entry.id.id == ours)
    ]


def open_nodes(
    client: KazooClient, paths: ClusterPaths, credential: tuple[str, str], timeout: float
) -> list[str]:
    """One line per existing guarded node that someone other than `credential` may change."""
    pending = [(p, client.get_acls_async(p)) for p in guarded_nodes(paths)]
    problems = []
    for path, result in pending:
        try:
            acl, _stat = wait(result, timeout)
        except NoNodeError:
            continue  # made later, by zksched, with its own ACL
        others = strangers(acl, credential)
        if others:
            problems.append(f"{path} may be changed by {', '.join(others)}")
    return problems


def refusal(problems: list[str], user: str) -> str:
    """The message for an operator: what is open, and how to fix it."""
    return (
        "refusing to use nodes that others may change (they were not made with --auth): "
        + "; ".join(problems)
        + f". Delete them with an admin credential, or give each the ACL "
        f"digest:{user}:<digest>:cdrwa,world:anyone:r (<digest>: base64 of the SHA-1 of "
        f"{user}:PASSWORD), then try again"
    )
