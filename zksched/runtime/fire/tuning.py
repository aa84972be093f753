"""The fire shell's tunables, in one place: how it batches, paces and spreads over threads
what the fire core asks for. None of them changes what a fire decides (zksched/core/fire);
each is a trade of latency against ZooKeeper requests or threads, measured in
docs/benchmarks.md.
"""

from __future__ import annotations

# engine.py: the core's thread
STEPS_PER_TURN = 1000  # queued events handled before claims and lease takes go out together
CHORES_INTERVAL = 2.0  # seconds between retries of unwritten results and leftover lock nodes
# jobs aligned per turn after a change of table or view: a member taking over a million
# jobs takes a newer view (others joining) within a slice, not after all of them
ALIGN_SLICE = 2000
WEIGH_SLICE = 5000  # jobs weighed per turn before joining (300 members: about 0.5 s a slice)
DERIVE_SLICE = 20_000  # owner-table entries per turn of a membership change (~30 ms)

# run_actions.py: starting commands
STARTERS = 4  # threads that start commands (a start waits for the kernel, not the GIL)
STARTS_SETTLE = 0.05  # seconds after the last start that `starting()` still says so
PROGRAM_LOOKUP_TTL = 1.0  # seconds an argv[0] found in PATH is reused for the next starts

# zk_actions.py: claims, reads and skip records
CLAIM_BATCH = 200  # claims in one transaction at most (~100 KB, far below 1 MB)
IO_THREADS = 8  # threads for claims, reads and skip records
SKIP_RECORD_TRIES = 5

# leases.py: per-job locks
LOCK_THREADS = 16  # lease takes wait for other holders: their own threads
RELEASE_BATCH = 200  # lock nodes deleted in one transaction at most

# results.py: result records
RESULT_BATCH = 200  # results per transaction at most (a record is ~400 bytes)
MAX_HOLD = 3.0  # seconds a result waits at most while commands are being started
HOLD_STEP = 0.01  # seconds between two looks at whether starts are still under way
