"""`pipeline query` as a user runs it (a subprocess): the store named by `--store` or by a
config's `outputs.store`, a readable table or the API's JSON, the next page's cursor, and
one `error:` line with exit status 2 for a bad option, an unknown camera or no store."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from store_rows import CLASSES, T0, make_store, synthetic


@pytest.fixture(scope="module")
def data():
    return synthetic(200, seed=11)


@pytest.fixture(scope="module")
def store(tmp_path_factory, data) -> str:
    out = tmp_path_factory.mktemp("out")
    return make_store(str(out / "store.db"), data)


def query(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "query", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_tracks_print_as_a_table_newest_first_with_the_next_pages_cursor(store, data):
    r = query("tracks", "--store", store, "--class", "car", "--limit", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    cars = sorted((t for t in data["tracks"] if t[4] == "car"), key=lambda t: (t[5], t[0]), reverse=True)
    assert lines[0].split()[:3] == ["first", "seen", "(UTC)"] and len(lines) == 5
    assert [int(line.split()[-1]) for line in lines[1:4]] == [t[0] for t in cars[:3]]
    cursor = lines[4].removeprefix("more: --cursor ")
    r = query("tracks", "--store", store, "--class", "car", "--limit", "3", "--cursor", cursor, "--json")
    assert [t["id"] for t in json.loads(r.stdout)["tracks"]] == [t[0] for t in cars[3:6]]


def test_counts_as_json_are_the_apis_answer_and_the_config_names_the_store(store, data, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"id": "gate", "uri": "x.mp4"}],
                                      "outputs": {"dir": str(tmp_path / "empty")}}))
    r = query("counts", "--config", str(config))
    assert r.returncode == 2 and "no store there" in r.stderr  # the config's folder holds none
    config.write_text(yaml.safe_dump({"sources": [{"id": "gate", "uri": "x.mp4"}],
                                      "outputs": {"dir": str(Path(store).parent),
                                                  "store": {"path": Path(store).name}}}))
    r = query("counts", "--config", str(config), "--bucket", "day", "--after", "2026-11-23", "--before",
              "2026-11-25", "--line", "entry,street", "--group", "name", "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["bucket"] == "day" and answer["after"] == T0
    want = {n: sum(c for k, c in data["counts"].items() if k[2] == "line" and k[3] == n) for n in ("entry", "street")}
    assert {s["name"]: sum(n for _, n in s["points"]) for s in answer["series"]} == want


def test_with_its_config_a_class_or_zone_the_run_names_answers_empty_with_only_the_store_it_is_refused(
        store, tmp_path, model_path, coco_labels):
    from conftest import detector_model

    unseen = next(label for label in coco_labels if label not in CLASSES)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"id": "gate", "uri": "x.mp4"}], "models": {"det": detector_model(model_path)},
        "graph": [{"detect": {"model": "det"}}, "track", {"analytics": {"cameras": {"gate": {
            "zones": [{"name": "new bed", "polygon": [[0, 0], [9, 0], [9, 9]]}]}}}}],
        "outputs": {"dir": str(Path(store).parent), "store": {"path": Path(store).name}}}))
    for args in (["tracks", "--class", unseen], ["events", "--zone", "new bed", "--class", f"car,{unseen}"]):
        r = query(*args, "--config", str(config))
        assert r.returncode == 0 and r.stdout == "nothing matches\n", r.stderr
        r = query(*args, "--store", store)
        assert r.returncode == 2 and r.stderr.startswith("error: --"), r.stderr
    r = query("counts", "--class", unseen, "--after", "2026-11-23", "--config", str(config), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["series"] == [], r.stderr
    for name, value in (("class", f"{unseen}' OR '1'='1"), ("zone", "new bed\") OR 1=1 --")):
        r = query("tracks", f"--{name}", value, "--config", str(config))
        assert r.returncode == 2 and r.stderr.startswith(f"error: --{name}: no such {name} in the store: "), r.stderr


@pytest.mark.parametrize("args,line", [
    (["tracks", "--limit", "-3"], "error: --limit: "),
    (["tracks", "--camera", "porch"], "error: --camera: no such camera in the store: 'porch'"),
    (["tracks", "--after", "noon"], "error: --after: not a time"),
    (["counts", "--label", "red"], "error: --label: not an option of query counts"),
    (["events", "--event", "explode"], "error: --event: "),
    (["counts", "--bucket", "minute", "--after", "2026-01-01", "--before", "2026-02-01"], "error: --after: the range"),
])
def test_a_bad_option_is_one_error_line_naming_it_and_exit_2(store, args, line):
    r = query(*args, "--store", store)
    assert r.returncode == 2 and r.stderr.startswith(line) and r.stderr.count("\n") == 1 and not r.stdout, r.stderr


def test_without_a_store_it_says_where_to_find_one(tmp_path):
    r = query("tracks")
    assert r.returncode == 2 and "--store" in r.stderr
    r = query("tracks", "--store", str(tmp_path / "none.db"))
    assert r.returncode == 2 and "none.db: no store there" in r.stderr
