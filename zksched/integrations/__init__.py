"""Integrations of zksched's coordination API with schedulers that apps already run.

Each module imports its scheduler, which the app already has (`pip install
zksched[apscheduler]` or `zksched[celery]`); importing this package imports neither.
"""
