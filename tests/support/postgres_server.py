"""A real PostgreSQL server for the tests (Debian's `postgresql` package, installed by
.ci/run): a cluster of its own in a temporary folder (`initdb`), listening on 127.0.0.1 and
a free port only (`pg_ctl`), trusting local connections, stopped and removed at the end.
The server refuses to run as root: as root (CI) it runs as the package's `postgres` user."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

from brokers import free_port


def binaries() -> str | None:
    """The folder of the newest installed server's initdb and pg_ctl (None: not installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


class PostgresServer:
    def __init__(self, bin_dir: str):
        self.bin = bin_dir
        self.folder = tempfile.mkdtemp(prefix="pipeline-pg-")  # not under pytest's root-only tmp folders
        self.data = os.path.join(self.folder, "data")
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        command = [os.path.join(self.bin, tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        r = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if r.returncode:
            raise RuntimeError(f"{tool} failed: {r.stderr.strip() or r.stdout.strip()}")

    def start(self) -> "PostgresServer":
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.folder, "log"), "-w", "start")
        return self

    def stop(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """An empty database of its own (one per test); its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        try:
            self.stop()
        except RuntimeError:
            pass  # stopped already
        shutil.rmtree(self.folder, ignore_errors=True)
