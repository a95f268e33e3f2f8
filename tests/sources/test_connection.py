"""Opening a camera's video: a local path that is not a regular file (a FIFO, a device, a
directory) is refused right before each open, in one line, however the config named it
(a path, a `file://` URL, one wrapped in another FFmpeg protocol); the check when the
config was read is not enough, a path can change."""
from __future__ import annotations

import os
import socket
import threading

import pytest

from pipeline.config import SourceConfig
from pipeline.sources.connection import Connection, SourceError, probe


def opened_within(uri: str, seconds: float = 20) -> str:
    """What opening `uri` raised (in a thread: an open stuck in the kernel must not hang the tests)."""
    said: list[str] = []

    def open_it() -> None:
        try:
            Connection(SourceConfig(id="cam", uri=uri), lambda _: None).close()
            said.append("opened")
        except SourceError as e:
            said.append(str(e))

    t = threading.Thread(target=open_it, daemon=True)
    t.start()
    t.join(seconds)
    assert said, f"opening {uri} was still waiting after {seconds}s"
    return said[0]


@pytest.mark.parametrize("form", ["{}", "file://{}", "cache:file://{}"])
def test_a_path_that_is_a_fifo_when_opened_is_refused_at_once(fifo, form):
    """FFmpeg's open of a FIFO without a writer waited in the kernel for ever: the camera
    stayed `connecting` and SIGTERM could not end the run."""
    path = fifo()
    uri = form.format(path)
    assert opened_within(uri) == f"cannot open {uri}: not a regular file (a FIFO): {path}"


def test_devices_and_folders_are_refused_by_the_open_and_the_probe(tmp_path, fifo):
    for path, kind in ((fifo(), "a FIFO"), ("/dev/zero", "a character device"), (str(tmp_path), "a directory")):
        assert opened_within(path) == f"cannot open {path}: not a regular file ({kind}): {path}"
        assert probe(f"file://{path}") == f"cannot read video file://{path}: not a regular file ({kind}): {path}"


def test_a_regular_file_named_as_a_file_url_opens(short_clips):
    assert opened_within(f"file://{os.path.abspath(short_clips['bikes'])}") == "opened"


def test_the_probe_of_a_url_read_as_a_file_gives_up_at_its_timeouts():
    """`validate` probes sources that are not live; `live: false` on a URL whose server
    accepts and never answers held it for ever, SIGTERM included (the probe had no timeout)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        uri = f"http://127.0.0.1:{server.getsockname()[1]}/clip.mp4"
        said: list[str | None] = []
        t = threading.Thread(target=lambda: said.append(probe(uri, (1.0, 1.0))), daemon=True)
        t.start()
        t.join(20)
    assert said == [f"cannot read video {uri}: no answer in time (open_timeout_s=1, read_timeout_s=1)"]
