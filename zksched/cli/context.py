"""What every command shares: resolved global options and a way to reach ZooKeeper."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from zksched.cli.errors import EXIT_INVALID, EXIT_UNREACHABLE, CliFailure, invalid
from zksched.core.names import name_problem
from zksched.runtime.logs import setup_logging
from zksched.zk.aclcheck import open_nodes, refusal
from zksched.zk.connection import ZkSettings, ZkUnreachable, close_quietly, connect
from zksched.zk.paths import ClusterPaths


@dataclass(frozen=True)
class CliContext:
    zk: ZkSettings
    client_id: str
    connect_timeout: float
    log_level: str
    log_format: str

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> CliContext:
        settings = ZkSettings(
            hosts=options["zk"],
            auth=options["auth"],
            tls=options["tls"],
            tls_ca=options["tls_ca"],
            tls_cert=options["tls_cert"],
            tls_key=options["tls_key"],
            tls_check_hostname=options["tls_check_hostname"],
        )
        try:
            settings.validate()
        except ValueError as exc:
            raise invalid(str(exc)) from None
        problem = name_problem(options["client_id"], "client id")
        if problem:
            raise invalid(problem)
        ctx = cls(
            zk=settings,
            client_id=options["client_id"],
            connect_timeout=options["connect_timeout"],
            log_level=options["log_level"],
            log_format=options["log_format"],
        )
        setup_logging(ctx.log_level if ctx.log_level != "info" else "warning", ctx.log_format)
        return ctx

    @property
    def paths(self) -> ClusterPaths:
        return ClusterPaths(self.client_id)

    def with_session_timeout(self, seconds: float) -> ZkSettings:
        settings = replace(self.zk, session_timeout=seconds)
        try:
            settings.validate()
        except ValueError as exc:
            raise invalid(f"--session-timeout: {exc}") from None
        return settings

    @contextlib.contextmanager
    def client(self) -> Iterator[KazooClient]:
        """A connected client for one command; exit 3 with one line if ZooKeeper is unreachable."""
        try:
            client = connect(self.zk, self.connect_timeout)
        except ZkUnreachable as exc:
            raise CliFailure(str(exc), EXIT_UNREACHABLE) from None
        try:
            yield client
        finally:
            close_quietly(client)


def check_acls(ctx: CliContext, client: KazooClient) -> None:
    """With --auth: exit 2, naming them, when nodes zksched depends on are open to others."""
    credential = ctx.zk.credential
    if credential is None:
        return
    try:
        problems = open_nodes(client, ctx.paths, credential, ctx.connect_timeout)
    except (KazooException, KazooTimeoutError) as exc:
        raise CliFailure(f"reading the cluster's ACLs failed: {type(exc).__name__}") from None
    if problems:
        raise CliFailure(refusal(problems, credential[0]), EXIT_INVALID)
