"""The project's errors, how a library's exception reads in our one-line messages, and the
exit status of a command (the rule that picks a run's status is
`pipeline.runloop.exit_status`; these names are here so the command line can use them
before anything heavy is imported).

Every error a user can cause is a `PipelineError`: it carries its problems (one line
each, naming the culprit) and the exit status a command ends with, so the command line
catches one type and reports every kind the same way.
"""
from __future__ import annotations

DONE, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130


def one_line(e: BaseException) -> str:
    """The reason alone: FFmpeg and OS errors carry an errno, a message and a file name
    (keep the message); anything else gives its type and first line."""
    strerror = getattr(e, "strerror", None)
    if strerror:
        return str(strerror)
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class PipelineError(Exception):
    """Something the user can mend: bad input, a missing file, a port in use. `problems`
    are its lines; a command that meets it prints each as `error: ...` and exits with
    `exit_status`."""

    exit_status = BAD_INPUT

    def __init__(self, *problems: str):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class StartupError(PipelineError):
    """Something the run needs at start-up cannot be had (a port in use, an output folder
    held by another run); the message is one line naming the culprit."""


class CameraInUse(PipelineError):
    """A camera id that is already running was added again."""


class UnknownCamera(PipelineError):
    """A camera id that is not running was named."""
