"""When the history pruner lists and prunes a job's fire folder (zksched/runtime/fire/pruning.py):
never at a burst's first results, once a job has more records than it keeps."""

from __future__ import annotations

from zksched.core.jobspec import JobSpec
from zksched.runtime.fire.pruning import PRUNE_SLACK, HistoryPruner


class FakeClaims:
    """The few FireClaims calls the pruner makes, over a dict of record instants."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self.listed: list[str] = []
        self.pruned: list[tuple[str, list[str]]] = []

    def instants(self, job: str) -> list[str]:
        self.listed.append(job)
        return list(self.records.get(job, []))

    def prune(self, job: str, victims: list[str]) -> bool:
        self.pruned.append((job, victims))
        self.records[job] = [i for i in self.records.get(job, []) if i not in victims]
        return True


class FixedClock:
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def spec(history: int = 2) -> JobSpec:
    return JobSpec(name="job", schedule="* * * * * *", command=("true",), history=history)


def instant(i: int) -> str:
    return f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"


def pruner(records: dict[str, list[str]]) -> tuple[HistoryPruner, FakeClaims]:
    claims = FakeClaims(records)
    clock = FixedClock(2_000_000_000.0)  # every record is old
    return HistoryPruner(claims, clock), claims  # type: ignore[arg-type]


def test_a_job_not_listed_yet_is_not_listed_at_its_first_results() -> None:
    history, claims = pruner({"job": [instant(i) for i in range(40)]})
    keep = spec().history + PRUNE_SLACK
    for i in range(keep):
        history.note("job", instant(100 + i))
        assert not history.may_prune(spec()), f"listed after {i + 1} results"
    history.note("job", instant(200))
    assert history.may_prune(spec())
    history.prune(spec())
    assert claims.listed == ["job"]
    assert len(claims.records["job"]) == spec().history


def test_a_folder_made_here_is_known_empty_and_pruned_from_its_own_records() -> None:
    history, claims = pruner({})
    history.made_empty(["job"])
    for i in range(spec().history + PRUNE_SLACK):
        history.note("job", instant(i))
        assert not history.may_prune(spec())
    history.note("job", instant(99))
    assert history.may_prune(spec())
    claims.records["job"] = [instant(i) for i in range(spec().history + PRUNE_SLACK)]
    claims.records["job"].append(instant(99))
    history.prune(spec())
    assert claims.listed == []  # known: never listed
    assert claims.pruned and claims.pruned[0][0] == "job"


def test_made_empty_never_forgets_records_known_already() -> None:
    history, _ = pruner({})
    history.remember("job", [instant(i) for i in range(20)])
    history.made_empty(["job"])
    assert history.may_prune(spec())


def test_a_listed_job_is_pruned_once_over_what_it_keeps() -> None:
    history, _ = pruner({})
    history.remember("job", [instant(i) for i in range(spec().history + PRUNE_SLACK)])
    assert not history.may_prune(spec())
    history.note("job", instant(90))
    assert history.may_prune(spec())
    history.forget("job")
    assert not history.may_prune(spec())  # forgotten: listed again only after new results


def test_records_from_the_future_take_no_kept_record_s_place() -> None:
    """Names after now sort after every real record: counted as history, they made the
    pruner delete the job's real newest records."""
    real = [instant(i) for i in range(40)]
    future = ["2099-01-01T00:00:00Z", "8999-01-01T00:00:00Z"]
    history, claims = pruner({"job": real + future})
    history.note("job", instant(41))
    history.prune(spec())
    assert claims.pruned, "nothing pruned"
    kept = [i for i in claims.records["job"] if i in real]
    assert kept == real[-spec().history :]  # the real newest are kept
    assert all(f in claims.records["job"] for f in future)  # not pruned either: not history
