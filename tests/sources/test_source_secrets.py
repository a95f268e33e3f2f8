"""A camera's errors name its URL with the password and secret query values masked,
whoever shows them (the log, the camera state, validate)."""
from __future__ import annotations

import socket

import pytest

from pipeline.config import SourceConfig
from pipeline.sources.connection import Connection, SourceError, probe


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_camera_that_cannot_be_opened_names_its_url_redacted():
    uri = f"rtsp://admin:Pl4ntedPw@127.0.0.1:{closed_port()}/x?token=Pl4ntedTok"
    config = SourceConfig(id="cam", uri=uri, live=True, open_timeout_s=2, read_timeout_s=2)
    with pytest.raises(SourceError) as e:
        Connection(config, on_bad_packet=lambda message: None)
    message = str(e.value)
    assert "Pl4nted" not in message
    assert "rtsp://admin:***@127.0.0.1:" in message and "token=***" in message


def test_probe_names_a_url_redacted():
    message = probe(f"http://viewer:Pl4ntedPw@127.0.0.1:{closed_port()}/clip.mp4?sig=Pl4ntedSig")
    assert message is not None and "Pl4nted" not in message
    assert "http://viewer:***@127.0.0.1:" in message
