"""The runtime: the daemon loop, the fire timer and the job runner."""
