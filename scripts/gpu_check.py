"""GPU checks in one run (`make gpu-check`), within 8 minutes, one table, and the figures
in `bench/gpu/results.json`:

1. what the run needs is here: onnxruntime, PyAV, the models and the sample clip (the GPU
   machine has neither onnxruntime-gpu nor PyAV: they are carried as wheels);
2. CUDA loads: where a GPU is present (`nvidia-smi`) or the GPU wheel is installed but
   CUDA does not load, the check fails with ORT's own reason; with neither it prints
   `no CUDA provider: skipped` and exits 0;
3. every configuration (plain run, IOBinding, IOBinding + CUDA graphs) runs on CUDA, each
   camera without errors, graphs really replayed where asked, and its boxes equal the
   CPU's on the same frames;
4. the synchronous loop on CUDA against the pipeline at 16 cameras, and how many 25 fps
   live cameras the pipeline keeps with < 1% dropped and P99 < 200 ms.

Exit status: 0 passed (or skipped), 1 a check failed.
`PIPELINE_GPU_CHECK_PROVIDERS` (comma-separated) replaces the provider list ORT reports:
the tests use it to play a GPU wheel on a machine without CUDA.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "gpu" / "results.json"
RUN_TIMEOUT_S = 90.0       # one configuration
CAPACITY_SECONDS = 10.0    # each level of the live-camera search
MODELS = ("yolox_nano.onnx", "efficientnet_lite0.onnx")
CLIP = "bikes.mp4"         # 25 fps


def find(kind: str, name: str) -> Path | None:
    for base in (ROOT / kind, ROOT.parent / "shared" / kind):
        if (base / name).is_file():
            return base / name
    return None


def missing_pieces() -> list[str]:
    """What the checks need and this machine lacks, each with how to bring it."""
    missing = []
    for module, how in (("onnxruntime", "the onnxruntime-gpu wheel (../shared/tools/device-wheels)"),
                        ("av", "the PyAV wheel (../shared/tools/device-wheels)")):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"python module {module}: carry {how}")
    missing += [f"models/{m}: run `pipeline models fetch` here and carry models/" for m in MODELS
                if find("models", m) is None]
    if find("samples", CLIP) is None:
        missing.append(f"samples/{CLIP}: carry samples/")
    return missing


def gpu_present() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0


def listed_providers() -> list[str]:
    forced = os.environ.get("PIPELINE_GPU_CHECK_PROVIDERS")
    if forced:
        return [p.strip() for p in forced.split(",") if p.strip()]
    import onnxruntime as ort

    return ort.get_available_providers()


@contextlib.contextmanager
def stderr_captured(lines: list[str]):
    """ORT's own messages (C++ logging on fd 2, Python warnings) while the block runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines += [line.strip() for line in tmp.read().splitlines() if line.strip()]
            lines += [str(w.message) for w in caught]


def cuda_status(model: Path) -> tuple[str, str]:
    """("ok", ""), ("absent", why): no GPU and no GPU wheel, or ("broken", ORT's reason)."""
    import onnxruntime as ort

    wheel = "CUDAExecutionProvider" in listed_providers()
    if not wheel and not gpu_present():
        return "absent", "no CUDA provider"
    said: list[str] = []
    with stderr_captured(said):
        ort.set_default_logger_severity(2)  # warnings and errors: why a provider did not load
        try:
            if hasattr(ort, "preload_dlls"):  # cuDNN, cuBLAS... installed as pip packages
                ort.preload_dlls()
            got = ort.InferenceSession(str(model), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                                       ).get_providers()[0]
        except Exception as e:
            said.append(f"{type(e).__name__}: {e}")
            got = "none"
        finally:
            ort.set_default_logger_severity(4)
    if got == "CUDAExecutionProvider":
        return "ok", ""
    reasons = [s for s in said if any(k in s.lower() for k in ("cuda", "provider", "fail", "error", ".so"))]
    where = "a GPU is present" if gpu_present() else "the GPU wheel is installed"
    return "broken", f"{where} but CUDA does not load: " + (" | ".join(reasons[-4:]) or f"the session got {got}")


def config(sources: list[dict], engine: dict, classify: bool, out: str, batch_sizes: list[int] | None = None):
    from pipeline.config import parse_config

    sizes = {"batch_sizes": batch_sizes} if batch_sizes else {}
    det = {"path": str(find("models", MODELS[0])), "layout": "yolox", "input_size": 416,
           "labels": str(ROOT / "models" / "coco_classes.txt"),
           "batching": {"max_batch": 8, "max_wait_ms": 5, **sizes}, "engine": engine}
    cls = {"path": str(find("models", MODELS[1])), "layout": "classifier", "input_size": 224, "color": "rgb",
           "mean": 127, "std": 128, "letterbox": "stretch", "labels": str(ROOT / "models" / "imagenet_labels.json"),
           "batching": {"max_batch": 32, "max_wait_ms": 5, **({"batch_sizes": [8, 16, 32]} if sizes else {})},
           "engine": engine}
    graph: list = [{"detect": {"model": "det"}}]
    if classify:
        graph.append({"classify": {"model": "cls", "classes": ["car", "truck", "bus", "person"]}})
    return parse_config({"sources": sources, "models": {"det": det, "cls": cls}, "graph": graph,
                         "outputs": {"dir": out}}, ROOT)


def run_files(cfg, frames: int) -> dict:
    """A run to the end (at most RUN_TIMEOUT_S) with what the checks look at."""
    from pipeline.graph import Pipeline

    p = Pipeline(cfg, max_frames=frames)
    t0 = time.perf_counter()
    p.start()
    finished = p.wait(RUN_TIMEOUT_S)
    if not finished:
        p.stop(abort=True)
    wall = time.perf_counter() - t0
    p.close(timeout=20)
    snap = p.snapshot()
    graphs = {n: len(e.binder.graphs) for n, e in p.engines.items()
              if getattr(getattr(e, "binder", None), "graphs", None) is not None}
    return {"finished": finished, "fps": round(snap.processed / wall, 1), "latency": asdict(snap.latency),
            "providers": {n: e.providers[0] for n, e in p.engines.items()}, "graphs": graphs,
            "errors": {c: v.errors for c, v in snap.cameras.items() if v.errors},
            "mean_batch": snap.engines["det"].mean_batch}


def boxes(path: Path) -> list[list[tuple[str, list[float]]]]:
    with open(path) as f:
        return [[(d["class"], d["box"]) for d in json.loads(line)["detections"]] for line in f]


def compare(cpu: list, gpu: list) -> tuple[int, float]:
    """Frames whose classes differ, and the worst box difference (pixels) on the others."""
    import numpy as np

    mismatched, worst = abs(len(cpu) - len(gpu)), 0.0
    for a, b in zip(cpu, gpu):
        if [c for c, _ in a] != [c for c, _ in b]:
            mismatched += 1
            continue
        for (_, x), (_, y) in zip(a, b):
            worst = max(worst, float(np.abs(np.array(x) - np.array(y)).max()))
    return mismatched, worst


def timed_out(fn, *args) -> tuple[dict | None, str]:
    """`fn(*args)` in a thread, given at most RUN_TIMEOUT_S."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn(*args)
        except Exception as e:  # reported as this configuration's failure
            box["error"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(RUN_TIMEOUT_S)
    if t.is_alive():
        return None, f"no result within {RUN_TIMEOUT_S:g}s"
    return box.get("result"), box.get("error", "")


CONFIGS = [("plain run", {"providers": ["cuda"], "io_binding": False}, None),
           ("IOBinding", {"providers": ["cuda"], "io_binding": True}, None),
           ("IOBinding + CUDA graphs", {"providers": ["cuda"], "io_binding": True, "cuda_graph": True, "workers": 1},
            [1, 2, 4, 8])]


def correctness(tmp: str, clip: str, failures: list[str], table: list[list]) -> dict:
    """Every configuration on one camera: CUDA everywhere, no camera errors, graphs where
    asked, boxes equal to the CPU's."""
    one = [{"id": "street", "uri": clip}]
    run_files(config(one, {"providers": ["cpu"]}, False, f"{tmp}/cpu"), 250)
    reference = boxes(Path(tmp, "cpu", "detections.jsonl"))
    out = {}
    for i, (label, engine, sizes) in enumerate(CONFIGS):
        r, error = timed_out(run_files, config(one, engine, False, f"{tmp}/check{i}", sizes), 250)
        if r is None:
            failures.append(f"{label}: {error}")
            continue
        r["mismatched_frames"], r["worst_box_px"] = compare(reference, boxes(Path(tmp, f"check{i}", "detections.jsonl")))
        problems = [f"{n} ran on {p}" for n, p in r["providers"].items() if p != "CUDAExecutionProvider"]
        problems += [f"camera errors {r['errors']}"] if r["errors"] else []
        problems += ["no CUDA graph replayed"] if engine.get("cuda_graph") and not any(r["graphs"].values()) else []
        problems += [f"boxes differ from CPU ({r['mismatched_frames']} frames, worst {r['worst_box_px']:.2f} px)"] \
            if r["mismatched_frames"] > 0.02 * len(reference) or r["worst_box_px"] > 2.0 else []
        failures += [f"{label}: {p}" for p in problems]
        table.append([f"{label}: CPU == CUDA", "ok" if not problems else "FAILED", r["fps"], "", "",
                      f"{r['mismatched_frames']} frames differ, worst {r['worst_box_px']:.2f} px"])
        out[label] = r
    return out


def throughput(tmp: str, clip: str, failures: list[str], table: list[list]) -> dict:
    """16 cameras: the synchronous loop on CUDA against the pipeline, with and without the classifier."""
    from pipeline.bench.baseline import run_baseline

    many = [{"id": f"cam{i}", "uri": clip} for i in range(16)]
    out = {}
    for classify in (False, True):
        suffix = " + classifier" if classify else ""
        cfg = config(many, {"providers": ["cuda"], "io_binding": True}, classify, f"{tmp}/loop{classify}")
        loop, error = timed_out(run_baseline, cfg, 250, True)
        if loop is None:
            failures.append(f"sync CUDA loop{suffix}: {error}")
        else:
            table.append([f"sync loop on CUDA, 16 cameras{suffix}", "", loop["throughput_fps"],
                          loop["latency"]["p50_ms"], loop["latency"]["p99_ms"], ""])
        for label, engine, sizes in CONFIGS[1:]:
            r, error = timed_out(run_files, config(many, engine, classify, f"{tmp}/t{len(out)}", sizes), 250)
            if r is None:
                failures.append(f"{label}{suffix}, 16 cameras: {error}")
                continue
            lat = r["latency"]
            ratio = f"{r['fps'] / loop['throughput_fps']:.2f}x the loop" if loop else ""
            table.append([f"pipeline {label}, 16 cameras{suffix}", "", r["fps"], lat["p50_ms"], lat["p99_ms"],
                          f"mean batch {r['mean_batch']}; {ratio}"])
            out[f"{label}{suffix}"] = {"pipeline": r, "loop": loop}
    return out


def capacity(clip: str, table: list[list]) -> dict:
    """The most 25 fps live cameras the pipeline keeps with < 1% dropped and P99 < 200 ms."""
    from pipeline.bench.runner import run_pipeline, with_cameras

    base = config([{"id": "cam", "uri": clip}], {"providers": ["cuda"], "io_binding": True}, False,
                  tempfile.mkdtemp(prefix="gpu-live-"))
    levels, kept = {}, 0
    for n in (16, 32, 64, 128, 256):
        r = run_pipeline(with_cameras(base, n, live=True), 0, live=True, seconds=CAPACITY_SECONDS)
        lost = r["dropped"] / max(1, r["processed"] + r["dropped"])
        p99 = r["latency"]["p99_ms"]
        ok = lost < 0.01 and p99 is not None and p99 < 200
        levels[n] = {"fps": r["throughput_fps"], "lost": round(lost, 4), "p99_ms": p99, "ok": ok}
        table.append([f"live: {n} cameras x 25 fps", "ok" if ok else "over", r["throughput_fps"],
                      r["latency"]["p50_ms"], p99, f"{100 * lost:.2f}% dropped"])
        if not ok:
            break
        kept = n
    return {"kept_cameras": kept, "levels": levels}


def print_table(rows: list[list]) -> None:
    print(f"{'check':<52}{'result':>8}{'fps':>9}{'p50 ms':>9}{'p99 ms':>9}  notes")
    for name, result, fps, p50, p99, notes in rows:
        fmt = lambda v: "-" if v in ("", None) else f"{v:.1f}" if isinstance(v, float) else str(v)  # noqa: E731
        print(f"{name:<52}{result:>8}{fmt(fps):>9}{fmt(p50):>9}{fmt(p99):>9}  {notes}")


def main() -> int:
    missing = missing_pieces()
    if missing:
        for m in missing:
            print(f"gpu-check: missing {m}")
        return 1
    status, why = cuda_status(find("models", MODELS[0]))  # type: ignore[arg-type]
    if status == "absent":
        print(f"{why}: skipped")
        return 0
    if status == "broken":
        print(f"FAILED: {why}")
        return 1
    import onnxruntime as ort

    clip, tmp = str(find("samples", CLIP)), tempfile.mkdtemp(prefix="gpu-check-")
    failures: list[str] = []
    table: list[list] = []
    results = {"onnxruntime": ort.__version__, "gpu": subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                                                                      text=True).stdout.strip() if gpu_present() else ""}
    results["correctness"] = correctness(tmp, clip, failures, table)
    results["throughput"] = throughput(tmp, clip, failures, table)
    results["capacity"] = capacity(clip, table)
    results["failures"] = failures
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, default=str))
    print_table(table)
    for f in failures:
        print(f"FAILED: {f}")
    print(f"results: {RESULTS}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
