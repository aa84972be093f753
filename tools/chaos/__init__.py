"""`scripts/chaos`: break a zksched cluster on purpose and check what the SPEC promises.

Each scenario starts its own cluster (a local ZooKeeper or a 3-server ensemble, N `zksched run`
subprocesses logging JSON, and a job file of fast jobs whose commands record their fire keys),
injects its faults for the given duration with a seeded random generator, lets catch-up settle,
and judges the evidence the commands themselves wrote:

- duplicates: a fire key recorded more than once (anywhere in the run);
- gaps: an expected instant of the measured span (a moment after start to the end of the
  faults) that never ran; an instant whose claim exists but whose command never started (a
  member killed between claim and start: at-most-once by design) is `abandoned`, not a gap;
- failover: from the signal (or a partition's start) to the first fire, on another member, of
  a job the victim had been firing.

Then `zksched audit --since ... --json` gives its own verdict when that command exists.

The suite's modules: `cluster` (ZooKeeper, the members, and the means to kill, stop or cut
one off), `evidence` (the recording jobs and what their fire log says), `scenarios` (the
faults, one function each, and their registry `SCENARIOS`), `runner` (one scenario from start
to verdict), `verdict` (what a run's evidence is judged to be), `report` (the table and the
JSON file), `cli` (`scripts/chaos`, which runs `python3 -m tools.chaos`).
"""
