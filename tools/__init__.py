"""Developer and test tooling (a local ZooKeeper launcher, a fault-injecting proxy).

Never imported by the daemon or the CLI; used by scripts/ and the test suites.
"""
