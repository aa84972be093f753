"""Deterministic cluster simulation: in-memory models of the world the scheduler runs in."""
