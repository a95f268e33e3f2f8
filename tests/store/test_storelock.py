"""The store file's own lock (`storelock`): a rebuild never replaces a store a live run
writes into, whichever folder or config names it (`--to`, two configs sharing one
absolute `outputs.store.path`); with no run, a rebuild from one folder never drops the
rows of another folder's runs that the store holds; a run does not open a store being
rebuilt."""
import glob
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import detector_model
from pipeline.store.opening import open_store
from pipeline.store.storelock import StoreLock
from pipeline.store.tables import StoreError
from test_opening import outputs, tracks, write_lines


def wait_for(condition, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def tracked(db) -> bool:
    """Whether the store being written holds a track yet (its tables may not exist yet)."""
    try:
        return bool(db.exists() and tracks(db))
    except sqlite3.OperationalError:
        return False


def store(pipeline_cmd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*pipeline_cmd, "store", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_a_store_a_live_run_writes_is_never_rebuilt_and_another_folders_rows_are_never_dropped(
        short_clips, model_path, write_config, tmp_path, pipeline_cmd):
    live, other = tmp_path / "live", tmp_path / "other"
    db = live / "store.db"
    other.mkdir()
    write_lines(other, cameras=1, frames=30)
    config = write_config({"sources": [{"id": "gate", "uri": short_clips["bikes"], "realtime": True, "loop": True}],
                           "models": {"det": detector_model(model_path, score_threshold=0.1)},
                           "graph": [{"detect": {"model": "det"}}, {"track": {}}],
                           "outputs": {"dir": str(live), "video": {"enabled": False}}})
    sharing = write_config({"sources": [{"id": "cam0", "uri": short_clips["vtest"]}],
                            "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
                            "outputs": {"dir": str(other), "jsonl": {"filename": "{camera}.jsonl"},
                                        "store": {"path": str(db)}}}, "sharing.yaml")
    run = subprocess.Popen([*pipeline_cmd, "run", "--config", config, "-q"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: run.poll() is not None or tracked(db))
        assert run.poll() is None, run.communicate()[1][-2000:]
        refused = [store(pipeline_cmd, "rebuild", "--dir", other, "--to", db),
                   store(pipeline_cmd, "rebuild", "--config", sharing)]
        assert run.poll() is None
    finally:
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-2000:]
    for r in refused:
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == [f"error: {db}: the store is in use by a run writing into it "
                                                 f"(pid {run.pid}); rebuild it once that run has ended"]
    assert not glob.glob(f"{db}.replaced-*")
    held = tracks(db)
    r = store(pipeline_cmd, "rebuild", "--config", sharing)  # no run now: the live folder's rows are still kept
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"{db}: holds 1 run(s) with rows that {other}'s run log does not name" in r.stderr
    assert tracks(db) == held and not glob.glob(f"{db}.replaced-*")
    r = store(pipeline_cmd, "rebuild", "--dir", live)  # its own folder's runs: rebuilt
    assert r.returncode == 0, r.stderr
    assert tracks(db) == held and glob.glob(f"{db}.replaced-*")


def test_a_run_does_not_open_a_store_being_rebuilt(tmp_path):
    write_lines(tmp_path, cameras=1, frames=9)
    rebuilding = StoreLock(str(tmp_path / "store.db"))
    rebuilding.take(exclusive=True)
    try:
        with pytest.raises(StoreError) as e:
            open_store(outputs(tmp_path))
    finally:
        rebuilding.release()
    assert e.value.problems[0].startswith(f"{tmp_path / 'store.db'}: the store is being rebuilt")
    assert not (tmp_path / "store.db").exists()
    open_store(outputs(tmp_path)).close()


def test_a_store_reached_through_a_link_is_locked_as_the_store_and_a_rebuild_replaces_the_file_not_the_link(
        pipeline_cmd, tmp_path):
    """A `--to` naming a link to a store a run writes was not refused (the lock taken was
    the link's own), and the link itself was moved aside in its file's place."""
    folder = tmp_path / "run"
    folder.mkdir()
    write_lines(folder, cameras=1, frames=9)
    real = tmp_path / "kept" / "store.db"
    real.parent.mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    writing = StoreLock(str(real))
    writing.take(exclusive=False)
    try:
        r = store(pipeline_cmd, "rebuild", "--dir", folder, "--to", link)
        assert r.returncode == 2 and "in use by a run writing into it" in r.stderr, r.stderr
    finally:
        writing.release()
    r = store(pipeline_cmd, "rebuild", "--dir", folder, "--to", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.path.samefile(link, real)
    assert sqlite3.connect(real).execute("SELECT count(*) FROM runs").fetchone()[0] >= 1


def test_stores_moved_aside_in_one_second_each_keep_a_name_of_their_own(tmp_path):
    """Two rebuilds in the same second: the second store moved aside took the first one's
    name and wrote over it (the store before both was gone)."""
    from pipeline.store.opening import move_aside

    path = tmp_path / "store.db"
    kept = []
    for content in (b"first", b"second", b"third"):
        path.write_bytes(content)
        kept.append(move_aside(str(path), "replaced"))
    assert len(set(kept)) == 3
    assert [open(k, "rb").read() for k in kept] == [b"first", b"second", b"third"]


def test_a_rebuild_of_a_config_whose_folder_does_not_exist_is_one_line(pipeline_cmd, short_clips, model_path,
                                                                       write_config, tmp_path):
    """It was a FileNotFoundError traceback (taking the folder's lock), exit 1."""
    config = write_config({"sources": [{"id": "cam0", "uri": short_clips["vtest"]}],
                           "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
                           "outputs": {"dir": str(tmp_path / "nowhere")}})
    r = store(pipeline_cmd, "rebuild", "--config", config)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: outputs.dir: {tmp_path / 'nowhere'}: no such folder "
                                             "(nothing to rebuild from)"]
