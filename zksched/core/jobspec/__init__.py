"""Job specs: the TOML job file, validation, and the canonical record stored in ZooKeeper.

A JobSpec is immutable and always valid: its constructor checks every field, so a spec built
from a file, from a stored record or directly in code obeys the same rules. Parsing a file
collects every problem (job, field, line where known) instead of stopping at the first.

The canonical record (`JobSpec.to_record`) holds every key, durations as canonical text
("1h", "90s", "500ms"), and `"format": 1`; `canonical_json` is its sorted, compact UTF-8 JSON
and `content_hash` the start of its SHA-256, so equal specs hash equally on every host.

The parts: `spec` (JobSpec and its record), `fields` (the keys, their limits, one check per
key), `jobfile` (reading and parsing a job file), `problems` (SpecProblem, JobSpecError),
`frozenmap` (the read-only map of labels and env), `twins` (a table's records that differ
only in name and schedule, checked once). Import from here.
"""

from zksched.core.jobspec.fields import (
    CATCHUP_POLICIES,
    JOB_KEYS,
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_CATCHUP_WINDOW_MS,
    MAX_ENV,
    MAX_HISTORY,
    MAX_JITTER_MS,
    MAX_LABELS,
    MAX_RETRIES,
    MAX_WORKDIR_CHARS,
    MIN_HISTORY,
    OVERLAP_POLICIES,
    REQUIRED_KEYS,
    Catchup,
    Delivery,
    Overlap,
)
from zksched.core.jobspec.frozenmap import FrozenMap
from zksched.core.jobspec.jobfile import (
    MAX_FILE_BYTES,
    load_job_file,
    load_job_files,
    parse_job_file,
)
from zksched.core.jobspec.problems import JobSpecError, SpecProblem
from zksched.core.jobspec.spec import (
    FORMAT,
    MAX_RECORD_BYTES,
    RECORD_KEYS,
    JobSpec,
    canonical_json,
)

__all__ = [
    "CATCHUP_POLICIES",
    "FORMAT",
    "JOB_KEYS",
    "MAX_ARGS",
    "MAX_ARG_CHARS",
    "MAX_CATCHUP_WINDOW_MS",
    "MAX_ENV",
    "MAX_FILE_BYTES",
    "MAX_HISTORY",
    "MAX_JITTER_MS",
    "MAX_LABELS",
    "MAX_RECORD_BYTES",
    "MAX_RETRIES",
    "MAX_WORKDIR_CHARS",
    "MIN_HISTORY",
    "OVERLAP_POLICIES",
    "RECORD_KEYS",
    "REQUIRED_KEYS",
    "Catchup",
    "Delivery",
    "FrozenMap",
    "JobSpec",
    "JobSpecError",
    "Overlap",
    "SpecProblem",
    "canonical_json",
    "load_job_file",
    "load_job_files",
    "parse_job_file",
]
