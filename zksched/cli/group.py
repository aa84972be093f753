"""The `zksched` command group and its global options (commands add themselves to `cli`).

Precedence: flags beat environment variables beat the --config file (click's own order for
command line > envvar > default_map), which beats built-in defaults.
"""

from __future__ import annotations

from typing import Any

import click

from zksched._version import __version__
from zksched.cli.config_file import config_failure, default_config_path, load_config_file
from zksched.cli.errors import CliFailure
from zksched.core.config import ConfigError

DEFAULT_ZK = "127.0.0.1:2181"
DEFAULT_CLIENT_ID = "default"


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Eager: turn the checked config file into click's default_map before any other option
    is read. Without --config or ZKSCHED_CONFIG, /etc/zksched/zksched.toml is used if present.

    A bad file fails every command (exit 2) except `config …`, so that `zksched config check`
    can still say what is wrong with it: the failure waits in ctx.meta until `cli` runs.
    """
    if value is None:
        value = default_config_path()
        if value is None:
            return None
    try:
        config = load_config_file(value)
    except ConfigError as exc:
        ctx.meta[_CONFIG_FAILURE] = config_failure(exc, value)
        return value
    ctx.default_map = config.default_map()
    return value


_CONFIG_FAILURE = "zksched.config_failure"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="zksched")
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    callback=_load_config,
    is_eager=True,
    expose_value=False,
    envvar="ZKSCHED_CONFIG",
    help="Daemon config file (TOML) with defaults for these options and run's; flags beat "
    "env beat the file. Default: /etc/zksched/zksched.toml when present.",
)
@click.option(
    "--zk",
    envvar="ZKSCHED_ZK",
    default=DEFAULT_ZK,
    show_default=True,
    help="ZooKeeper connect string, optional chroot at the end: h1:2181,h2:2181/chroot.",
)
@click.option(
    "--client-id",
    envvar="ZKSCHED_CLIENT_ID",
    default=DEFAULT_CLIENT_ID,
    show_default=True,
    help="Cluster id: daemons with the same id form one cluster.",
)
@click.option(
    "--auth",
    envvar="ZKSCHED_AUTH",
    default=None,
    help="Digest credential USER:PASSWORD; znodes zksched creates are then writable by it only.",
)
@click.option("--tls/--no-tls", envvar="ZKSCHED_TLS", default=False, help="Use TLS to ZooKeeper.")
@click.option("--tls-ca", envvar="ZKSCHED_TLS_CA", type=click.Path(dir_okay=False), default=None)
@click.option(
    "--tls-cert", envvar="ZKSCHED_TLS_CERT", type=click.Path(dir_okay=False), default=None
)
@click.option("--tls-key", envvar="ZKSCHED_TLS_KEY", type=click.Path(dir_okay=False), default=None)
@click.option(
    "--tls-check-hostname/--tls-no-check-hostname",
    envvar="ZKSCHED_TLS_CHECK_HOSTNAME",
    default=True,
    show_default=True,
)
@click.option(
    "--connect-timeout",
    envvar="ZKSCHED_CONNECT_TIMEOUT",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds a client command waits for ZooKeeper before giving up (exit 3).",
)
@click.option(
    "--log-level",
    envvar="ZKSCHED_LOG_LEVEL",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
@click.option(
    "--log-format",
    envvar="ZKSCHED_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
@click.pass_context
def cli(ctx: click.Context, /, **options: Any) -> None:
    """zksched: cron jobs run once per instant across a cluster of hosts (at most once by
    default; at least once where a job asks for it)."""
    from zksched.cli.context import CliContext

    failure = ctx.meta.get(_CONFIG_FAILURE)
    if isinstance(failure, CliFailure) and ctx.invoked_subcommand != "config":
        raise failure
    ctx.obj = CliContext.from_options(options)
