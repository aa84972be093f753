"""zksched: a cron scheduler cluster coordinated through ZooKeeper."""

__version__ = "0.1.0"
