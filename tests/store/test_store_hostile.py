"""The store's promise checked from outside, on clips, cameras and configs its builders did
not use: two cameras (the sample street and the campus cut with a keyframe every 10
frames) with lines and zones of their own (names with commas, quotes and markup), a
classifier's labels, stationary objects, motion measured on one camera, recordings cut
every 1 s and 2 s, and JSON lines shared by both cameras in 1 s time-named files. The rows the store
must hold are worked out here from the JSON lines and the run log alone (`expected`), not
by the store's own row builder: tracks, their zones and lines, events and per-minute
counts equal them row for row, recording segments too; `pipeline store rebuild` gives the
same store; a second run appends; a SIGKILL leaves a store that opens and holds every
row of its JSON lines but the last second's; a damaged file is moved aside with one line
and rebuilt; hostile query parameters over HTTP get a 400 naming them."""
from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from fractions import Fraction
from pathlib import Path

import av
import pytest
import yaml

from conftest import ROOT, classifier_model, detector_model, run_pipeline
from pipeline.config.outputs import WebConfig
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.store.filters import Cursor
from pipeline.store.queries import Store
from pipeline.web.server import WebServer

KERB = {"name": "kerb, east", "points": [[320, 0], [320, 271]], "classes": ["bicycle", "person", "car"]}
LANE = {"name": "lane", "polygon": [[0, 120], [639, 120], [639, 271], [0, 271]], "classes": ["bicycle", "person"]}
PATH = {"name": "path, west", "points": [[0, 330], [767, 280]], "classes": ["person"]}
COURT = {"name": "court 'n'; -- <b>", "polygon": [[0, 0], [767, 0], [767, 300], [0, 330]], "classes": ["person"]}


def gop_clip(src: str, dst: str, frames: int, gop: int, rate: Fraction | None = None) -> str:
    """The first `frames` frames of a clip, encoded again with a keyframe every `gop` frames
    (so that 1 s recording segments have keyframes to be cut at), at `rate` frames a second."""
    with av.open(src) as inp, av.open(dst, "w") as out:
        s_in = inp.streams.video[0]
        rate = rate or s_in.average_rate or Fraction(25)
        s_out = out.add_stream("libx264", rate=rate)
        s_out.width, s_out.height, s_out.pix_fmt = s_in.width, s_in.height, "yuv420p"
        s_out.codec_context.gop_size = gop
        s_out.options = {"preset": "ultrafast", "crf": "20", "keyint_min": str(gop), "sc_threshold": "0"}
        for i, frame in enumerate(inp.decode(s_in)):
            if i >= frames:
                break
            frame.pts, frame.time_base = i, 1 / rate
            out.mux(s_out.encode(frame.reformat(format="yuv420p")))
        out.mux(s_out.encode(None))
    return dst


@pytest.fixture(scope="module")
def clips(tmp_path_factory, sample_path) -> dict[str, str]:
    d = tmp_path_factory.mktemp("hostile_clips")
    return {"door": gop_clip(sample_path("bikes.mp4"), str(d / "door.mp4"), 60, 10),
            "yard": gop_clip(sample_path("vtest.mp4"), str(d / "yard.mp4"), 40, 10),
            "slow": gop_clip(sample_path("bikes.mp4"), str(d / "slow.mp4"), 24, 2, Fraction(2))}


def config(clips: dict, model_path, **outputs) -> dict:
    return {"sources": [{"id": "door", "uri": clips["door"], "record": {"segment_s": 1}},
                        {"id": "yard", "uri": clips["yard"]}],
            "models": {"det": detector_model(model_path, score_threshold=0.1), "cls": classifier_model(model_path)},
            "graph": [{"detect": {"model": "det", "cameras": {"yard": {"motion": True}}}}, {"track": {"high_threshold": 0.4, "new_track_threshold": 0.5, "stationary_s": 0.5}},
                      {"classify": {"model": "cls", "classes": ["bicycle", "car", "person"], "per_track": True,
                                    "min_size": 16}},
                      {"analytics": {"cameras": {"door": {"lines": [KERB], "zones": [LANE]},
                                                 "yard": {"lines": [PATH], "zones": [COURT]}}}}],
            "outputs": {"video": {"enabled": False, "segment_s": 1}, "record": {"enabled": True, "segment_s": 2},
                        "events": {"snapshots": True}, **outputs}}


def run_into(folder: Path, cfg: dict):
    """A run of `cfg` in-process into `folder`/out (its config beside it, the same path each time)."""
    def write(data: dict, name: str = "config.yaml") -> str:
        (folder / name).write_text(yaml.safe_dump(data, sort_keys=False))
        return str(folder / name)

    return run_pipeline(cfg, write, str(folder / "out"))


# --- the store's rows, keyed by what they mean (a run by its start, never by ids) ---

def stored(where) -> dict:
    """The rows of the SQLite file at `where`, or of a connection (PostgreSQL)."""
    db = sqlite3.connect(where) if isinstance(where, Path) else where
    started = dict(db.execute("SELECT id, started FROM runs"))
    tracks = {(started[r[0]], r[1], r[2]): (r[3], r[4], r[5], r[6], json.loads(r[7]) if r[7] else None,
                                            json.loads(r[8]), json.loads(r[9]), json.loads(r[10]), r[11], r[12],
                                            r[13])
              for r in db.execute("SELECT run, camera, track, class, first_seen, last_seen, best_score, best_box,"
                                  " labels, zones, lines, snapshot, recording, recording_time FROM tracks")}
    key = "SELECT t.run, t.camera, t.track"
    zones = {(started[r[0]], *r[1:]) for r in db.execute(
        f"{key}, z.zone FROM track_zones z JOIN tracks t ON t.id = z.track_id")}
    lines = {(started[r[0]], *r[1:]) for r in db.execute(
        f"{key}, l.line, l.direction FROM track_lines l JOIN tracks t ON t.id = l.track_id")}
    events = Counter((started[r[0]], *r[1:]) for r in db.execute(
        "SELECT run, camera, time, event, track, class, line, zone, direction, snapshot, clip, recording,"
        " recording_time FROM events"))
    counts = {r[:6]: r[6] for r in db.execute("SELECT camera, minute, kind, name, class, direction, n FROM counts")}
    segments = {r[1]: (r[0], r[2], r[3], r[4], round(r[5], 4), round(r[6], 4)) for r in db.execute(
        'SELECT camera, path, start, "end", bytes, motion_s, objects_s FROM segments')}
    try:
        hourly = Counter({tuple(r[:-1]): r[-1] for r in db.execute("SELECT * FROM counts_hour")})
    except Exception:  # a schema without an hourly rollup
        db.rollback()
        hourly = None
    return {"runs": sorted(started.values()), "tracks": tracks, "track_zones": zones, "track_lines": lines,
            "events": events, "counts": counts, "segments": segments, "counts_hour": hourly}


# --- the rows the JSON lines and the run log say the store must hold ---

def run_log(out: Path) -> dict[str, list[tuple[float, float]]]:
    """Each camera's (run's start, clock origin), in the order of the runs' starts."""
    entries = [json.loads(line) for line in (out / ".store_runs").read_text().splitlines()]
    started = {e["run"]: e["started"] for e in entries if "started" in e}
    origins: dict[str, list[tuple[float, float]]] = {}
    for e in entries:
        if "camera" in e:
            origins.setdefault(e["camera"], []).append((started[e["run"]], e["origin"]))
    return {cam: sorted(o, key=lambda so: so[0]) for cam, o in origins.items()}


def camera_sessions(out: Path, upto: dict[str, int] | None = None) -> dict[str, list[list[dict]]]:
    """Each camera's lines in file order, cut where its frame numbers start again (a run);
    `upto`: only the first lines of each file (a file left out: none of it)."""
    sessions: dict[str, list[list[dict]]] = {}
    last: dict[str, int] = {}
    for path in sorted(glob.glob(str(out / "*.jsonl"))):
        lines = Path(path).read_text().splitlines()
        for line in lines if upto is None else lines[:upto.get(path, 0)]:
            record = json.loads(line)
            cam = record["camera"]
            if cam not in last or record["seq"] <= last[cam]:
                sessions.setdefault(cam, []).append([])
            last[cam] = record["seq"]
            sessions[cam][-1].append(record)
    return sessions


def expected(out: Path, upto: dict[str, int] | None = None) -> dict:
    want: dict = {"tracks": {}, "track_zones": set(), "track_lines": set(), "events": Counter(),
                  "counts": Counter(), "segments": {}}
    origins = run_log(out)
    for cam, sessions in camera_sessions(out, upto).items():
        assert len(origins[cam]) == len(sessions) or upto is not None, (cam, origins[cam], len(sessions))
        for (started, origin), records in zip(origins[cam], sessions):
            previous = None
            for record in records:
                if record.get("time") is None:
                    continue
                wall = origin + record["time"]
                step = 0.0 if previous is None else min(max(wall - previous, 0.0), 2.0)
                previous = wall
                for det in record["detections"]:
                    if "track" in det:
                        sighting(want, (started, cam, det["track"]), det, wall, record)
                for event in record.get("events", []):
                    happened(want, started, cam, event, wall)
                segment(want, cam, record, wall, step)
    want["tracks"] = {k: (t["class"], t["first"], t["last"], t["score"], t["box"], t["labels"], t["zones"],
                          sorted({line for line, _ in t["lines"]}), t["snapshot"], t["recording"],
                          t["recording_time"]) for k, t in want["tracks"].items()}
    want["segments"] = {p: (s["camera"], s["start"], s["end"], os.path.getsize(out / p), round(s["motion"], 4),
                            round(s["objects"], 4)) for p, s in want["segments"].items()}
    want["counts"] = dict(want["counts"])
    return want


def track(want: dict, key: tuple, cls: str | None, wall: float) -> dict:
    return want["tracks"].setdefault(key, {"class": cls, "first": wall, "last": wall, "score": None, "box": None,
                                           "labels": {}, "zones": [], "lines": [], "snapshot": None,
                                           "recording": None, "recording_time": None})


def sighting(want: dict, key: tuple, det: dict, wall: float, record: dict) -> None:
    """A track seen: its last sighting, its best detected (not predicted) one, its labels."""
    t = track(want, key, det["class"], wall)
    t["last"] = max(t["last"], wall)
    if not det["predicted"] and (t["score"] is None or det["score"] > t["score"]):
        t.update({"score": det["score"], "box": det["box"], "class": det["class"],
                  "recording": record.get("recording"), "recording_time": record.get("recording_time")})
    for stage, label in det.get("labels", {}).items():
        t["labels"][stage] = label["label"]


def happened(want: dict, started: float, cam: str, e: dict, wall: float) -> None:
    """An event: its row, its minute's count, and what it says of its track."""
    want["events"][(started, cam, wall, e["event"], e.get("track"), e.get("class"), e.get("line"), e.get("zone"),
                    e.get("direction"), e.get("snapshot"), e.get("clip"), e.get("recording"),
                    e.get("recording_time"))] += 1
    minute = int(wall // 60) * 60
    if e["event"] == "cross":
        want["counts"][(cam, minute, "line", e["line"], e.get("class") or "", e.get("direction") or "")] += 1
    if e["event"] == "enter":
        want["counts"][(cam, minute, "zone", e["zone"], e.get("class") or "", "enter")] += 1
    if e.get("track") is None:
        return
    key = (started, cam, e["track"])
    t = track(want, key, e.get("class"), wall)
    if e["event"] == "enter" and e["zone"] not in t["zones"]:
        t["zones"].append(e["zone"])
        want["track_zones"].add((*key, e["zone"]))
    if e["event"] == "cross" and (e["line"], e.get("direction") or "") not in t["lines"]:
        t["lines"].append((e["line"], e.get("direction") or ""))
        want["track_lines"].add((*key, e["line"], e.get("direction") or ""))
    if t["snapshot"] is None and e.get("snapshot"):
        t["snapshot"] = e["snapshot"]


def segment(want: dict, cam: str, record: dict, wall: float, step: float) -> None:
    """A recorded frame: its file's span and its seconds with motion and with objects."""
    path = record.get("recording")
    if path is None or record.get("recording_time") is None:
        return
    s = want["segments"].setdefault(path, {"camera": cam, "start": wall - record["recording_time"], "end": wall,
                                           "motion": 0.0, "objects": 0.0})
    s["start"], s["end"] = min(s["start"], wall - record["recording_time"]), max(s["end"], wall)
    s["motion"] += step if record.get("motion") else 0.0
    s["objects"] += step if record["detections"] else 0.0


def assert_rows_equal(out: Path, db) -> dict:
    """The store at `db` (a SQLite file, or a connection) holds exactly the rows the JSON
    lines in `out` say, table by table."""
    have, want = stored(db), expected(out)
    for table in ("tracks", "track_zones", "track_lines", "events", "counts", "segments"):
        assert have[table] == want[table], table
    if have["counts_hour"] is not None:
        hourly = Counter()
        for (cam, minute, kind, name, cls, direction), n in want["counts"].items():
            hourly[(cam, minute // 3600 * 3600, kind, name, cls, direction)] += n
        assert have["counts_hour"] == hourly
    return have


def rebuild_to(out: Path, to: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "store", "rebuild", "--dir", str(out), "--to", str(to)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def one_run(clips, model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile_run")
    snap = run_into(folder, config(clips, model_path))
    return folder / "out", snap


def test_two_cameras_of_their_own_store_their_json_lines_row_for_row(one_run):
    out, snap = one_run
    have = assert_rows_equal(out, out / "store.db")
    assert len(glob.glob(str(out / "detections.*.jsonl"))) > 1  # the shared JSON lines, cut every second
    assert {k[1] for k in have["tracks"]} == {"door", "yard"}
    kinds = Counter(e[3] for e in have["events"].elements())
    assert kinds["cross"] and kinds["enter"], kinds
    assert len({p for p, s in have["segments"].items() if s[0] == "door"}) > 1  # 1 s recordings of door
    assert any(t[5] for t in have["tracks"].values())  # a classifier's labels
    assert all(c.store_lost == 0 for c in snap.cameras.values())


def test_a_rebuild_of_the_folder_gives_the_same_store(one_run, tmp_path):
    out, _ = one_run
    r = rebuild_to(out, tmp_path / "rebuilt.db")
    assert r.returncode == 0, r.stderr
    assert stored(tmp_path / "rebuilt.db") == stored(out / "store.db")


def rerun_config(clips: dict, model_path, files: str) -> dict:
    """`shared`: the JSON lines of both cameras in one file cut on the wall clock; `own`:
    a file per camera cut on its media time, door's clip 12 s long (2 frames a second) so
    that a run ends before the media time of its last file's name."""
    if files == "shared":
        return config(clips, model_path)
    return config(dict(clips, door=clips["slow"]), model_path, jsonl={"filename": "{camera}.jsonl"})


@pytest.mark.parametrize("files", ["shared", "own"])
def test_a_second_run_on_the_folder_appends_and_both_runs_equal_their_json_lines(clips, model_path, tmp_path,
                                                                                 files):
    run_into(tmp_path, rerun_config(clips, model_path, files))
    first = stored(tmp_path / "out" / "store.db")
    run_into(tmp_path, rerun_config(clips, model_path, files))
    both = assert_rows_equal(tmp_path / "out", tmp_path / "out" / "store.db")
    assert len(both["runs"]) == 2 and {k[0] for k in both["tracks"]} == set(both["runs"])
    assert {k: v for k, v in both["tracks"].items() if k[0] == first["runs"][0]} == first["tracks"]
    r = rebuild_to(tmp_path / "out", tmp_path / "rebuilt.db")
    assert r.returncode == 0 and "2 run(s)" in r.stdout, r.stdout + r.stderr
    assert stored(tmp_path / "rebuilt.db") == both


def pipeline(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def whole_lines(out: Path) -> dict[str, int]:
    """How many whole lines each JSON lines file holds now."""
    return {p: Path(p).read_bytes().count(b"\n") for p in glob.glob(str(out / "*.jsonl"))}


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def events_written(out: Path) -> bool:
    """Whether the JSON lines hold an event yet."""
    return any(b'"events":[' in Path(p).read_bytes() for p in glob.glob(str(out / "*.jsonl")))


def test_a_sigkill_mid_run_leaves_a_sound_store_holding_all_but_the_last_seconds_rows(
        sample_path, clips, model_path, tmp_path):
    cfg = config({"door": sample_path("bikes.mp4"), "yard": sample_path("vtest.mp4")}, model_path)
    cfg["outputs"]["dir"] = str(tmp_path / "out")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    out, db = tmp_path / "out", tmp_path / "out" / "store.db"
    run = pipeline("run", "--config", str(tmp_path / "c.yaml"), "-q")
    try:
        wait_for(lambda: events_written(out) or run.poll() is not None, timeout=240)
        written = whole_lines(out)  # frames already handed to the store's queue, an event among them
        time.sleep(3.0)  # six of the store's flushes (flush_s 0.5): the "the last second", with room
        assert run.poll() is None, "the run ended before it could be killed: " + run.communicate()[1][-2000:]
    finally:
        run.send_signal(signal.SIGKILL)
        run.communicate()
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    have, want = stored(db), expected(out, written)
    assert want["events"] and not want["events"] - have["events"]
    assert set(want["tracks"]) <= set(have["tracks"])
    assert all(have["counts"].get(k, 0) >= n for k, n in want["counts"].items())
    assert set(want["segments"]) <= set(have["segments"])
    check = subprocess.run([sys.executable, "-m", "pipeline", "store", "check", "--dir", str(out)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert rebuild_to(out, tmp_path / "rebuilt.db").returncode == 0
    assert_rows_equal(out, tmp_path / "rebuilt.db")  # the killed run's JSON lines, whole to their last line
    again = pipeline("run", "--config", str(tmp_path / "c.yaml"), "--max-frames", "10", "-q")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert len(stored(db)["runs"]) == 2


def damage(db: Path, how: str) -> None:
    data = db.read_bytes()
    if how == "truncated":
        db.write_bytes(data[:len(data) // 2])
    elif how == "emptied":  # a file system's crash, or `: > store.db`
        db.write_bytes(b"")
    else:
        db.write_bytes(data[:4096] + b"\xa5" * 4096 + data[8192:])


@pytest.mark.parametrize("how", ["truncated", "page_overwritten", "emptied"])
def test_a_damaged_store_is_moved_aside_in_one_line_and_rebuilt_with_every_run(one_run, clips, model_path,
                                                                               tmp_path, caplog, how):
    out = tmp_path / "out"
    shutil.copytree(one_run[0], out)
    damage(out / "store.db", how)
    before = (out / "store.db").read_bytes()
    with caplog.at_level("WARNING", logger="pipeline.store"):
        run_into(tmp_path, config(clips, model_path))
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(said) == 1 and "moved aside" in said[0] and "store.db" in said[0], said
    (aside,) = glob.glob(str(out / "store.db.damaged-*[0-9]"))
    assert Path(aside).read_bytes() == before
    both = assert_rows_equal(out, out / "store.db")
    assert len(both["runs"]) == 2


TOKEN = "hostile-token"


@pytest.fixture(scope="module")
def server(one_run):
    preview = Preview()
    web = WebServer(WebConfig(port=0, token=TOKEN), Snapshot, preview, cameras=lambda: ["door", "yard"],
                    store=Store(str(one_run[0] / "store.db")))
    web.start()
    yield web.port
    web.close()
    preview.close()


def ask(port: int, target: str) -> tuple[int, dict, bytes]:
    """GET `target` as sent, byte for byte: (status, JSON body, the whole answer's head)."""
    request = (f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
               "Connection: close\r\n\r\n").encode("latin-1")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(request)
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body or b"null"), head


def cursor_of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


HOSTILE = [
    ("tracks?cursor=" + cursor_of(b"[" * 3000), "cursor"),
    ("tracks?cursor=" + cursor_of(b'["tracks", 1e999, 1]'), "cursor"),
    ("tracks?cursor=" + Cursor("events", 1.0, 1).encode(), "cursor"),
    ("tracks?class=%00", "class"),
    ("tracks?camera=door%0d%0aX-Injected:%201", "camera"),
    ("tracks?zone=" + "z" * 201, "zone"),
    ("tracks?line=" + ",".join(f"l{i}" for i in range(65)), "line"),
    ("tracks?after=nan", "after"),
    ("tracks?before=-inf", "before"),
    ("tracks?after=1e3000", "after"),
    ("tracks?after=1&after=2", "after"),
    ("tracks?limit=1e3", "limit"),
    ("tracks?limit=0", "limit"),
    ("events?after=2026-12-03T14:00:00%2B25:00", "after"),
    ("events?direction=in%27%20OR%201=1--", "direction"),
    ("counts?after=0&before=1e10", "after"),
    ("counts?bucket=minute&after=2026-11-01&before=2026-12-01", "after"),
    ("counts?group=camera;DROP%20TABLE%20counts", "group"),
    ("segments?limit=10001", "limit"),
    ("activity?bucket=%E2%80%AEday", "bucket"),
    ("tracks?camera=Door", "camera"),
]


@pytest.mark.parametrize("target,name", HOSTILE, ids=[f"{i}-{t.split('?')[0]}-{n}" for i, (t, n) in
                                                      enumerate(HOSTILE)])
def test_hostile_query_parameters_over_http_get_400_naming_them_and_touch_nothing(one_run, server, target, name):
    status, answer, head = ask(server, f"/api/store/{target}")
    assert status == 400 and set(answer) == {"error"}, (status, answer)
    assert answer["error"].startswith(f"{name}:") and "\n" not in answer["error"], answer
    assert b"X-Injected" not in head
    assert stored(one_run[0] / "store.db") == assert_rows_equal(one_run[0], one_run[0] / "store.db")


def test_a_query_by_class_zone_and_range_over_http_answers_the_tracks_the_json_lines_say(one_run, server):
    want = expected(one_run[0])
    in_court = {k for k in want["track_zones"] if k[3] == COURT["name"]}
    people = sorted(((t[1], k[1], k[2]) for k, t in want["tracks"].items()
                     if t[0] == "person" and (*k, COURT["name"]) in in_court), reverse=True)
    assert people
    first, last = people[-1][0], people[0][0]
    for after, before in ((first, first + 0.001), (first + 0.001, last + 1), (first - 60, first)):
        inside = [p for p in people if after <= p[0] < before]
        zone = urllib.parse.quote(COURT["name"])
        status, answer, _ = ask(server, f"/api/store/tracks?class=person&zone={zone}&after={after!r}&before={before!r}")
        assert status == 200 and answer["next"] is None, answer
        got = [(t["first_seen"], t["camera"], t["track"]) for t in answer["tracks"]]
        assert [g[0] for g in got] == [p[0] for p in inside] and set(got) == set(inside)  # newest first


def test_a_sub_second_segment_is_refused_in_one_line_naming_its_key(clips, model_path, tmp_path):
    cfg = config(clips, model_path)
    cfg["sources"][0]["record"]["segment_s"] = 0.5
    cfg["outputs"]["video"]["segment_s"] = 0.25
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "pipeline", "validate", "--config", str(tmp_path / "c.yaml")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "error: sources[0].record.segment_s: must be 0 (off) or >= 1, got 0.5",
        "error: outputs.video.segment_s: must be 0 (off) or >= 1, got 0.25"], r.stderr



def test_counts_and_segments_over_http_answer_what_the_json_lines_say(one_run, server):
    want = expected(one_run[0])
    minutes = [k[1] for k in want["counts"]]
    status, answer, _ = ask(server, f"/api/store/counts?bucket=minute&after={min(minutes)}&before={max(minutes) + 60}"
                                    "&group=camera,kind,name,class,direction")
    assert status == 200, answer
    got = {(s["camera"], t, s["kind"], s["name"], s["class"], s["direction"]): n
           for s in answer["series"] for t, n in s["points"]}
    assert got == want["counts"]
    for camera in ("door", "yard"):
        mine = {p: s for p, s in want["segments"].items() if s[0] == camera}
        start, end = min(s[1] for s in mine.values()), max(s[2] for s in mine.values())
        status, answer, _ = ask(server, f"/api/store/segments?camera={camera}&after={start!r}&before={end + 1!r}")
        assert status == 200 and answer["next"] is None, answer
        assert {s["path"]: (s["camera"], s["start"], s["end"], s["bytes"]) for s in answer["segments"]} == {
            p: s[:4] for p, s in mine.items()}


def test_a_postgresql_store_holds_the_json_lines_rows_as_sqlite_does(clips, model_path, tmp_path, postgres_url):
    import psycopg

    snap = run_into(tmp_path, config(clips, model_path, store={"url": postgres_url}))
    assert all(c.store_lost == 0 for c in snap.cameras.values())
    with psycopg.connect(postgres_url) as conn:
        have = assert_rows_equal(tmp_path / "out", conn)
    assert have["events"] and have["segments"]
    assert rebuild_to(tmp_path / "out", tmp_path / "rebuilt.db").returncode == 0
    assert stored(tmp_path / "rebuilt.db") == have


def files_named(db: Path) -> list[str]:
    """Every file the store's rows name."""
    return [p for table, column in (("segments", "path"), ("tracks", "snapshot"), ("tracks", "recording"),
                                    ("events", "snapshot"), ("events", "clip"), ("events", "recording"))
            for p, in sqlite3.connect(db).execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")]


def test_files_retention_removed_during_a_run_are_named_by_no_row_after_it(sample_path, model_path, tmp_path):
    cfg = config({"door": sample_path("bikes.mp4"), "yard": sample_path("vtest.mp4")}, model_path)
    cfg["sources"][1]["uri"] = cfg["sources"][0]["uri"]  # yard: the street too, recorded in 2 s files
    cfg["outputs"]["video"]["segment_s"] = 0  # one JSON lines file, written to the end: retention leaves it
    cfg["outputs"].update({"retain": {"max_gb": 0.001}})
    cfg["outputs"]["events"]["retain"] = {"max_gb": 0.0002}
    snap = run_into(tmp_path, cfg)
    out = tmp_path / "out"
    recorded = {r["recording"] for s in camera_sessions(out).values() for r in s[0] if r.get("recording")}
    assert snap.retention and [p for p in recorded if not (out / p).exists()], "retention removed no recording"
    named = files_named(out / "store.db")
    assert named and [p for p in named if not (out / p).exists()] == []
    assert rebuild_to(out, tmp_path / "rebuilt.db").returncode == 0
    assert stored(tmp_path / "rebuilt.db") == stored(out / "store.db")  # the rebuild, too, names no file gone


def test_a_line_named_with_a_comma_answers_its_crossings_by_name(one_run, server):
    """Several values of a parameter may be separated by commas; a name that holds one is
    still found whole."""
    crossed = Counter(e[6] for e in expected(one_run[0])["events"].elements() if e[3] == "cross")
    assert crossed, "no line was crossed"
    assert any("," in line for line in crossed), "the run has no line named with a comma"
    for line, n in crossed.items():
        status, answer, _ = ask(server, f"/api/store/events?event=cross&line={urllib.parse.quote(line)}")
        assert status == 200 and len(answer["events"]) == n, (line, status, answer)


def test_a_run_with_the_store_off_between_two_with_it_on_leaves_their_rows_to_the_rebuild(clips, model_path,
                                                                                          tmp_path):
    """The middle run (door on another clip) wrote no store rows but logs its clocks: a
    rebuild adds it, and gives the two runs the store holds their own rows (it gave the
    first run the middle run's tracks, the first run's lines an unlogged run)."""
    for store, door in ((True, clips["door"]), (False, clips["slow"]), (True, clips["door"])):
        run_into(tmp_path, config(dict(clips, door=door), model_path, store=store))
    live = stored(tmp_path / "out" / "store.db")
    assert len(live["runs"]) == 2
    r = rebuild_to(tmp_path / "out", tmp_path / "rebuilt.db")
    assert r.returncode == 0, r.stderr
    rebuilt = stored(tmp_path / "rebuilt.db")
    assert len(rebuilt["runs"]) == 3
    for run in live["runs"]:
        assert {k: v for k, v in rebuilt["tracks"].items() if k[0] == run} == {
            k: v for k, v in live["tracks"].items() if k[0] == run}, run
