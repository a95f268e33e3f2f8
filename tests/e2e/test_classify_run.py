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
    assert snap.engines["cls"].items >= total


def test_crops_of_four_cameras_share_batches_and_every_frame_arrives_in_order(tmp_path, model_path, short_clips,
                                                                             write_config):
    sources = [{"id": f"cam{i}", "uri": short_clips["vtest" if i % 2 == 0 else "bikes"]} for i in range(4)]
    cfg = {"sources": sources,
           "models": {"det": detector_model(model_path),
                      "cls": classifier_model(model_path, batching={"max_batch": 16, "max_wait_ms": 20, "preferred": 16},
                                              engine={"max_inflight": 3})},
           "graph": graph(["car", "truck", "person"])}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"), max_frames=20)
    records = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    for i in range(4):
        seqs = [r["seq"] for r in records if r["camera"] == f"cam{i}"]
        assert seqs == list(range(20))
    labelled = [d for r in records for d in r["detections"] if d["class"] in ("car", "truck", "person")
                and min(d["box"][2] - d["box"][0], d["box"][3] - d["box"][1]) >= 24]
    assert labelled and all(label(d) and 0 < d["labels"]["cls"]["score"] <= 1 for d in labelled)
    assert snap.engines["cls"].mean_batch > 4


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


def detections_from(record: dict, keep: list[str], labels: list[str]):
    """A JSON line's detections rebuilt, with the label sets of the classifiers in `keep`."""
    import numpy as np

    from pipeline.frames import Attribute, ClassNames, Detections

    rows = record["detections"]
    det = Detections(np.array([d["box"] for d in rows], np.float32).reshape(-1, 4),
                     np.array([d["score"] for d in rows], np.float32), np.array([d["class_id"] for d in rows]),
                     names=ClassNames(labels))
    for stage in keep:
        attr = Attribute.unset(len(rows), ClassNames([d.get("labels", {}).get(stage, {}).get("label", "")
                                                      for d in rows]))
        for i, d in enumerate(rows):
            if stage in d.get("labels", {}):
                attr.class_id[i], attr.score[i] = i, d["labels"][stage]["score"]
        det.attributes[stage] = attr
    return det


def test_two_classifiers_write_and_draw_both_label_sets(tmp_path, model_path, short_clips, write_config, coco_labels):
    """A cascade of two classifiers on the same vehicles (type, then colour): every
    classified detection carries both label sets, and the video shows both."""
    import numpy as np

    from conftest import color_model, video_frames
    from pipeline.drawing import draw_detections

    classes = ["car", "truck", "bus"]
    cfg = {"sources": [{"id": "street", "uri": short_clips["bikes"]}],
           "models": {"det": detector_model(model_path), "type": classifier_model(model_path),
                      "color": color_model(model_path)},
           "graph": [{"detect": {"model": "det"}},
                     {"classify": {"model": "type", "name": "vehicle_type", "classes": classes}},
                     {"classify": {"model": "color", "name": "vehicle_color", "classes": classes, "min_size": 16}},
                     "annotate"]}
    snap = run_pipeline(cfg, write_config, str(tmp_path / "out"))
    assert snap.engines["type"].items > 0 and snap.engines["color"].items > 0
    records = read_jsonl(str(tmp_path / "out" / "detections.jsonl"))
    vehicles = [d for r in records for d in r["detections"] if d["class"] in classes
                and min(d["box"][2] - d["box"][0], d["box"][3] - d["box"][1]) >= 24]
    assert len(vehicles) >= 5
    for d in vehicles:
        assert list(d["labels"]) == ["vehicle_type", "vehicle_color"], d
        assert d["labels"]["vehicle_color"]["label"] in {"black", "white", "grey", "silver", "red", "orange",
                                                         "yellow", "green", "blue", "brown"}
    # the video shows both: closer to the source frame drawn with both label sets than with one
    seq = next(r["seq"] for r in records if any("labels" in d for d in r["detections"]))
    shown = video_frames(str(tmp_path / "out" / "street.mp4"))[seq].astype(int)
    source = video_frames(short_clips["bikes"])[seq]
    drawn = {}
    for keep in (["vehicle_type", "vehicle_color"], ["vehicle_type"]):
        img = source.copy()
        draw_detections(img, detections_from(records[seq], keep, coco_labels))
        drawn[len(keep)] = img.astype(int)
    differs = np.abs(drawn[2] - drawn[1]).sum(axis=2) > 60  # where the second label line makes a difference
    assert differs.sum() > 200
    err_both = np.abs(shown - drawn[2])[differs].mean()
    err_one = np.abs(shown - drawn[1])[differs].mean()
    assert err_both < 0.5 * err_one, (err_both, err_one)
