"""The fire core: what one member decides about each fire, with no I/O (sans-IO).

`MemberFireCore` holds one `JobFireMachine` per job this member owns or has fires of; the
shell (zksched/runtime, or the simulator in zksched/sim) feeds them events and carries out
the actions they return. `stages` holds the transition table, `model` the events, actions
and tunables.
"""
