"""Which files of the output folder a store row may name and the store or retention may
remove: one rule for the rows (the live writer's and the rebuild's), the store's
removals and retention's, so a JSON line, a store row or a `.written` line naming
`/etc/passwd`, `../x` or a link out of the folder never gets a file outside it removed.

A path may be named when it is relative and normalised (no `..`, `.`, empty or absolute
part), holds no NUL, lies inside the folder once every link on the way is resolved, and
is no symbolic link nor anything but a plain file (a path with nothing there yet is
sound: a segment being started, a file removed since). Beyond that, each kind has its
names: a recording's is time-named, of a recording's container, and holds its camera's
id (every recording template has `{camera}`); an event's file lies in `events/<camera>/`
under an evidence name. The store removes a recording only where its name is also one of
the series this run's records gave the camera's recordings (`series`): never another
camera's file, nor the camera's video or JSON lines.
"""
from __future__ import annotations

import os
import re
import stat

from pipeline.config.outputs import RECORD_CONTAINERS
from pipeline.events.event_evidence import EVIDENCE_NAME
from pipeline.recording.segments import STAMP_RE

EVENTS = "events"
PART = r"(?:\.part\d+)?"  # the part number a resolution change adds before the extension


def path_problem(root: str, relative: object) -> str | None:
    """Why `relative` names no plain file inside `root` (None: it may be named)."""
    if not isinstance(relative, str) or not relative:
        return "not a path"
    if "\0" in relative:
        return "a NUL in the name"
    if os.path.isabs(relative):
        return "an absolute path"
    parts = relative.split(os.sep)
    if os.path.normpath(relative) != relative or any(p in ("", ".", "..") for p in parts):
        return "not a path inside the folder"
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(os.path.join(root, relative))]) != real_root:
        return "leads outside the folder through a link"
    try:
        mode = os.lstat(os.path.join(root, relative)).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be looked at ({e.strerror or e})"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return None if stat.S_ISREG(mode) else "not a plain file"


def recording_problem(root: str, relative: object, camera: str) -> str | None:
    """Why `relative` is no recording segment of `camera` inside `root` (None: it may be one)."""
    problem = path_problem(root, relative)
    if problem is not None:
        return problem
    assert isinstance(relative, str)
    name = os.path.basename(relative)
    if re.search(STAMP_RE, name) is None or os.path.splitext(name)[1].lower() not in RECORD_CONTAINERS:
        return "not a recording's name (time-named, " + ", ".join(RECORD_CONTAINERS) + ")"
    return None if camera in relative else f"not a name of camera {camera!r}'s recordings"


def evidence_problem(root: str, relative: object, camera: str) -> str | None:
    """Why `relative` is no snapshot or clip of `camera` inside `root` (None: it may be one)."""
    problem = path_problem(root, relative)
    if problem is not None:
        return problem
    assert isinstance(relative, str)
    return None if is_evidence(relative, camera) else f"not one of camera {camera!r}'s event files (events/{camera}/)"


def is_evidence(relative: str, camera: str) -> bool:
    """Whether `relative` is named as `camera`'s event files are (snapshot, crop, clip)."""
    folder, name = os.path.split(relative)
    return folder == os.path.join(EVENTS, camera) and re.fullmatch(EVIDENCE_NAME, name) is not None


def series(relative: str) -> re.Pattern | None:
    """The names of every segment of the series `relative` belongs to (the same name but
    the stamp and part number); None where it is not time-named."""
    folder, name = os.path.split(relative)
    stem, ext = os.path.splitext(re.sub(r"\.part\d+(?=\.[^.]*$)", "", name))
    found = re.search(STAMP_RE, stem)
    if found is None:
        return None
    stem = re.escape(stem[:found.start()]) + STAMP_RE + re.escape(stem[found.end():])
    return re.compile(re.escape(os.path.join(folder, "")) + stem + PART + re.escape(ext))


def removal_problem(root: str, relative: object, camera: str, names: list[re.Pattern]) -> str | None:
    """Why the store may not remove `relative` as an idle recording of `camera` (None: it
    may): a recording's rule, and one of `names`, the series this run's records gave the
    camera's recordings (a row written by an older version, or by hand, may name anything)."""
    problem = recording_problem(root, relative, camera)
    if problem is None and not any(p.fullmatch(relative) for p in names):  # type: ignore[arg-type]
        return f"not a name this run gave camera {camera!r}'s recordings"
    return problem
