"""Secrets masked wherever they show: URL passwords, secret query values, and the values
a loaded config registers, in every spelling they take on the way out."""
from __future__ import annotations

import json
import logging
import subprocess

import pytest

from conftest import ROOT, detector_model
from pipeline.config import load_config
from pipeline.config.secrets import register_config
from pipeline.redact import RedactingFilter, redact, redact_data, register, url_secrets, userinfo_problem


def test_a_url_shows_its_user_but_not_its_password_even_one_holding_an_at_sign():
    assert redact("cannot open rtsp://admin:S3cret@10.0.0.7:554/live: refused") == \
        "cannot open rtsp://admin:***@10.0.0.7:554/live: refused"
    # FFmpeg reads user info up to the last `@` before the path
    assert redact("rtsp://admin:p@ss@cam/x") == "rtsp://admin:***@cam/x"
    assert redact("http://host:8080/path and a@b") == "http://host:8080/path and a@b"


def test_secret_query_values_are_masked_by_the_parameters_name():
    text = "POST https://h/hook?user=bob&token=abc&client_secret=xyz;X-Amz-Signature=f00d: 500"
    assert redact(text) == "POST https://h/hook?user=bob&token=***&client_secret=***;X-Amz-Signature=***: 500"
    assert redact('{"url": "https://h/?api_key=k1\\"x"}') == '{"url": "https://h/?api_key=***\\"x"}'
    assert url_secrets("https://u:pw@h/?sig=1&page=2") == ["pw", "1"]


def test_registered_values_are_masked_as_is_percent_encoded_and_json_escaped():
    register('Pl/ant"ed-42')
    text = 'rtsp://u:Pl%2Fant%22ed-42@h/ said Pl/ant"ed-42 ' + json.dumps({"p": 'Pl/ant"ed-42'})
    assert "ant" not in redact(text)
    register(12, None, True)  # too short, nothing, and a flag: none of them masks anything
    assert redact("12 True None") == "12 True None"


def test_redact_data_masks_keys_and_values_inside_lists():
    data = {"rtsp://a:pw1@h/x": [{"uri": "rtsp://a:pw2@h/x"}], "n": 3}
    assert redact_data(data) == {"rtsp://a:***@h/x": [{"uri": "rtsp://a:***@h/x"}], "n": 3}


def test_a_loaded_configs_secrets_are_registered(write_config, model_path, sample_path):
    cfg = load_config(write_config({
        "sources": [{"id": "a", "uri": sample_path("bikes.mp4")},
                    {"id": "b", "uri": "rtsp://admin:CamPass77@10.0.0.7/x?token=CamTok88",
                     "options": {"rtsp_password": "OptPass99", "buffer_size": 1048576}}],
        "models": {"det": detector_model(model_path)}, "graph": [{"detect": {"model": "det"}}],
        "outputs": {"web": {"port": 0, "token": "WebTok11"},
                    "events": {"mqtt": {"host": "127.0.0.1", "username": "pipe", "password": "MqttPass22"},
                               "webhook": {"url": "https://HookUser33@hooks.example/in?sig=HookSig44"}}}}))
    register_config(cfg)
    secrets = ["CamPass77", "CamTok88", "OptPass99", "WebTok11", "MqttPass22", "HookUser33", "HookSig44"]
    shown = redact("an error echoing " + " ".join(secrets) + " and 1048576")
    assert [s for s in secrets if s in shown] == [] and "1048576" in shown


def test_log_records_leave_redacted_with_their_tracebacks(caplog):
    log = logging.getLogger("pipeline.test_redact")
    caplog.handler.addFilter(RedactingFilter())
    try:
        raise OSError("connect rtsp://admin:TbPass55@cam/x failed")
    except OSError:
        log.exception("camera %s: %s", "a", "rtsp://admin:MsgPass66@cam/x")
    text = caplog.text
    assert "TbPass55" not in text and "MsgPass66" not in text and "rtsp://admin:***@cam/x" in text


RAW = ("hun@ter2", "hun#ter2", "hun/ter2", "hun?ter2")  # each ends user info early for some reader


def test_a_raw_at_in_user_info_is_masked_up_to_the_last_at_and_named_a_problem():
    for url in ("postgresql://u:p@ss@db.local/x", "postgresql://u:a@b@c@db.local:5432/x?sslmode=require"):
        shown = redact(f"cannot open {url}: refused")
        assert shown.startswith("cannot open postgresql://u:***@db.local") and "@ss" not in shown and "b@c" not in shown
        assert "%40" in userinfo_problem(url)
    assert userinfo_problem("postgresql://u:p%40ss%23%2F%3F@db.local/x") is None
    assert userinfo_problem("postgresql://db.local/x?options=a%40b") is None
    assert redact("rtsp://host:554/path?x=a@b") == "rtsp://host:554/path?x=a@b"  # no user info: nothing masked


@pytest.mark.parametrize("password", RAW)
def test_a_store_url_whose_user_info_holds_a_raw_at_hash_slash_or_question_mark_is_refused_with_all_of_it_masked(
        password, write_config, model_path, sample_path):
    from pipeline.config import ConfigError
    from pipeline.store.backend import open_postgres
    from pipeline.store.connections import Connections
    from pipeline.store.tables import StoreError

    url = f"postgresql://pipe:{password}@127.0.0.1:1/store?sslmode=disable"
    masked = "postgresql://***@127.0.0.1:1/store?sslmode=disable: its user name or password holds a raw "
    with pytest.raises(ConfigError) as refused:
        load_config(write_config({
            "sources": [{"id": "cam", "uri": sample_path("vtest.mp4")}], "models": {"det": detector_model(model_path)},
            "graph": [{"detect": {"model": "det"}}], "outputs": {"store": {"url": url}}}))
    lines = [str(refused.value)]
    for opening in (open_postgres, Connections.open):
        with pytest.raises(StoreError) as refused:
            opening(url)
        lines.append(str(refused.value))
    assert [line.partition(masked)[0] for line in lines] == ["outputs.store.url: ", "outputs.store.url: ", ""]
    assert all("hun" not in redact(line) and "ter2" not in line for line in lines)
    assert redact(f"a driver's error naming pipe:{password}@127.0.0.1 and {password}") == \
        "a driver's error naming ***@127.0.0.1 and ***"


@pytest.mark.parametrize("command,password", list(zip(["validate", "run", "store check", "query"], RAW[1:] + RAW[:1])))
def test_a_store_url_with_a_raw_character_in_its_password_is_one_line_without_any_of_it(
        command, password, pipeline_cmd, write_config, model_path, sample_path):
    from brokers import free_port

    url = f"postgresql://pipeline:{password}@127.0.0.1:{free_port()}/store"  # closed: nothing to reach
    config = write_config({
        "sources": [{"id": "cam", "uri": sample_path("vtest.mp4")}], "models": {"det": detector_model(model_path)},
        "graph": [{"detect": {"model": "det"}}], "outputs": {"dir": "out", "store": {"url": url}}})
    args = ["query", "tracks", "--store", url] if command == "query" else [*command.split(), "--config", config]
    r = subprocess.run([*pipeline_cmd, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r
    (line,) = r.stderr.splitlines()
    assert "postgresql://***@127.0.0.1" in line and "percent-encoded (%40, %2F, %3F, %23)" in line
    assert "hun" not in line and "ter2" not in line
