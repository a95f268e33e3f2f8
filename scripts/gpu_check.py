"""GPU checks in one run (`make gpu-check`): on a CUDA machine, prove that both sessions
really run on CUDA, that CUDA detections match CPU detections on the sample clip, and
print throughput with and without IOBinding and CUDA graphs. Without CUDA it prints one
line and exits 0.

Exit status: 0 all checks passed (or skipped), 1 a check failed.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cuda_available(model: str) -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    ort.set_default_logger_severity(3)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    try:  # the list above lies on machines without a GPU: only a real session tells
        s = ort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    except Exception:
        return False
    return s.get_providers()[0] == "CUDAExecutionProvider"


def find(kind: str, name: str) -> str:
    for base in (ROOT / kind, ROOT.parent / "shared" / kind):
        if (base / name).is_file():
            return str(base / name)
    raise SystemExit(f"gpu-check: {kind}/{name} not found (run `pipeline models fetch`)")


def run(sources: list[dict], engine: dict, classify: bool, frames: int, out: str, batch_sizes=None) -> dict:
    from pipeline.config import parse_config
    from pipeline.graph import Pipeline

    det = {"path": find("models", "yolox_nano.onnx"), "layout": "yolox", "input_size": 416,
           "labels": str(ROOT / "models" / "coco_classes.txt"),
           "batching": {"max_batch": 8, "max_wait_ms": 5, **({"batch_sizes": batch_sizes} if batch_sizes else {})},
           "engine": engine}
    cls = {"path": find("models", "efficientnet_lite0.onnx"), "layout": "classifier", "input_size": 224,
           "color": "rgb", "mean": 127, "std": 128, "letterbox": "stretch",
           "labels": str(ROOT / "models" / "imagenet_labels.json"),
           "batching": {"max_batch": 32, "max_wait_ms": 5, **({"batch_sizes": [8, 16, 32]} if batch_sizes else {})},
           "engine": engine}
    graph = [{"detect": {"model": "det"}}]
    if classify:
        graph.append({"classify": {"model": "cls", "classes": ["car", "truck", "bus", "person"]}})
    cfg = parse_config({"sources": sources, "models": {"det": det, "cls": cls}, "graph": graph,
                        "outputs": {"dir": out, "video": {"enabled": False}}}, ROOT)
    p = Pipeline(cfg, max_frames=frames)
    t0 = time.perf_counter()
    p.start()
    p.wait()
    p.close()
    snap = p.snapshot()
    snap["wall_s"] = time.perf_counter() - t0
    snap["providers"] = {n: e.providers[0] for n, e in p.engines.items()}
    return snap


def detections(path: str) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def main() -> int:
    if not cuda_available(find("models", "yolox_nano.onnx")):
        print("no CUDA provider: skipped")
        return 0
    import numpy as np

    failures = []
    clip = find("samples", "bikes.mp4")
    tmp = tempfile.mkdtemp(prefix="gpu-check-")
    one = [{"id": "street", "uri": clip}]
    run(one, {"providers": ["cpu"]}, False, 200, f"{tmp}/cpu")
    gpu = run(one, {"providers": ["cuda", "cpu"]}, True, 200, f"{tmp}/gpu")
    for name, provider in gpu["providers"].items():
        ok = provider == "CUDAExecutionProvider"
        print(f"session {name}: {provider} {'ok' if ok else 'FAILED'}")
        if not ok:
            failures.append(f"{name} runs on {provider}")
    a, b = detections(f"{tmp}/cpu/detections.jsonl"), detections(f"{tmp}/gpu/detections.jsonl")
    worst, mismatched = 0.0, 0
    for ra, rb in zip(a, b):
        da, db = ra["detections"], rb["detections"]
        if [d["class"] for d in da] != [d["class"] for d in db]:
            mismatched += 1
            continue
        for x, y in zip(da, db):
            worst = max(worst, float(np.abs(np.array(x["box"]) - np.array(y["box"])).max()))
    print(f"CPU vs CUDA on {len(a)} frames: {mismatched} frame(s) with different classes, worst box delta {worst:.3f} px")
    if len(a) != len(b) or mismatched > 0.02 * len(a) or worst > 2.0:
        failures.append("CUDA detections differ from CPU")
    many = [{"id": f"cam{i}", "uri": clip} for i in range(16)]
    configs = [("cuda, plain run", {"providers": ["cuda"], "io_binding": False}, None),
               ("cuda, IOBinding", {"providers": ["cuda"], "io_binding": True}, None),
               ("cuda, IOBinding + CUDA graphs", {"providers": ["cuda"], "io_binding": True, "cuda_graph": True},
                [1, 2, 4, 8]),
               ("cuda, 4 in flight", {"providers": ["cuda"], "io_binding": True, "max_inflight": 4}, None)]
    print(f"{'configuration':<34}{'fps':>9}{'p50 ms':>9}{'p99 ms':>9}{'mean batch':>12}")
    for label, engine, sizes in configs:
        for classify in (False, True):
            try:
                snap = run(many, engine, classify, 250, f"{tmp}/{len(label)}{classify}", sizes)
            except Exception as e:
                failures.append(f"{label}: {e}")
                print(f"{label:<34} FAILED: {e}")
                continue
            lat = snap["latency"]
            print(f"{label + (' +cls' if classify else ''):<34}{snap['processed'] / snap['wall_s']:>9.1f}"
                  f"{lat['p50_ms']:>9}{lat['p99_ms']:>9}{snap['engines']['det']['mean_batch']:>12}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
