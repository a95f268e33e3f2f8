"""`outputs.store`: on by default, `false` turns it off, and a mistake names its YAML path
(a URL's password never shown)."""
import pytest

from conftest import detector_model
from pipeline.config import ConfigError, load_config


def config(write_config, model_path, sample_path, store=None):
    data = {"sources": [{"id": "cam", "uri": sample_path("vtest.mp4")}], "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}]}
    if store is not None:
        data["outputs"] = {"store": store}
    return load_config(write_config(data))


def test_the_store_is_on_by_default_beside_the_files_and_false_turns_it_off(write_config, model_path, sample_path):
    on = config(write_config, model_path, sample_path).outputs.store
    assert on.enabled and on.path == "store.db" and on.url is None
    assert not config(write_config, model_path, sample_path, False).outputs.store.enabled
    assert not config(write_config, model_path, sample_path, {"enabled": False}).outputs.store.enabled
    kept = config(write_config, model_path, sample_path, {"max_days": 30, "counts_max_days": 400}).outputs.store
    assert (kept.max_days, kept.counts_max_days) == (30, 400)


def test_mistakes_name_their_yaml_path_and_never_show_a_password(write_config, model_path, sample_path):
    with pytest.raises(ConfigError) as e:
        config(write_config, model_path, sample_path, {"url": "mysql://root:hunter2@db/x", "queue": 3,
                                                       "max_days": 30, "counts_max_days": 7, "colour": 1})
    text = "\n".join(e.value.problems)
    assert "outputs.store.url: must be a PostgreSQL URL" in text and "hunter2" not in text
    assert "outputs.store.queue:" in text and "outputs.store.colour: unknown key" in text
    assert "outputs.store.counts_max_days: must be at least max_days (30)" in text
    with pytest.raises(ConfigError) as e:
        config(write_config, model_path, sample_path, {"recordings_kept": "motion"})
    assert e.value.problems == ["outputs.store.recordings_days: required with recordings_kept: motion"]
    with pytest.raises(ConfigError) as e:
        config(write_config, model_path, sample_path, {"recordings_kept": "objects", "recordings_days": 7})
    assert e.value.problems[0].startswith("outputs.store.recordings_kept: must be one of all, motion, active_objects")
    with pytest.raises(ConfigError) as e:
        config(write_config, model_path, sample_path, 3)
    assert e.value.problems[0].startswith("outputs.store:")
