"""Who owns which job: rendezvous (highest-random-weight) hashing over the live members.

A pure function of (job, required labels, members). Every member computes the same table from
the same member list, so no messages are needed between them.

Hash input, documented because every host must agree on it byte for byte:

    weight(job, member) = mmh3.hash128(job + "\\x00" + member_id, seed=0, x64arch=True,
                                       signed=False)   # MurmurHash3_x64_128, unsigned

encoded as UTF-8. The eligible member (its labels include every key=value pair the job asks
for, and whose command allow-list, if it has one, admits the job's argv[0]; for a function
job, an app member that registered the function with the very spec in the table; for a
command job, a daemon) with the highest weight owns the job; on an exact tie the larger
member id wins. Member ids (`<hostname>-<pid>`) rather than znode names are hashed, so a
member that rejoins on a new session keeps the jobs it had.

A membership change does not recompute the table: `OwnerTable.with_members` derives the next
table from the last one. A member that joins takes exactly the jobs whose weight for it
beats their owner's (one hash per eligible job); the jobs of a member that left, and only
they, are weighed again over everyone. Either way the result is the one a table built from
scratch gives, byte for byte (a property test holds the two together), and the jobs whose
owner changed come with it (`moved`), so a member reacts to those alone. The same
derivation can go a slice at a time (`TableDerivation`), for a shell that must not hold its
other work for a million weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar

import mmh3

from zksched.core.jobspec import JobSpec
from zksched.core.jobspec.frozenmap import EMPTY_MAP
from zksched.core.members import Member, sequence_of
from zksched.core.names import JobNames

_EMPTY: Mapping[str, str] = MappingProxyType({})
# (job, labels, program, env names, function, apps only): what eligibility depends on
_OwnerKey = tuple[
    str, frozenset[tuple[str, str]], str | None, frozenset[str], tuple[str, str] | None, bool
]
# A job that asks for nothing (no labels, no allow-list or app to weigh) is keyed by its
# name alone: the daemon's own string, not a tuple of 88 bytes per job of a million.
_MemoKey = str | _OwnerKey
_T = TypeVar("_T")
_Best = tuple[str | None, int]  # the owner and its weight (-1: no member is eligible)
_NONE: _Best = (None, -1)
# tables of this process, told apart (never compared across hosts)
_generations = itertools.count(1)


# A memo entry per job: its key shares these rather than holding empty sets of its own (an
# empty frozenset is 216 bytes, twice a key; most jobs ask for no labels and set no env).
_NO_LABELS: frozenset[tuple[str, str]] = frozenset()
_NO_NAMES: frozenset[str] = frozenset()


def _labels(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items()) if labels else _NO_LABELS


def _names(names: Iterable[str]) -> frozenset[str]:
    found = frozenset(names)
    return found if found else _NO_NAMES


def weight(job: str, member_id: str) -> int:
    """The rendezvous weight of `member_id` for `job` (see the module docstring)."""
    # keywords, not positions: mmh3 5 reads a positional `signed=False` as signed
    return mmh3.hash128(f"{job}\x00{member_id}".encode(), seed=0, x64arch=True, signed=False)


def _weighs_alike(member: Member, other: Member | None) -> bool:
    """Every job's weight and eligibility for `other` are those for `member` (the same id;
    its node may differ: a member weighed as joining before its node existed)."""
    return other is not None and (
        member.labels == other.labels
        and member.allowed_commands == other.allowed_commands
        and member.functions == other.functions
    )


def _eligible(member: Member, key: _MemoKey) -> bool:
    if isinstance(key, str):
        return True
    _job, labels, program, env, function, apps_only = key
    if apps_only and member.functions is None:
        return False
    if not labels and program is None and function is None:
        return True
    return member.eligible_for(dict(labels), program, env, function)


class OwnerTable:
    """The owner of every job, given the live members. Immutable; lookups are memoised.

    Members that share a member id (a stale node of the same process) count once; the one
    with the highest znode sequence stands for it.
    """

    def __init__(self, members: Iterable[Member] = ()) -> None:
        newest: dict[str, Member] = {}
        for member in members:
            seen = newest.get(member.member_id)
            if seen is None or sequence_of(member.znode) > sequence_of(seen.znode):
                newest[member.member_id] = member
        self._members: tuple[Member, ...] = tuple(
            sorted(newest.values(), key=lambda m: m.member_id)
        )
        self._by_id = {m.member_id: m for m in self._members}
        self._ids = tuple(m.member_id for m in self._members)
        self._memo: dict[_MemoKey, _Best] = {}
        self._any_allow_list = any(m.allowed_commands is not None for m in self._members)
        self._any_app = any(m.functions is not None for m in self._members)
        self.generation = next(_generations)
        # the table this one was derived from, and the jobs whose owner changed since it
        # (None: built from scratch, anything may have moved)
        self.derived_from: int | None = None
        self.moved: JobNames | None = None

    @property
    def members(self) -> tuple[Member, ...]:
        return self._members

    @property
    def member_ids(self) -> tuple[str, ...]:
        return self._ids

    def __len__(self) -> int:
        return len(self._members)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnerTable) and self._members == other._members

    def __hash__(self) -> int:
        return hash(self._members)

    def with_members(self, members: Iterable[Member], focus: str | None = None) -> OwnerTable:
        """The table for `members`, derived from this one: only what the change can move
        is weighed (see the module docstring). The same members: this very table.

        `focus`: a member id; `moved` then holds only the jobs it gained or lost (what that
        member reacts to), not those that went from one other member to another."""
        return TableDerivation(self, members, focus).finish()

    def job_owner(self, name: str, spec: JobSpec) -> str | None:
        """The member that owns job `name` as `spec` describes it (labels, kind, command,
        env; a function job's spec hash)."""
        if spec.kind == "function":
            return self.owner(name, spec.labels, function=(name, spec.definition_hash))
        if spec.labels is EMPTY_MAP and not (self._any_allow_list or self._any_app):
            return self._looked_up(name)  # `owner`'s key for such a job: its name alone
        return self.owner(name, spec.labels, spec.command[0], spec.env.keys())

    def owner(
        self,
        job: str,
        labels: Mapping[str, str] = _EMPTY,
        program: str | None = None,
        env_names: Iterable[str] = (),
        function: tuple[str, str] | None = None,
        apps_only: bool = False,
    ) -> str | None:
        """The member id that owns `job`, or None when no live member is eligible.
        `apps_only`: among app members only (a name that is no job, for `Cluster.is_owner`:
        a daemon would never act on it).

        `program` is the job's argv[0] and `env_names` the variables its env sets: members
        whose allow-list refuses them are not eligible.
        None leaves allow-lists out (only for asking who would own it by labels alone).
        """
        env = _NO_NAMES
        if not self._any_allow_list and program is not None:
            # nobody restricts commands: one memo entry per job; with app members about,
            # "" still asks for a daemon, whatever the program
            program = "" if self._any_app else None
        elif program is not None:
            env = _names(env_names)
        label_set = _labels(labels)
        key: _MemoKey = job
        if label_set or program is not None or function is not None or apps_only:
            key = (job, label_set, program, env, function, apps_only)
        return self._looked_up(key)

    def _looked_up(self, key: _MemoKey) -> str | None:
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._weigh(key)
        return found[0]

    def _weigh(self, key: _MemoKey) -> _Best:
        """The eligible member with the highest weight for the key's job (all of them)."""
        candidates: Sequence[Member]
        if isinstance(key, str):
            job, candidates = key, self._members
        else:
            job = key[0]
            candidates = [m for m in self._members if _eligible(m, key)]
        best = _NONE
        for member in candidates:
            w = weight(job, member.member_id)
            # Members are sorted by id, so `>=` lets the larger id win an exact tie.
            if w >= best[1]:
                best = (member.member_id, w)
        return best

    def weighed_for(self, member_id: str) -> JobNames:
        """The jobs weighed so far (asked about, or carried from the table this one was
        derived from) whose owner is `member_id`, in the order they were weighed."""
        return JobNames(
            key if isinstance(key, str) else key[0]
            for key, (owner, _) in self._memo.items()
            if owner == member_id
        )

    def assign(self, jobs: Mapping[str, Mapping[str, str]]) -> dict[str, str | None]:
        """Owner of each job in `jobs` (job name -> required labels)."""
        return {name: self.owner(name, labels) for name, labels in jobs.items()}

    def owned_by(self, member_id: str, jobs: Mapping[str, Mapping[str, str]]) -> list[str]:
        return [name for name, labels in jobs.items() if self.owner(name, labels) == member_id]


class TableDerivation:
    """`OwnerTable.with_members`, a slice at a time: the shell spreads a million jobs' worth
    of weighing over its turns, so that timers and fires due meanwhile are not held for it.

    Each `advance` looks at `entries` of the memo's entries (None: every one at once: one
    weight each for a member joining, the leavers' own weighed over everyone, about as many
    weights in all) and returns the derived table once it is complete, None until then.
    The base table stays the one in use meanwhile, and lookups may add entries to its memo:
    those are weighed afresh when the table is asked for (until it is taken), so the derived
    table holds every entry the base held (a member weighed before joining relies on that).
    """

    def __init__(
        self,
        base: OwnerTable,
        members: Iterable[Member],
        focus: str | None = None,
        entries: int | None = None,
    ) -> None:
        self.base = base
        self.table = table = OwnerTable(members)
        self._focus = focus
        self._slice = entries
        self._moved: list[str] = []
        self._result: OwnerTable | None = None
        self._copied = 0
        self._work: Iterator[bool] = iter(())
        if table == base:
            self._result = base
            return
        if (table._any_allow_list, table._any_app) != (base._any_allow_list, base._any_app):
            self._result = table  # the memo's keys mean something else now: weigh lazily
            return
        left = {i for i, m in base._by_id.items() if not _weighs_alike(m, table._by_id.get(i))}
        joined = [m for m in table._members if not _weighs_alike(m, base._by_id.get(m.member_id))]
        table.derived_from = base.generation  # from the base's memo (see `advance`)
        # unchanged entries are the very tuples of the base: no million new ones a change
        table._memo = dict(base._memo)
        self._copied = len(table._memo)
        self._work = self._steps(left, joined)

    def advance(self) -> OwnerTable | None:
        """Weigh one slice more; the derived table once complete (None: not yet). Asked
        again once complete, it weighs what the base gained since: until the shell takes
        the table, the base is still in use."""
        if self._result is None and next(self._work, None) is not None:
            return None
        if self.table.derived_from is not None:  # not the base itself, nor weighed afresh
            self._catch_up()
            self.table.moved = JobNames(self._moved)
            self._result = self.table
        return self._result

    @property
    def done(self) -> bool:
        """Every slice is weighed (`advance` now gives the table)."""
        return self._result is not None

    def finish(self) -> OwnerTable:
        """Every slice left at once; the derived table."""
        table = self.advance()
        while table is None:
            table = self.advance()
        return table

    def _steps(self, left: set[str], joined: list[Member]) -> Iterator[bool]:
        """The work, one slice per item yielded."""
        table, memo = self.table, self.table._memo
        # the memo's values change, its keys do not (the base's may): it is iterated across
        # slices, each slice a share of it (a scan of a million entries is itself 0.3 s)
        if left:  # the leavers' jobs: weighed again over everyone
            for chunk in _chunks(memo.items(), self._slice):
                for key, (owner, _) in chunk:
                    if owner in left:
                        memo[key] = entry = table._weigh(key)
                        self._note(key, owner, entry[0])
                yield True
        for member in joined:  # one weight per job the newcomer may own
            for chunk in _chunks(memo.items(), self._slice):
                self._won_by(member, chunk)
                yield True

    def _won_by(self, member: Member, chunk: Iterable[tuple[_MemoKey, _Best]]) -> None:
        """Give `member` (joining) each job of `chunk` whose weight for it beats the job's
        entry."""
        memo, base, mid = self.table._memo, self.base._memo, member.member_id
        for key, (owner, top) in chunk:
            if isinstance(key, str):
                job = key
            elif _eligible(member, key):
                job = key[0]
            else:
                continue
            w = weight(job, mid)
            # an exact tie goes to the larger id, as in `_weigh`
            if w > top or (w == top and owner is not None and mid > owner):
                memo[key] = (mid, w)
                self._note(key, base[key][0], mid)

    def _catch_up(self) -> None:
        """Entries the base's memo gained while this derivation ran: weighed afresh."""
        table, base = self.table, self.base._memo
        if len(base) == self._copied:
            return
        for key in list(itertools.islice(base, self._copied, None)):
            table._memo[key] = entry = table._weigh(key)
            self._note(key, base[key][0], entry[0])
        self._copied = len(base)

    def _note(self, key: _MemoKey, was: str | None, owner: str | None) -> None:
        focus = self._focus
        if owner != was and (focus is None or focus in (owner, was)):
            self._moved.append(key if isinstance(key, str) else key[0])


def _chunks(items: Iterable[_T], size: int | None) -> Iterator[list[_T]]:
    """`items` in lists of `size` (None: one list of them all)."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
