"""Running what a fire starts: a job's command (`CommandRunner`, its supervisor and reaper)
or an app's function (`FunctionRunner`), with deadlines and output logging; and what a
retried fire's runs leave in its record (`AttemptLog`). Other packages use the names below,
nothing else of it."""

from zksched.runtime.run.attempts import AttemptLog, after_claim
from zksched.runtime.run.functions import Fire, FunctionRun, FunctionRunner, JobFunction
from zksched.runtime.run.handle import RunningCommand
from zksched.runtime.run.reaper import Reaper
from zksched.runtime.run.request import RunRequest, RunResult
from zksched.runtime.run.runner import CommandRunner, ProgramLookup, Runner, StartedRun

__all__ = [
    "AttemptLog",
    "CommandRunner",
    "Fire",
    "FunctionRun",
    "FunctionRunner",
    "JobFunction",
    "ProgramLookup",
    "Reaper",
    "RunRequest",
    "RunResult",
    "Runner",
    "RunningCommand",
    "StartedRun",
    "after_claim",
]
