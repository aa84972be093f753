"""A simulated member: the fire core behind a shell that talks to the ZooKeeper model.

The shell does what zksched's runtime does, in miniature: a session with a contact
watchdog (no reply for T/3: not connected; T/2: the session counts as lost), an ephemeral
sequential member node, watches on members, the job table and triggers, claims with a
nonce, the job lease as a lock recipe, commands that take time, and results written until
they land. A crash takes its commands with it (zksched's supervisor does that for real).
What the commands did is written to the `Ledger`, the ground truth the checker reads.

Its parts, one concern each: `session` (life, session, membership, watches), `actions`
(the fire core's actions: timers, reads, claims, results, skip records), `lease` (the job
lease), `commands` (the simulated commands); `base` holds the state they share.
"""

from __future__ import annotations

from sim.member.actions import FireActions
from sim.member.commands import Commands
from sim.member.lease import JobLease
from sim.member.session import MemberSession


class SimMember(MemberSession, FireActions, JobLease, Commands):
    """One simulated member: its parts put together (the constructor is `MemberBase`'s)."""


__all__ = ["SimMember"]
