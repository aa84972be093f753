"""The package version, in one place (read by the build, the CLI and the status page)."""

__version__ = "0.1.0"
