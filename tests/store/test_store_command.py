"""`pipeline store rebuild | check` from the command line: a folder's JSON lines (even a
run's made before the store existed) become a store, the old one kept aside; a folder a run
writes is refused; a damaged store is named with exit 1."""
import glob
import json
import os
import sqlite3
import subprocess

from pipeline.runloop import OutputLock
from test_writer import frame


def store(pipeline_cmd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*pipeline_cmd, "store", *map(str, args)], capture_output=True, text=True, timeout=120)


def jsonl_folder(tmp_path):
    """A folder with a camera's JSON lines and no run log: a run made before the store existed."""
    lines = [frame("gate", seq, track=seq // 3) for seq in range(9)]
    (tmp_path / "detections.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + "{torn line\n")
    return tmp_path


def test_a_folder_without_a_store_gets_one_and_a_rebuild_keeps_the_old_one_aside(pipeline_cmd, tmp_path):
    folder = jsonl_folder(tmp_path)
    r = store(pipeline_cmd, "rebuild", "--dir", folder)
    assert r.returncode == 0, r.stderr
    assert "1 run(s), 9 frame(s), 1 line(s) that are not frames skipped" in r.stdout
    first = sqlite3.connect(folder / "store.db").execute("SELECT track, first_seen FROM tracks ORDER BY 1").fetchall()
    assert [t for t, _ in first] == [0, 1, 2]
    mtime = os.stat(folder / "detections.jsonl").st_mtime
    assert first[0][1] == mtime - 0.8  # the last frame (0.8 s) at the file's modification time
    r = store(pipeline_cmd, "rebuild", "--dir", folder)
    assert r.returncode == 0 and "the store before kept as" in r.stdout
    (kept,) = glob.glob(str(folder / "store.db.replaced-*[0-9]"))  # its WAL beside it, if any
    assert sqlite3.connect(kept).execute("SELECT count(*) FROM tracks").fetchone() == (3,)
    r = store(pipeline_cmd, "check", "--dir", folder)
    assert r.returncode == 0 and "ok (runs 1, tracks 3," in r.stdout


def test_a_folder_a_run_writes_is_refused(pipeline_cmd, tmp_path):
    folder = jsonl_folder(tmp_path)
    with OutputLock(str(folder)):
        r = store(pipeline_cmd, "rebuild", "--dir", folder)
    assert r.returncode == 2 and "in use by another run" in r.stderr
    assert not (folder / "store.db").exists()


def test_bad_folders_and_damaged_stores_are_one_line(pipeline_cmd, tmp_path):
    r = store(pipeline_cmd, "rebuild", "--dir", tmp_path / "nowhere")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: --dir: {tmp_path / 'nowhere'}: no such folder"]
    r = store(pipeline_cmd, "rebuild", "--dir", tmp_path)
    assert r.returncode == 2 and "no JSON lines to rebuild from" in r.stderr
    (tmp_path / "store.db").write_bytes(b"garbage" * 1000)
    r = store(pipeline_cmd, "check", "--dir", tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert f"{tmp_path / 'store.db'}: the store is damaged" in r.stderr
