"""A real Mosquitto broker for the tests (Debian's `mosquitto`, installed by .ci/run),
on a free port of 127.0.0.1, with persistence so a restart keeps subscriptions and
queued messages, as a production broker would."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mosquitto:
    def __init__(self, folder: Path, port: int | None = None):
        self.folder = folder
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mosquitto.conf").write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {folder}/\nautosave_interval 1\n")

    def start(self) -> "Mosquitto":
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.folder / "mosquitto.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: it saves its persistent state
            self.proc.wait(10)


def available() -> str | None:
    if not Path(MOSQUITTO).exists():
        return "Mosquitto is not installed (apt-get install mosquitto; .ci/run does)"
    return None
