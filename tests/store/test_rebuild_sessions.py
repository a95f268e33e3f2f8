"""A rebuild places each camera's lines in the run and on the clock the live writer had:
runs and returns told apart by the frame numbers starting again, matched to the run log."""
import json
import time
from collections import Counter

from pipeline.config.outputs import JsonlOutputConfig, OutputsConfig
from pipeline.store.backend import open_sqlite
from pipeline.store.rebuild import rebuild
from pipeline.store.writer import StoreWriter
from test_rebuild import dump
from test_writer import frame


def live_run(folder, sessions: list[list[dict]]) -> None:
    """One run of the live writer: each session of records, the camera ending after each;
    the records also go to the JSON lines, as the sink writes them."""
    w = StoreWriter(lambda: open_sqlite(str(folder / "store.db")), str(folder), lambda cam, n: None, flush_s=0.05)
    w.start()
    with open(folder / "detections.jsonl", "a") as f:
        for records in sessions:
            for r in records:
                f.write(json.dumps(r) + "\n")
                w.offer(r)
            w.camera_ended(records[0]["camera"])
            time.sleep(0.1)  # the returning camera's clock starts later
    w.close()


def test_two_runs_and_a_camera_returning_within_one_are_rebuilt_as_the_live_writer_wrote_them(tmp_path):
    crossing = {"event": "cross", "track": 1, "class": "person", "line": "door", "direction": "in"}
    first = [frame("gate", s, track=1, events=[crossing] if s == 2 else []) for s in range(4)]
    back = [frame("gate", s, track=1 + s // 2) for s in range(3)]  # numbered from 0 again, track 1 again
    live_run(tmp_path, [first, back])
    live_run(tmp_path, [[frame("gate", s, track=7) for s in range(2)], [frame("yard", s, track=1) for s in range(2)]])
    live = dump(tmp_path / "store.db")
    assert len(live["runs"]) == 2 and Counter(t[0] for t in live["tracks"]) == {1: 2, 2: 2}
    backend = open_sqlite(str(tmp_path / "rebuilt.db"))
    rebuild(OutputsConfig(dir=str(tmp_path), jsonl=JsonlOutputConfig(filename="detections.jsonl")), backend)
    backend.close()
    assert dump(tmp_path / "rebuilt.db") == live
