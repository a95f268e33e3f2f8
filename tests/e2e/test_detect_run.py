"""End-to-end runs on real clips with the real detector: outputs, correctness, batching."""
from __future__ import annotations

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from conftest import detector_model, frame_count, read_jsonl, run_pipeline, video_frames
from onnx_models import make_fixed_batch


def reference_detections(session: ort.InferenceSession, image: np.ndarray, labels: list[str]) -> list[tuple]:
    """The straightforward recipe from the model's documentation, written independently."""
    h, w = image.shape[:2]
    r = min(416 / h, 416 / w)
    canvas = np.full((416, 416, 3), 114, np.uint8)
    canvas[: int(h * r), : int(w * r)] = cv2.resize(image, (int(w * r), int(h * r)), interpolation=cv2.INTER_LINEAR)
    out = session.run(None, {"images": canvas.transpose(2, 0, 1)[None].astype(np.float32)})[0][0]
    rows = []
    for stride in (8, 16, 32):
        n = 416 // stride
        for gy in range(n):
            for gx in range(n):
                rows.append((gx, gy, stride))
    grid = np.array(rows, np.float32)
    cx = (out[:, 0] + grid[:, 0]) * grid[:, 2]
    cy = (out[:, 1] + grid[:, 1]) * grid[:, 2]
    bw, bh = np.exp(out[:, 2]) * grid[:, 2], np.exp(out[:, 3]) * grid[:, 2]
    cls = out[:, 5:].argmax(1)
    score = out[:, 4] * out[np.arange(len(out)), 5 + cls]
    keep = score >= 0.3
    boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)[keep] / r
    score, cls = score[keep], cls[keep]
    result = []
    for c in np.unique(cls):
        idx = list(np.where(cls == c)[0][np.argsort(-score[cls == c])])
        while idx:
            i = idx.pop(0)
            result.append((labels[c], float(score[i]), boxes[i]))
            rest = []
            for j in idx:
                xx1, yy1 = max(boxes[i][0], boxes[j][0]), max(boxes[i][1], boxes[j][1])
                xx2, yy2 = min(boxes[i][2], boxes[j][2]), min(boxes[i][3], boxes[j][3])
                inter = max(0, xx2 - xx1) * max(0, yy2 - yy1)
                a = (boxes[i][2] - boxes[i][0]) * (boxes[i][3] - boxes[i][1])
                b = (boxes[j][2] - boxes[j][0]) * (boxes[j][3] - boxes[j][1])
                if inter / (a + b - inter) <= 0.45:
                    rest.append(j)
            idx = rest
    return result


def assert_same_detections(got: list[dict], want: list[tuple], atol: float) -> None:
    assert len(got) == len(want), (got, want)
    for name, score, box in want:
        match = [d for d in got if d["class"] == name and np.abs(np.array(d["box"]) - np.clip(box, 0, None)).max() <= atol]
        assert match, f"no {name} box near {box.round(1).tolist()} (score {score:.2f}) in {got}"


def by_camera(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["camera"], []).append(r)
    return out


@pytest.fixture(scope="module")
def two_camera_run(tmp_path_factory, short_clips, model_path):
    import yaml

    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    d = tmp_path_factory.mktemp("run")
    cfg = {"sources": [{"id": "campus", "uri": short_clips["vtest"]}, {"id": "street", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"],
           "outputs": {"dir": str(d / "out")}}
    (d / "c.yaml").write_text(yaml.safe_dump(cfg))
    p = Pipeline(load_config(d / "c.yaml"))
    p.start()
    assert p.wait(300)
    p.close()
    return d / "out", p.snapshot()


def test_one_playable_mp4_per_camera_with_every_frame(two_camera_run, short_clips):
    out, snap = two_camera_run
    for cam, clip in (("campus", "vtest"), ("street", "bikes")):
        assert frame_count(str(out / f"{cam}.mp4")) == frame_count(short_clips[clip])
        assert snap.cameras[cam].processed == frame_count(short_clips[clip])
        assert snap.cameras[cam].state == "ended"


def test_output_timing_follows_the_source(two_camera_run, short_clips):
    import av

    out, _ = two_camera_run
    with av.open(str(out / "street.mp4")) as a, av.open(short_clips["bikes"]) as b:
        sa, sb = a.streams.video[0], b.streams.video[0]
        assert sa.average_rate == sb.average_rate
        ta = [float(f.pts * sa.time_base) for f in a.decode(sa)]
        tb = [float(f.pts * sb.time_base) for f in b.decode(sb)]
    np.testing.assert_allclose(np.array(ta) - ta[0], np.array(tb) - tb[0], atol=1e-3)


def test_jsonl_lists_people_on_most_campus_frames(two_camera_run):
    out, _ = two_camera_run
    campus = by_camera(read_jsonl(str(out / "detections.jsonl")))["campus"]
    assert [r["seq"] for r in campus] == list(range(len(campus)))
    with_person = sum(any(d["class"] == "person" for d in r["detections"]) for r in campus)
    assert with_person >= 0.9 * len(campus)


def test_boxes_equal_a_straightforward_reference_within_a_pixel(two_camera_run, short_clips, model_path, coco_labels):
    out, _ = two_camera_run
    records = by_camera(read_jsonl(str(out / "detections.jsonl")))
    session = ort.InferenceSession(model_path("yolox_nano.onnx"), providers=["CPUExecutionProvider"])
    for cam, clip in (("campus", "vtest"), ("street", "bikes")):
        frames = video_frames(short_clips[clip])
        for seq in (0, 17, len(frames) - 1):
            assert_same_detections(records[cam][seq]["detections"],
                                   reference_detections(session, frames[seq], coco_labels), atol=1.0)


def test_annotations_are_drawn_on_the_video(two_camera_run, short_clips):
    out, _ = two_camera_run
    drawn = video_frames(str(out / "campus.mp4"))[5].astype(int)
    raw = video_frames(short_clips["vtest"])[5].astype(int)
    assert np.abs(drawn - raw).max() > 100  # boxes and labels, not just re-encoding noise


def test_v8_layout_model_gives_the_same_detections(tmp_path, short_clips, model_path, write_config):
    runs = {}
    for layout in ("yolox", "yolov8"):
        cfg = {"sources": [{"id": "campus", "uri": short_clips["vtest"]}],
               "models": {"det": detector_model(model_path, layout)},
               "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
        run_pipeline(cfg, write_config, str(tmp_path / layout), max_frames=12)
        runs[layout] = read_jsonl(str(tmp_path / layout / "detections.jsonl"))
    assert len(runs["yolox"]) == len(runs["yolov8"]) == 12
    for a, b in zip(runs["yolox"], runs["yolov8"]):
        assert len(a["detections"]) == len(b["detections"]) and a["detections"]
        for da, db in zip(a["detections"], b["detections"]):
            assert da["class"] == db["class"]
            assert np.abs(np.array(da["box"]) - np.array(db["box"])).max() <= 0.5
            assert abs(da["score"] - db["score"]) <= 1e-3


def four_cameras(short_clips) -> list[dict]:
    return [{"id": f"cam{i}", "uri": short_clips["vtest" if i % 2 == 0 else "bikes"]} for i in range(4)]


def test_batching_across_four_cameras_equals_unbatched_runs(tmp_path, short_clips, model_path, write_config):
    results = {}
    for name, max_batch in (("unbatched", 1), ("batched", 8)):
        cfg = {"sources": four_cameras(short_clips),
               "models": {"det": detector_model(model_path, batching={"max_batch": max_batch, "max_wait_ms": 50,
                                                                     "preferred": max_batch})},
               "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
        snap = run_pipeline(cfg, write_config, str(tmp_path / name), max_frames=20)
        results[name] = by_camera(read_jsonl(str(tmp_path / name / "detections.jsonl")))
        if max_batch > 1:
            assert snap.engines["det"].mean_batch > 1.5  # batches really mixed cameras
    for cam in results["unbatched"]:
        for a, b in zip(results["unbatched"][cam], results["batched"][cam]):
            assert [d["class"] for d in a["detections"]] == [d["class"] for d in b["detections"]]
            for da, db in zip(a["detections"], b["detections"]):
                assert np.abs(np.array(da["box"]) - np.array(db["box"])).max() <= 1e-2  # JSON keeps 2 decimals


def test_many_batches_in_flight_keep_every_camera_in_order(tmp_path, short_clips, model_path, write_config):
    cfg = {"sources": four_cameras(short_clips),
           "models": {"det": detector_model(model_path, batching={"max_batch": 2, "max_wait_ms": 1},
                                            engine={"max_inflight": 4, "workers": 4})},
           "graph": [{"detect": {"model": "det"}}, "annotate"]}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    assert snap.engines["det"].max_inflight_seen >= 2
    records = by_camera(read_jsonl(str(tmp_path / "out" / "detections.jsonl")))
    for i in range(4):
        clip = short_clips["vtest" if i % 2 == 0 else "bikes"]
        n = frame_count(clip)
        assert [r["seq"] for r in records[f"cam{i}"]] == list(range(n))
        assert frame_count(str(tmp_path / "out" / f"cam{i}.mp4")) == n


def test_a_batch_one_model_runs_through_the_batcher_unchanged(tmp_path, short_clips, model_path, write_config):
    fixed = make_fixed_batch(model_path("yolox_nano.onnx"), str(tmp_path / "b1.onnx"))
    results = {}
    for name, path in (("dynamic", model_path("yolox_nano.onnx")), ("fixed", fixed)):
        cfg = {"sources": four_cameras(short_clips)[:2],
               "models": {"det": detector_model(model_path, path=path)},
               "graph": [{"detect": {"model": "det"}}], "outputs": {"video": {"enabled": False}}}
        run_pipeline(cfg, write_config, str(tmp_path / name), max_frames=10)
        results[name] = sorted(read_jsonl(str(tmp_path / name / "detections.jsonl")),
                               key=lambda r: (r["camera"], r["seq"]))
    assert len(results["fixed"]) == 20
    assert [r["detections"] for r in results["fixed"]] == [r["detections"] for r in results["dynamic"]]


def test_thread_count_stays_within_the_printed_plan(tmp_path, short_clips, model_path, write_config):
    from pipeline.config import load_config
    from pipeline.graph import Pipeline
    from pipeline.metrics.registry import thread_count

    cfg = {"sources": four_cameras(short_clips), "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"], "outputs": {"dir": str(tmp_path / "out")}}
    p = Pipeline(load_config(write_config(cfg)))
    peak = 0
    p.start()
    while not p.wait(0.02):
        peak = max(peak, thread_count())
    p.close()
    assert peak > p.plan.base_threads + 4  # we did sample a running graph
    assert peak <= p.plan.total, p.plan.describe()


def test_a_cuda_config_runs_on_a_cpu_machine_with_the_cpu_thread_plan(tmp_path, short_clips, model_path,
                                                                       write_config):
    """The same config serves a GPU server and a laptop: the plan follows the provider the
    session really got, not the one asked for."""
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    cfg = {"sources": four_cameras(short_clips)[:2],
           "models": {"det": detector_model(model_path, engine={"providers": ["cuda", "cpu"]})},
           "graph": [{"detect": {"model": "det"}}], "outputs": {"dir": str(tmp_path / "out")}}
    p = Pipeline(load_config(write_config(cfg)))
    try:
        provider = p.engines["det"].providers[0]
        if provider != "CPUExecutionProvider":
            pytest.skip("this machine has a GPU provider")
        assert p.plan.engines["det"].shared and p.plan.engines["det"].workers == p.plan.cores
    finally:
        p.close()


@pytest.mark.parametrize("codec,fmt,pix,size", [("mjpeg", "avi", "yuvj444p", (321, 241)),
                                                ("libvpx-vp9", "webm", "yuv420p", (322, 242))])
def test_other_containers_codecs_and_odd_sizes(tmp_path, short_clips, model_path, write_config, codec, fmt, pix,
                                               size):
    """Any container/codec FFmpeg reads; odd frame sizes are padded by one pixel for H.264."""
    import av

    src = video_frames(short_clips["vtest"])[:10]
    path = str(tmp_path / f"clip.{fmt}")
    w, h = size
    with av.open(path, "w", format=fmt) as out:
        s = out.add_stream(codec, rate=10)
        s.width, s.height, s.pix_fmt = w, h, pix
        for i, img in enumerate(src):
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(img[:h, :w]), format="bgr24").reformat(format=pix)
            vf.pts = i
            for p in s.encode(vf):
                out.mux(p)
        for p in s.encode(None):
            out.mux(p)
    cfg = {"sources": [{"id": "odd", "uri": path}], "models": {"det": detector_model(model_path)},
           "graph": [{"detect": {"model": "det"}}, "annotate"]}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    assert snap.cameras["odd"].processed == 10 and snap.cameras["odd"].errors == 0
    with av.open(str(tmp_path / "out" / "odd.mp4")) as c:
        v = c.streams.video[0]
        assert (v.width, v.height) == (w + w % 2, h + h % 2)
    assert frame_count(str(tmp_path / "out" / "odd.mp4")) == 10
    records = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    assert any(d["class"] == "person" for r in records for d in r["detections"])
    assert all(d["box"][2] <= w and d["box"][3] <= h for r in records for d in r["detections"])
