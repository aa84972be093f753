"""Running what a fire starts: a job's command (`CommandRunner`, its supervisor and reaper)
or an app's function (`FunctionRunner`), with deadlines and output logging. Other packages
use the names below, nothing else of it."""


from zksched.runtime.run.functions import Fire, FunctionRun, FunctionRunner, JobFunction
from zksched.runtime.run.handle import RunningCommand
from zksched.runtime.run.reaper import Reaper
from zksched.runtime.run.request import RunRequest, RunResult
from zksched.runtime.run.runner import CommandRunner, ProgramLookup

__all__ = [
    "CommandRunner",
    "Fire",
    "FunctionRun",
    "FunctionRunner",
    "JobFunction",
    "ProgramLookup",
    "Reaper",
    "RunRequest",
    "RunResult",
    "RunningCommand",
]
