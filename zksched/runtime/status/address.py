"""Where the daemon's HTTP endpoint listens: the `--http` address and its errors (apart from
the endpoint, so the CLI can check an address without loading the server)."""

from __future__ import annotations

DEFAULT_HTTP = "127.0.0.1:9464"  # loopback only unless asked; a port in the exporters' 9xxx range


class HttpUnavailable(RuntimeError):
    """The endpoint cannot listen where it was asked to (in use, no permission, bad host)."""


def parse_http_address(text: str, what: str | None = None) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` (every interface) -> (host, port); ValueError
    naming `what` (default: `--http 'text'`)."""
    said = what or f"--http {text!r}"
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"{said}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{said}: port {port} is out of range (0 to 65535)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", port
