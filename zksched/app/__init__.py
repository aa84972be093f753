"""zksched inside Python apps: `Cluster` (see zksched/app/cluster.py)."""
