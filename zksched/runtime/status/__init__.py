"""What a daemon tells the outside: health, readiness, metrics and the status page
(`DaemonStatus`, reading a `StatusSource`), served over HTTP (`HttpEndpoint`, the public
port in a child process). Other packages use the names below, nothing else of it."""

from zksched.runtime.status.address import DEFAULT_HTTP, HttpUnavailable, parse_http_address
from zksched.runtime.status.daemon_status import DaemonStatus
from zksched.runtime.status.http import HttpEndpoint
from zksched.runtime.status.source import CatchupObserver, FireObserver, SkipObserver, StatusSource

__all__ = [
    "DEFAULT_HTTP",
    "CatchupObserver",
    "DaemonStatus",
    "FireObserver",
    "HttpEndpoint",
    "HttpUnavailable",
    "SkipObserver",
    "StatusSource",
    "parse_http_address",
]
