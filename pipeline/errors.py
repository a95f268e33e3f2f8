"""How an exception from a library reads in our one-line error messages, the errors the
run reports as one line, and the exit status of a command (the rule that picks it is
`pipeline.runloop.exit_status`; these names are here so the command line can use them
before anything heavy is imported)."""
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


class StartupError(Exception):
    """Something the run needs at start-up cannot be had (a port in use, an output folder
    held by another run); the message is one line naming the culprit. Exit status 2."""


class CameraInUse(Exception):
    """A camera id that is already running was added again."""


class UnknownCamera(Exception):
    """A camera id that is not running was named."""
