"""How long a test waits for a state before calling it a hang.

A wait of 10 s or more in these tests bounds a hang, not a speed (speed is the benchmarks'
business, docs/benchmarks.md): it waits up to three times as long, since a loaded CI host
(another cluster's fires beside the suite) runs everything two to three times slower, and a
green wait returns as soon as its state holds. Shorter waits are left as written: some of
them are the behaviour under test (e.g. nothing happens within half a second).
"""

from __future__ import annotations

FACTOR = 3.0
FROM = 10.0


def hang_guard(timeout: float) -> float:
    return timeout * FACTOR if timeout >= FROM else timeout
