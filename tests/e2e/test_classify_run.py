"""The secondary classifier on real crops, batched across frames and cameras."""
from __future__ import annotations

import collections

import pytest

from conftest import classifier_model, detector_model, label, read_jsonl, run_pipeline, still_clip

VEHICLES = {"ambulance", "station wagon", "taxicab", "car mirror", "car wheel", "convertible", "fire engine",
            "garbage truck", "go-kart", "golf cart", "grille", "jeep", "limousine", "minibus", "minivan", "Model T",
            "moving van", "passenger car", "pickup truck", "police van", "race car", "school bus", "sports car",
            "tram", "tow truck", "semi-trailer truck", "trolleybus", "recreational vehicle"}


def graph(classes: list[str], **options) -> list:
    return [{"detect": {"model": "det"}}, {"classify": {"model": "cls", "classes": classes, **options}}, "annotate"]


def test_the_cup_in_the_coffee_photo_is_labelled_espresso_or_cup(tmp_path, model_path, write_config):
    skimage = pytest.importorskip("skimage.data", reason="scikit-image provides the coffee() photo")
    clip = still_clip(skimage.coffee()[:, :, ::-1].copy(), str(tmp_path / "coffee.mp4"))
    cfg = {"sources": [{"id": "table", "uri": clip}],
           "models": {"det": detector_model(model_path), "cls": classifier_model(model_path)},
           "graph": graph(["cup"])}
    run_pipeline(cfg, write_config, str(tmp_path / "out"))
    records = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    assert len(records) == 3
    for r in records:
        cups = [d for d in r["detections"] if d["class"] == "cup"]
        assert cups, r
        assert all(label(d) in ("espresso", "cup", "coffee mug") for d in cups), cups
        others = [d for d in r["detections"] if d["class"] != "cup"]
        assert all("labels" not in d for d in others)  # only the configured classes are classified


def test_car_crops_from_the_street_clip_get_vehicle_labels(tmp_path, model_path, sample_path, write_config):
    cfg = {"sources": [{"id": "street", "uri": sample_path("bikes.mp4")}],
           "models": {"det": detector_model(model_path), "cls": classifier_model(model_path)},
           "graph": graph(["car", "truck", "bus"], min_size=24), "outputs": {"video": {"enabled": False}}}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"), max_frames=100)
    labels = collections.Counter(label(d) for r in read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
                                 for d in r["detections"] if d["class"] == "car" and label(d))
    total = sum(labels.values())
    assert total >= 50
    assert sum(n for name, n in labels.items() if name in VEHICLES) >= 0.6 * total, labels.most_common(10)
    assert labels.most_common(1)[0][0] in VEHICLES
    assert snap["engines"]["cls"]["mean_batch"] > 1  # crops were batched


def test_crops_of_four_cameras_share_batches_and_every_frame_arrives_in_order(tmp_path, model_path, short_clips,
                                                                             write_config):
    sources = [{"id": f"cam{i}", "uri": short_clips["vtest" if i % 2 == 0 else "bikes"]} for i in range(4)]
    cfg = {"sources": sources,
           "models": {"det": detector_model(model_path),
                      "cls": classifier_model(model_path, batching={"max_batch": 16, "max_wait_ms": 20},
                                              engine={"max_inflight": 3})},
           "graph": graph(["car", "truck", "person"])}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    records = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    for i in range(4):
        seqs = [r["seq"] for r in records if r["camera"] == f"cam{i}"]
        assert seqs == list(range(40))
    labelled = [d for r in records for d in r["detections"] if d["class"] in ("car", "truck", "person")
                and min(d["box"][2] - d["box"][0], d["box"][3] - d["box"][1]) >= 24]
    assert labelled and all(label(d) and 0 < d["labels"]["cls"]["score"] <= 1 for d in labelled)
    assert snap["engines"]["cls"]["mean_batch"] > 4


def test_classifier_options_and_classes_are_checked_with_the_config(tmp_path, model_path, short_clips, write_config):
    from pipeline.config import ConfigError, load_config

    cfg = {"sources": [{"id": "a", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path), "cls": classifier_model(model_path)},
           "graph": graph(["car", "spaceship"], min_sise=3, min_size="big")}
    with pytest.raises(ConfigError) as e:
        load_config(write_config(cfg))
    assert "graph[1].classify.min_sise: unknown key" in str(e.value)
    assert "graph[1].classify.min_size: expected a number, got str 'big'" in str(e.value)
    assert "graph[1].classify.classes[1]: unknown detector class 'spaceship'" in str(e.value)
