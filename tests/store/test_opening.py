"""The configured store as a run opens it (`open_store`): a damaged store rebuilt aside so
that a SIGKILL during the rebuild never leaves a half-built store taken for sound; a store
deleted beside a run log naming earlier runs rebuilt in one line; a store path that is a
folder refused in one line with exit status 2, by `run` and by `store check`."""
import glob
import json
import logging
import signal
import sqlite3
import subprocess
import sys
from collections import Counter

from conftest import ROOT, detector_model
from pipeline.config.outputs import JsonlOutputConfig, OutputsConfig
from pipeline.store.backend import open_sqlite
from pipeline.store.opening import open_store, store_writer
from pipeline.store.rebuild import rebuild
from test_writer import frame

# a start-up rebuild killed by SIGKILL as it writes its fifth batch of rows
KILLED_REBUILD = """
import os, signal, sys
from pipeline.config.outputs import JsonlOutputConfig, OutputsConfig
from pipeline.store import backend, rebuild
from pipeline.store.opening import open_store

rebuild.FLUSH_RECORDS = 100
written = []
write = backend.Backend.write
def write_then_die(self, rows):
    write(self, rows)
    written.append(1)
    if len(written) == 5:
        os.kill(os.getpid(), signal.SIGKILL)
backend.Backend.write = write_then_die
open_store(OutputsConfig(dir=sys.argv[1], jsonl=JsonlOutputConfig(filename="*.jsonl")))
"""


def outputs(folder) -> OutputsConfig:
    return OutputsConfig(dir=str(folder), jsonl=JsonlOutputConfig(filename="*.jsonl"))


def write_lines(folder, cameras: int, frames: int) -> list[dict]:
    """Each camera's JSON lines, a new track every third frame."""
    records = []
    for c in range(cameras):
        cam = f"cam{c}"
        lines = [frame(cam, seq, track=seq // 3) for seq in range(frames)]
        (folder / f"{cam}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        records += lines
    return records


def tracks(path) -> Counter:
    db = sqlite3.connect(path)
    try:
        return Counter(db.execute("SELECT camera, track, first_seen, last_seen FROM tracks").fetchall())
    finally:
        db.close()


def rebuilt_alone(folder, to) -> Counter:
    """The tracks a rebuild of the folder into a file of its own gives."""
    backend = open_sqlite(str(to))
    rebuild(outputs(folder), backend)
    backend.close()
    return tracks(to)


def test_a_start_up_rebuild_killed_midway_leaves_the_damaged_store_for_the_next_start_to_rebuild_whole(
        tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    write_lines(out, cameras=3, frames=400)
    damaged = b"not a database at all " * 200
    (out / "store.db").write_bytes(damaged)
    killed = subprocess.run([sys.executable, "-c", KILLED_REBUILD, str(out)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    want = rebuilt_alone(out, tmp_path / "alone.db")
    assert len(want) == 3 * 134
    with caplog.at_level(logging.WARNING, logger="pipeline.store"):
        open_store(outputs(out)).close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "the store is damaged" in said[0] and "moved aside" in said[0], said
    assert tracks(out / "store.db") == want
    (aside,) = glob.glob(str(out / "store.db.damaged-*[0-9]"))
    assert open(aside, "rb").read() == damaged
    assert not glob.glob(str(out / "store.db.rebuilding*"))


def test_a_store_deleted_beside_a_run_log_naming_its_runs_is_rebuilt_with_one_line(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    records = write_lines(out, cameras=2, frames=30)
    writer = store_writer(outputs(out), lambda cam, n: None, "configs")
    writer.start()
    for record in records:
        writer.offer(record)
    for cam in ("cam0", "cam1"):
        writer.camera_ended(cam)
    writer.close()
    held = tracks(out / "store.db")
    assert len(held) == 2 * 10
    for path in glob.glob(str(out / "store.db*")):
        if not path.endswith(".lock"):
            (tmp_path / "gone").mkdir(exist_ok=True)
            (out / path).rename(tmp_path / "gone" / (out / path).name)
    with caplog.at_level(logging.WARNING, logger="pipeline.store"):
        backend = open_store(outputs(out))
    runs = backend.conn.execute("SELECT config, host FROM runs").fetchall()
    backend.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "store.db: the store is missing though its run log names earlier runs" in said[0], said
    assert tracks(out / "store.db") == held
    assert [config for config, host in runs] == ["configs"] and runs[0][1]


def test_a_store_path_that_is_a_folder_is_one_line_and_exit_2_for_run_and_store_check(
        short_clips, model_path, write_config, tmp_path, pipeline_cmd):
    out = tmp_path / "out"
    (out / "store.db").mkdir(parents=True)
    config = write_config({"sources": [{"id": "gate", "uri": short_clips["bikes"]}],
                           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
                           "outputs": {"dir": str(out), "video": {"enabled": False}}})
    for command in (["run", "--config", config, "-q"], ["store", "check", "--config", config]):
        r = subprocess.run([*pipeline_cmd, *command], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, r.stderr[-2000:]
        said = [line for line in r.stderr.splitlines() if " INFO " not in line]  # the run's start-up notes aside
        assert said == [f"error: {out / 'store.db'}: the store is a folder, not a file"], r.stderr
    assert (out / "store.db").is_dir() and not glob.glob(str(out / "store.db.*[0-9]"))


def _open_when_all_are_ready(path: str, together, answers) -> None:
    together.wait()
    try:
        open_sqlite(path).conn.close()
        answers.put("opened")
    except Exception as e:
        answers.put(f"{type(e).__name__}: {e}")


def test_processes_opening_one_new_store_at_once_all_open_it(tmp_path):
    """The hosts of `run --processes N` open the run's new store together. Turning a new
    file to WAL is refused at once while another connection holds a lock on it (no busy
    wait): without waiting and trying again, one host in three failed to start."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    answers = []
    for trial in range(8):
        path = str(tmp_path / f"store{trial}.db")
        together, out = ctx.Barrier(4), ctx.Queue()
        openers = [ctx.Process(target=_open_when_all_are_ready, args=(path, together, out)) for _ in range(4)]
        for p in openers:
            p.start()
        answers += [out.get(timeout=60) for _ in openers]
        for p in openers:
            p.join(30)
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert Counter(answers) == Counter({"opened": 32})
