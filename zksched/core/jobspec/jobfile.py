"""Job files: reading and parsing the TOML file ([defaults] and [jobs.NAME] tables).

Parsing collects every problem (job, field, line where known) instead of stopping at the
first; a job inherits each [defaults] key it does not set itself.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path

from zksched.core.jobspec.fields import JOB_KEYS, _check_job_table, _missing
from zksched.core.jobspec.problems import JobSpecError, SpecProblem, _LineOf
from zksched.core.jobspec.spec import JobSpec, _build
from zksched.core.names import name_problem
from zksched.core.schedule import AtError, at_schedule
from zksched.core.tomltext import TOML_ERROR_AT, TomlLines, toml_kind

MAX_FILE_BYTES = 16 * 1024 * 1024


_NO_KIND = (
    "job files hold commands; function jobs are registered by the apps that run them "
    "(zksched.Cluster.cron), not written in job files"
)


def _decode(data: str | bytes, source: str) -> str:
    if isinstance(data, bytes | bytearray):
        if len(data) > MAX_FILE_BYTES:
            raise JobSpecError(
                [
                    SpecProblem(
                        None,
                        None,
                        f"the file is {len(data)} bytes; the limit is {MAX_FILE_BYTES} a "
                        "file (split the jobs across several files and name them all)",
                        source=source,
                    )
                ]
            )
        try:
            return bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JobSpecError(
                [
                    SpecProblem(
                        None,
                        None,
                        f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                        source=source,
                    )
                ]
            ) from None
    if not isinstance(data, str):
        raise JobSpecError([SpecProblem(None, None, "a job file must be text", source=source)])
    if len(data) > MAX_FILE_BYTES // 4 and len(data.encode("utf-8", "surrogatepass")) > (
        MAX_FILE_BYTES
    ):
        raise JobSpecError(
            [
                SpecProblem(
                    None,
                    None,
                    f"the file is larger than the limit of {MAX_FILE_BYTES} bytes",
                    source=source,
                )
            ]
        )
    return data.removeprefix("\ufeff")


def parse_job_file(text: str | bytes, source: str = "<jobs>") -> dict[str, JobSpec]:
    """Every job of a TOML job file, in file order; JobSpecError listing all problems."""
    content = _decode(text, source)
    try:
        document = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = TOML_ERROR_AT.search(message)
        line: int | None = None
        if at:
            line = int(at.group(1))
            message = f"{message[: at.start()]} (column {at.group(2)})"
        elif message.endswith(" (at end of document)"):
            line = max(1, len(content.splitlines()))
            message = message.removesuffix(" (at end of document)") + " at the end of the file"
        raise JobSpecError(
            [SpecProblem(None, None, f"invalid TOML: {message}", line, source)]
        ) from None
    except RecursionError:
        raise JobSpecError(
            [SpecProblem(None, None, "invalid TOML: nested too deeply", source=source)]
        ) from None
    except ValueError as exc:  # e.g. an integer with thousands of digits
        raise JobSpecError(
            [SpecProblem(None, None, f"invalid TOML: {str(exc)[:120]}", source=source)]
        ) from None
    line_of = TomlLines(content)
    problems: list[SpecProblem] = []
    jobs: dict[str, JobSpec] = {}

    for key in document:
        if key not in ("defaults", "jobs"):
            problems.append(
                SpecProblem(
                    None,
                    key,
                    "unknown top-level key: a job file has a [defaults] table and "
                    "[jobs.NAME] tables",
                    line_of(key),
                )
            )

    defaults_raw = document.get("defaults", {})
    defaults: dict[str, object] = {}
    broken_defaults: set[str] = set()
    if not isinstance(defaults_raw, dict):
        problems.append(
            SpecProblem(
                None,
                "defaults",
                f"must be a table, not {toml_kind(defaults_raw)}",
                line_of("defaults"),
            )
        )
    else:
        for key, value in defaults_raw.items():
            if key == "kind":
                problems.append(
                    SpecProblem(None, "defaults.kind", _NO_KIND, line_of("defaults", "kind"))
                )
                continue
            checked = _check_job_table(
                {key: value}, None, problems, line_of, ("defaults",), "defaults."
            )
            if checked is None:
                broken_defaults.add(key)
            else:
                defaults.update(checked)

    table = document.get("jobs", {})
    if not isinstance(table, dict):
        hint = " (write [jobs.NAME] tables, not [[jobs]])" if isinstance(table, list) else ""
        problems.append(
            SpecProblem(
                None,
                "jobs",
                f"must be a table of jobs, not {toml_kind(table)}{hint}",
                line_of("jobs"),
            )
        )
        table = {}
    for name, body in table.items():
        where = ("jobs", name)
        name_issue = name_problem(name, "job name")
        if name_issue is not None:
            problems.append(SpecProblem(name, None, name_issue, line_of(*where)))
        if not isinstance(body, dict):
            problems.append(
                SpecProblem(
                    name, None, f"a job must be a table, not {toml_kind(body)}", line_of(*where)
                )
            )
            continue
        body, at_ok = _one_off(body, name, problems, line_of, where)
        if "kind" in body:
            body = {k: v for k, v in body.items() if k != "kind"}
            problems.append(SpecProblem(name, "kind", _NO_KIND, line_of(*where, "kind")))
        own = _check_job_table(body, name, problems, line_of, where)
        present = [*body, *defaults, *broken_defaults, *([] if at_ok is None else ["schedule"])]
        missing = _missing(dict.fromkeys(present), name, line_of(*where))
        problems.extend(missing)
        if own is None or name_issue is not None or missing or at_ok is False:
            continue
        inherited = {k: v for k, v in defaults.items() if k not in own}
        if any(k in broken_defaults and k not in own for k in JOB_KEYS):
            continue  # the broken default is reported once, under [defaults]
        try:
            jobs[name] = _build(name, {**inherited, **own}, name, [], line_of, where)
        except JobSpecError as exc:
            problems.extend(exc.problems)
    if problems:
        for problem in problems:
            problem.source = source
        raise JobSpecError(problems)
    return jobs


def _one_off(
    body: dict[object, object],
    name: str,
    problems: list[SpecProblem],
    line_of: _LineOf,
    where: tuple[str, ...],
) -> tuple[dict[object, object], bool | None]:
    """A one-off job's `at` (ISO 8601 text with an offset, or a TOML date-time) becomes its
    schedule, `@at <UTC instant>`. Returns the job's table and whether its `at` was good
    (None: it has none)."""
    if "at" not in body:
        return body, None
    rest = {k: v for k, v in body.items() if k != "at"}
    if "schedule" in body:
        problems.append(
            SpecProblem(
                name,
                "at",
                "a job has a schedule or an at (run once), not both",
                line_of(*where, "at"),
            )
        )
        return rest, False
    try:
        rest["schedule"] = at_schedule(body["at"])
    except AtError as exc:
        problems.append(SpecProblem(name, "at", str(exc), line_of(*where, "at")))
        return rest, False
    return rest, True


def load_job_file(path: str | Path) -> dict[str, JobSpec]:
    """Read and parse a job file; JobSpecError (never OSError) if it cannot be read."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise JobSpecError(
            [SpecProblem(None, None, f"cannot read the file: {reason}", source=source)]
        ) from None
    except ValueError as exc:  # e.g. a path with a NUL in it
        raise JobSpecError(
            [SpecProblem(None, None, f"cannot read the file: {exc}", source=source)]
        ) from None
    return parse_job_file(data, source)


def load_job_files(paths: Sequence[str | Path]) -> dict[str, JobSpec]:
    """The jobs of several files as one table (each file within MAX_FILE_BYTES: a large
    table is kept as several files). JobSpecError lists every file's problems, and each job
    that two files define: a job belongs to one file, so that no file silently wins."""
    jobs: dict[str, JobSpec] = {}
    defined_in: dict[str, str] = {}
    problems: list[SpecProblem] = []
    for path in paths:
        source = str(path)
        try:
            loaded = load_job_file(path)
        except JobSpecError as exc:
            problems.extend(exc.problems)
            continue
        for name, spec in loaded.items():
            first = defined_in.setdefault(name, source)
            if first != source:
                problems.append(
                    SpecProblem(
                        name,
                        None,
                        f"{first} defines it too; a job belongs to one file",
                        source=source,
                    )
                )
            jobs.setdefault(name, spec)
    if problems:
        raise JobSpecError(problems)
    return jobs
