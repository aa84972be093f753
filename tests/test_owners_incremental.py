"""A table derived from the last one (`OwnerTable.with_members`) is the table built from
scratch, byte for byte, after any joins, leaves and changed member records; and its `moved`
names exactly the jobs whose owner changed (derived for one member, `focus`: at least those
it gained or lost, and no job that stayed where it was). Derived a slice at a time
(`TableDerivation`), with the old table in use meanwhile, it is the same table."""

from __future__ import annotations

from dataclasses import dataclass, replace
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.jobspec import JobSpec
from zksched.core.members import Member, sequence_of
from zksched.core.owners import OwnerTable, TableDerivation

IDS = [f"host{i}-{100 + i}" for i in range(12)]
LABELS = [{}, {"role": "db"}, {"role": "web"}, {"zone": "a"}, {"role": "db", "zone": "a"}]
PROGRAMS = ["/usr/bin/true", "/opt/backup/run", "relative/x", "/usr/bin/../../tmp/x"]
ALLOW_LISTS = [None, None, ("/usr/bin/*",), ("/opt/*", "/usr/bin/true")]
FUNCTIONS = ["fa", "fb", "fc"]
HASHES = ["0123456789abcdef", "fedcba9876543210"]


@dataclass(frozen=True)
class Lookup:
    """One question a member asks of the table (as `job_owner`, `owner` or `is_owner` do)."""

    job: str
    labels: tuple[tuple[str, str], ...]
    program: str | None
    env: tuple[str, ...]
    function: tuple[str, str] | None
    apps_only: bool

    def ask(self, table: OwnerTable) -> str | None:
        return table.owner(
            self.job, dict(self.labels), self.program, self.env, self.function, self.apps_only
        )


members = st.builds(
    lambda i, labels, allow, functions, seq: Member(
        IDS[i],
        labels=LABELS[labels],
        znode=f"{IDS[i]}.{seq:010d}",
        allowed_commands=ALLOW_LISTS[allow] if functions is None else None,
        functions=functions,
    ),
    st.integers(0, len(IDS) - 1),
    st.integers(0, len(LABELS) - 1),
    st.integers(0, len(ALLOW_LISTS) - 1),
    st.none() | st.dictionaries(st.sampled_from(FUNCTIONS), st.sampled_from(HASHES), max_size=3),
    st.integers(0, 50),
)


def lookup(i: int, labels: int, kind: int, program: int, env: bool, fn: int, h: int) -> Lookup:
    job = f"job-{i}"
    if kind == 0:  # by labels alone
        return Lookup(job, tuple(LABELS[labels].items()), None, (), None, False)
    if kind == 1:  # a command job
        return Lookup(
            job,
            tuple(LABELS[labels].items()),
            PROGRAMS[program],
            ("LD_PRELOAD",) if env else (),
            None,
            False,
        )
    if kind == 2:  # a function job
        name = FUNCTIONS[fn]
        return Lookup(name, tuple(LABELS[labels].items()), None, (), (name, HASHES[h]), False)
    return Lookup(
        job, tuple(LABELS[labels].items()), None, (), None, True
    )  # is_owner of a name, apps only


lookups = st.builds(
    lookup,
    st.integers(0, 40),
    st.integers(0, len(LABELS) - 1),
    st.integers(0, 3),
    st.integers(0, len(PROGRAMS) - 1),
    st.booleans(),
    st.integers(0, len(FUNCTIONS) - 1),
    st.integers(0, len(HASHES) - 1),
)
# a change: members that join (or come back with another record), ids that leave, ids whose
# member comes back with the same record on a new node
changes = st.tuples(
    st.lists(members, max_size=3),
    st.sets(st.sampled_from(IDS), max_size=3),
    st.sets(st.sampled_from(IDS), max_size=3),
)
Change = tuple[list[Member], set[str], set[str]]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(members, max_size=8),
    st.lists(lookups, min_size=1, max_size=40),
    st.lists(changes, min_size=1, max_size=6),
)
def test_a_derived_table_is_the_table_built_from_scratch(
    start: list[Member], asked: list[Lookup], steps: list[Change]
) -> None:
    derive_and_compare(start, asked, steps)


class FewWeights:
    """A hash with three values: exact ties everywhere (the larger member id must win)."""

    @staticmethod
    def hash128(data: bytes, seed: int, x64arch: bool, signed: bool) -> int:
        return sum(data) % 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(members, max_size=8),
    st.lists(lookups, min_size=1, max_size=40),
    st.lists(changes, min_size=1, max_size=6),
)
def test_ties_go_the_same_way_in_a_derived_table(
    start: list[Member], asked: list[Lookup], steps: list[Change]
) -> None:
    with mock.patch("zksched.core.owners.mmh3", FewWeights):
        derive_and_compare(start, asked, steps)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(members, max_size=8),
    st.lists(lookups, min_size=1, max_size=30),
    st.lists(lookups, max_size=10),
    changes,
    st.integers(1, 6),
)
def test_a_table_derived_in_slices_is_the_one_derived_at_once(
    start: list[Member], asked: list[Lookup], meanwhile: list[Lookup], change: Change, size: int
) -> None:
    """Between slices, and until the derived table is taken, the old table is still asked
    (jobs it had not weighed among them): the derived table still answers every question
    as a fresh one, holds every entry the old one came to hold, and `moved` names the jobs
    whose owner changed, those too."""
    base = OwnerTable(start)
    before = {q: q.ask(base) for q in asked}
    joining, leaving, _renewed = change
    current = [m for m in start if m.member_id not in leaving] + joining
    work = TableDerivation(base, current, entries=size)
    derived = work.advance()
    while derived is None:
        if meanwhile:
            q = meanwhile.pop()
            before[q] = q.ask(base)
        derived = work.advance()
    for q in meanwhile:  # done, but not taken yet: the base is still asked
        before[q] = q.ask(base)
    derived = work.advance()
    fresh = OwnerTable(current)
    after = {q: q.ask(fresh) for q in before}
    assert {q: q.ask(derived) for q in before} == after
    if derived is not base and derived.moved is not None:
        assert derived.moved == {q.job for q in before if after[q] != before[q]}
        assert derived._memo.keys() >= base._memo.keys()


def derive_and_compare(start: list[Member], asked: list[Lookup], steps: list[Change]) -> None:
    current = list(start)
    table = OwnerTable(current)
    before = {q: q.ask(table) for q in asked}  # every member asks for every job it knows
    for joining, leaving, renewed in steps:
        current = [m for m in current if m.member_id not in leaving] + joining
        current = [
            replace(m, znode=f"{m.member_id}.{sequence_of(m.znode) + 100:010d}")
            if m.member_id in renewed
            else m
            for m in current
        ]
        derived = table.with_members(current)
        fresh = OwnerTable(current)
        after = {q: q.ask(fresh) for q in asked}
        assert {q: q.ask(derived) for q in asked} == after
        assert derived == fresh
        if derived is table:
            assert after == before
        elif derived.moved is not None:
            assert derived.derived_from == table.generation
            assert derived.moved == {q.job for q in asked if after[q] != before[q]}
            for member in {m.member_id for m in [*table.members, *current]}:
                # what one member reacts to: at least every job it gained or lost, and
                # only jobs that moved at all
                focused = table.with_members(current, focus=member)
                concerned = {
                    q.job
                    for q in asked
                    if after[q] != before[q] and member in (after[q], before[q])
                }
                assert concerned <= (focused.moved or frozenset()) <= derived.moved
                assert {q: q.ask(focused) for q in asked} == after
        table, before = derived, after


def test_a_join_moves_only_what_the_newcomer_wins() -> None:
    old = OwnerTable(Member(i, znode=f"{i}.{n:010d}") for n, i in enumerate(IDS[:10]))
    jobs = [f"job-{n}" for n in range(3_000)]
    owners = {job: old.owner(job) for job in jobs}
    newcomer = Member(IDS[10], znode=f"{IDS[10]}.0000000099")
    new = old.with_members([*old.members, newcomer])
    assert new.moved == {job for job in jobs if new.owner(job) != owners[job]}
    assert {new.owner(job) for job in new.moved} == {newcomer.member_id}
    assert 3_000 / 11 * 0.7 < len(new.moved) < 3_000 / 11 * 1.3  # about jobs / members
    # in the order the jobs were first weighed (a replay's), not a set's
    assert new.moved is not None
    assert new.moved.in_order == tuple(job for job in jobs if job in new.moved)


def test_a_leave_moves_only_the_leavers_jobs() -> None:
    old = OwnerTable(Member(i, znode=f"{i}.{n:010d}") for n, i in enumerate(IDS[:10]))
    jobs = [f"job-{n}" for n in range(3_000)]
    owners = {job: old.owner(job) for job in jobs}
    leaver = IDS[3]
    new = old.with_members([m for m in old.members if m.member_id != leaver])
    assert new.moved == {job for job, owner in owners.items() if owner == leaver}
    assert all(new.owner(job) != leaver for job in jobs)
    # what one survivor reacts to: the leaver's jobs it takes, not those another one takes
    taker = IDS[0]
    mine = old.with_members(new.members, focus=taker)
    assert mine.moved == {job for job in new.moved if new.owner(job) == taker}
    assert 0 < len(mine.moved) < len(new.moved)


def test_the_same_members_give_the_same_table() -> None:
    members = [Member(i, znode=f"{i}.{n:010d}") for n, i in enumerate(IDS[:3])]
    table = OwnerTable(members)
    assert table.with_members(reversed(members)) is table


def test_a_member_weighed_as_joining_moves_nothing_once_its_node_exists() -> None:
    """Before joining a member weighs every job with a record that has no node yet; the
    table once its node exists is derived at no cost: nothing moved, every entry kept."""
    others = [Member(i, znode=f"{i}.{n:010d}") for n, i in enumerate(IDS[:3])]
    joining = OwnerTable([*others, Member(IDS[5], labels={"role": "db"})])
    jobs = [f"job-{n}" for n in range(2_000)]
    owners = {job: joining.owner(job) for job in jobs}
    joined = joining.with_members([*others, Member(IDS[5], labels={"role": "db"}, znode="x.01")])
    assert joined is not joining and joined.moved == frozenset()
    assert joined._memo == joining._memo
    assert {job: joined.owner(job) for job in jobs} == owners
    # another record (its labels changed): its jobs are weighed again
    relabelled = joined.with_members([*others, Member(IDS[5], znode="x.02")])
    assert relabelled.moved == frozenset()  # labels no job asks for: the same owners
    assert {job: relabelled.owner(job) for job in jobs} == owners


job_specs = st.builds(
    lambda n, labels, program, env: JobSpec(
        f"job-{n}",
        "0 2 * * *",
        (PROGRAMS[program],),
        labels=LABELS[labels],
        env={"LD_PRELOAD": "x"} if env else {},
    ),
    st.integers(0, 40),
    st.integers(0, len(LABELS) - 1),
    st.integers(0, len(PROGRAMS) - 1),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(members, max_size=8), st.lists(job_specs, min_size=1, max_size=30))
def test_a_jobs_owner_is_the_owner_of_its_labels_program_and_env(
    start: list[Member], specs: list[JobSpec]
) -> None:
    """`job_owner` looks a job that asks for no label up by name when no member has an
    allow-list or is an app: the answer `owner` gives from the job's fields, every time."""
    table, other = OwnerTable(start), OwnerTable(start)
    for spec in specs + specs:  # asked twice: a weighing, then the memo's answer
        expected = other.owner(spec.name, spec.labels, spec.command[0], spec.env.keys())
        assert table.job_owner(spec.name, spec) == expected
