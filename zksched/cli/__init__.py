"""The command line: click commands on top of the runtime and the ZooKeeper layer."""
