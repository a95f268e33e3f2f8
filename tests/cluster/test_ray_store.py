"""A 2-host Ray cluster run writing into one PostgreSQL store: each host enters its run and
writes its cameras' rows into the same database, and they are the rows a rebuild of the
shared folder's JSON lines gives. The server runs inside the cluster's private network
namespace (Ray binds every interface), then is read again outside it."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, cut_clip, detector_model, missing, read_jsonl
from test_ray import SCENARIO, _ray_in_namespaces_of_its_own, cameras, isolated  # noqa: F401 (Ray's check, autouse)

pytestmark = pytest.mark.cluster

TRACKS = ("SELECT r.started, t.camera, t.track, t.class, t.first_seen, t.last_seen, t.best_score, t.best_box,"
          " t.best_time, t.labels, t.zones, t.lines FROM tracks t JOIN runs r ON r.id = t.run ORDER BY 1, 2, 3")
EVENTS = ("SELECT r.started, e.camera, e.time, e.event, e.track, e.class, e.line, e.direction FROM events e"
          " JOIN runs r ON r.id = e.run ORDER BY 1, 2, 3, 4, 5")
COUNTS = "SELECT * FROM counts ORDER BY 1, 2, 3, 4, 5, 6"


def rows(conn) -> dict:
    out = {}
    for name, query in (("runs", "SELECT started, host FROM runs ORDER BY started"), ("tracks", TRACKS),
                        ("events", EVENTS), ("counts", COUNTS)):
        cur = conn.cursor()
        cur.execute(query)
        out[name] = [tuple(r) for r in cur.fetchall()]
    return out


def test_two_hosts_write_one_postgresql_store_that_a_rebuild_agrees_with(tmp_path, sample_path, model_path,
                                                                          pipeline_cmd):
    from postgres_server import PostgresServer, binaries

    try:
        import psycopg
    except ImportError:
        missing("the PostgreSQL tests need psycopg (pip install -e '.[test]')")
    if binaries() is None:
        missing("PostgreSQL's server is not installed (Debian's postgresql package: apt-get install postgresql)")
    server = PostgresServer(binaries())  # its cluster made here, started inside the namespace
    try:
        clips = [cut_clip(sample_path(f"{n}.mp4"), str(tmp_path / f"{n}.mp4"), 40) for n in ("bikes", "vtest")]
        line = {"name": "middle", "points": [[320, 0], [320, 575]]}
        config = {"sources": cameras(clips * 2), "models": {"det": detector_model(model_path)},
                  "graph": [{"detect": {"model": "det"}}, "track",
                            {"analytics": {"cameras": {f"cam{i}": {"lines": [line]} for i in range(4)}}}],
                  "outputs": {"dir": str(tmp_path / "out"), "jsonl": {"filename": "{camera}.jsonl"},
                              "video": {"enabled": False}, "store": {"url": server.url()}}}
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(config))
        pg_ctl = f"runuser -u postgres -- {binaries()}/pg_ctl -D {server.data}"
        start = (f"{pg_ctl} -o '-p {server.port} -k {server.folder} -c listen_addresses=127.0.0.1' "
                 f"-l {server.folder}/log -w start >/dev/null")
        script = (f"{start} || exit 1\n{sys.executable} {SCENARIO} {path} {tmp_path / 'result.json'}\n"
                  f"rc=$?; {pg_ctl} -m fast -w stop >/dev/null; exit $rc")
        r = subprocess.run(isolated(script), capture_output=True, text=True, cwd=ROOT, timeout=400)
        assert r.returncode == 0, r.stderr[-3000:]
        result = json.loads((tmp_path / "result.json").read_text())
        assert result["finished"] and len(set(result["placement"].values())) == 2  # both hosts had cameras
        server.start()  # the same database, read outside the namespace
        with psycopg.connect(server.url()) as conn:
            live = rows(conn)
        assert len(live["runs"]) == 2 and live["events"] and live["counts"]
        lines = [r for i in range(4) for r in read_jsonl(str(tmp_path / "out" / f"cam{i}.jsonl"))]
        tracked = {(r["camera"], d["track"]) for r in lines for d in r["detections"] if "track" in d}
        assert {(t[1], t[2]) for t in live["tracks"]} == tracked
        rebuilt = subprocess.run([*pipeline_cmd, "store", "rebuild", "--dir", str(tmp_path / "out"), "--to",
                                  str(tmp_path / "rebuilt.db")], capture_output=True, text=True, timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert rows(sqlite3.connect(tmp_path / "rebuilt.db")) == live
    finally:
        server.remove()
