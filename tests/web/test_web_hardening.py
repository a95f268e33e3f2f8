"""The live view's server under a careless or hostile client and at start-up: busy ports,
close before start, restart on TIME-WAIT, the token and its cookie, clients that vanish,
idle sockets and crowds. Real sockets on 127.0.0.1 throughout."""
from __future__ import annotations

import contextlib
import logging
import socket
import struct
import subprocess
import threading
import time

import pytest

from pipeline.config.outputs import WebConfig
from pipeline.errors import StartupError
from pipeline.metrics.snapshot import Snapshot
from pipeline.sinks.preview import Preview
from pipeline.web.server import WebServer, exposure_warning
from web_support import browser, get, live_config, raw, running  # noqa: F401  (a fixture)


@pytest.fixture
def preview():
    p = Preview()
    yield p
    p.close()


@pytest.fixture
def held_port():
    """A port some other program listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def closed_in_time(server: WebServer) -> bool:
    t = threading.Thread(target=server.close, daemon=True)
    t.start()
    t.join(10)
    return not t.is_alive()


# -- start-up and ports (18.6) ------------------------------------------------------------
def test_a_busy_web_port_is_a_one_line_startup_error(held_port, preview):
    with pytest.raises(StartupError) as e:
        WebServer(WebConfig(port=held_port), Snapshot, preview)
    assert str(e.value) == f"outputs.web.port: port {held_port} on 127.0.0.1 is already in use"


def test_a_busy_metrics_port_is_a_one_line_startup_error(held_port):
    from pipeline.metrics.prometheus import PrometheusExporter

    with pytest.raises(StartupError) as e:
        PrometheusExporter(dict, held_port)
    assert str(e.value) == f"metrics.prometheus_port: port {held_port} on 127.0.0.1 is already in use"


def test_close_before_start_returns_at_once(preview):
    server = WebServer(WebConfig(port=0), Snapshot, preview)
    assert closed_in_time(server)  # it waited forever for a serve loop that never ran
    assert closed_in_time(server)  # and closing twice is fine


def test_a_port_in_time_wait_after_a_stop_is_free_at_once(preview):
    from pipeline.preflight import port_problem

    server = WebServer(WebConfig(port=0), Snapshot, preview)
    server.start()
    port = server.port
    # the server closes this connection first, so its side of it waits in TIME-WAIT
    assert raw(port, b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 404")
    server.close()
    assert port_problem("outputs.web.port", port) is None  # the probe said "already in use" for a minute
    again = WebServer(WebConfig(port=port), Snapshot, preview)
    again.start()
    try:
        assert raw(port, b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 404")
    finally:
        again.close()


def test_validate_catches_the_web_and_metrics_ports_busy_or_the_same(held_port, tmp_path, model_path, sample_path,
                                                                      write_config):
    from pipeline.config import load_config
    from pipeline.preflight import port_problems

    def problems(web_port: int, metrics_port: int | None) -> list[str]:
        cfg = live_config(model_path, sample_path)
        cfg["outputs"]["web"]["port"] = web_port
        cfg["metrics"] = {"prometheus_port": metrics_port}
        return port_problems(load_config(write_config(cfg)))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert problems(free, None) == []
    assert problems(held_port, None) == [f"outputs.web.port: port {held_port} on 127.0.0.1 is already in use"]
    assert problems(free, held_port) == [f"metrics.prometheus_port: port {held_port} on 127.0.0.1 is already in use"]
    same = problems(free, free)
    assert len(same) == 1 and same[0].startswith(f"outputs.web.port: port {free} is also metrics.prometheus_port")


def test_run_with_a_busy_metrics_port_and_the_web_on_exits_2_in_one_line(held_port, pipeline_cmd, model_path,
                                                                        sample_path, write_config, tmp_path):
    cfg = live_config(model_path, sample_path)
    cfg["outputs"]["dir"] = str(tmp_path / "out")
    cfg["metrics"] = {"prometheus_port": held_port}
    try:  # it hung forever: closing the web server that never started waited for it
        done = subprocess.run([*pipeline_cmd, "run", "--config", write_config(cfg), "--max-frames", "5"],
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the run hung")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert errors == [f"error: metrics.prometheus_port: port {held_port} on 127.0.0.1 is already in use"]
    assert "Traceback" not in done.stderr


def test_run_with_a_busy_web_port_exits_2_in_one_line(held_port, pipeline_cmd, model_path, sample_path,
                                                     write_config, tmp_path):
    cfg = live_config(model_path, sample_path)
    cfg["outputs"]["dir"] = str(tmp_path / "out")
    cfg["outputs"]["web"]["port"] = held_port
    done = subprocess.run([*pipeline_cmd, "run", "--config", write_config(cfg), "--max-frames", "5"],
                          capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2
    assert errors == [f"error: outputs.web.port: port {held_port} on 127.0.0.1 is already in use"]
    assert "Traceback" not in done.stderr


def test_a_pipeline_whose_web_port_was_taken_after_the_checks_is_a_startup_error(held_port, model_path, sample_path,
                                                                                 write_config, tmp_path):
    """Two runs racing for one port: the loser gets the one line, not an OSError traceback."""
    from pipeline.config import load_config
    from pipeline.graph import Pipeline

    cfg = live_config(model_path, sample_path)
    cfg["outputs"]["dir"] = str(tmp_path / "out")
    cfg["outputs"]["web"]["port"] = held_port
    with pytest.raises(StartupError, match=f"^outputs.web.port: port {held_port} on 127.0.0.1 is already in use$"):
        Pipeline(load_config(write_config(cfg)))


# -- abuse (18.8) -------------------------------------------------------------------------
def test_listening_beyond_this_machine_without_a_token_is_warned_about():
    assert exposure_warning(WebConfig(port=0, host="0.0.0.0"))
    assert exposure_warning(WebConfig(port=0, host="192.168.1.10"))
    assert exposure_warning(WebConfig(port=0, host="::"))
    assert exposure_warning(WebConfig(port=0, host="0.0.0.0", token="s3cret")) is None
    for host in ("127.0.0.1", "::1", "localhost"):
        assert exposure_warning(WebConfig(port=0, host=host)) is None


def test_a_loopback_server_starts_without_a_warning(preview, caplog):
    server = WebServer(WebConfig(port=0), Snapshot, preview)
    with caplog.at_level(logging.WARNING, logger="pipeline.web"):
        server.start()
    server.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_cookie_carries_only_the_right_token_and_bearer_is_any_case(model_path, sample_path, running):
    p = running(live_config(model_path, sample_path, token="s3cret"))
    port = p.side.web.port
    # a valid header plus a token parameter with a line break: the parameter was echoed into Set-Cookie
    head = raw(port, b"GET /?token=x%0d%0aX-Injected:%20yes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
                     b"Connection: close\r\n\r\n").split(b"\r\n\r\n")[0]
    assert head.startswith(b"HTTP/1.1 200") and b"X-Injected" not in head and b"Set-Cookie" not in head
    status, _, headers = get(f"http://127.0.0.1:{port}/?token=s3cret")
    assert status == 200 and headers["Set-Cookie"] == "pipeline_token=s3cret; HttpOnly; SameSite=Strict; Path=/"
    for scheme in ("bearer", "BEARER", "Bearer"):
        assert get(f"http://127.0.0.1:{port}/api/cameras", {"Authorization": f"{scheme} s3cret"})[0] == 200, scheme
    assert get(f"http://127.0.0.1:{port}/api/cameras", {"Authorization": "Basic s3cret"})[0] == 401
    assert get(f"http://127.0.0.1:{port}/api/cameras", {"Cookie": 'pipeline_token="bad'})[0] == 401


def test_a_client_that_vanishes_mid_reply_is_one_debug_line(model_path, sample_path, running, caplog, capfd):
    p = running(live_config(model_path, sample_path))
    with caplog.at_level(logging.DEBUG, logger="pipeline.web"):
        for path, wait_for in ((b"/frame/street.jpg", b""), (b"/stream/street", b"\xff\xd8")):
            c = socket.create_connection(("127.0.0.1", p.side.web.port), timeout=20)
            c.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while wait_for not in got:  # the stream: gone once its first picture is under way
                got += c.recv(4096)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()  # a reset
        deadline = time.monotonic() + 30
        while len([r for r in caplog.records if "went away" in r.getMessage()]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # a second line for one connection would come now
    gone = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(gone) == 2 and all(r.levelno == logging.DEBUG for r in gone)
    assert not [r for r in caplog.records if r.name == "pipeline.web" and r.levelno >= logging.WARNING]
    assert "Traceback" not in capfd.readouterr().err


def test_an_idle_connection_is_closed(preview, monkeypatch):
    monkeypatch.setattr(WebServer, "IDLE_TIMEOUT_S", 1.0)
    server = WebServer(WebConfig(port=0), Snapshot, preview)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as c:
            assert c.recv(100) == b""  # closed by the server; it stayed open for ever
    finally:
        server.close()


def ask(c: socket.socket, path: str = "/api/cameras", token: str | None = None) -> bytes:
    """One request on a kept-alive connection: its answer's status line."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = c.recv(65536)
        if not chunk:
            break
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length")), 0)
    while len(body) < length and (chunk := c.recv(65536)):
        body += chunk
    return head.split(b"\r\n")[0]


def closed_by_server(c: socket.socket) -> bool:
    try:
        return c.recv(100) == b""
    except ConnectionError:
        return True


def test_admitted_connections_are_capped_and_the_excess_answered_503(preview, monkeypatch):
    monkeypatch.setattr(WebServer, "MAX_CONNECTIONS", 4)
    server = WebServer(WebConfig(port=0), Snapshot, preview)
    server.start()
    kept = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(4)]
    try:
        assert [ask(c) for c in kept] == [b"HTTP/1.1 200 OK"] * 4  # kept alive: each holds its slot
        assert raw(server.port, b"GET /api/cameras HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 503")
        assert server.api_snapshot()["live_view"]["refused"] == 1
    finally:
        for c in kept:
            c.close()
        deadline = time.monotonic() + 30
        while get(f"http://127.0.0.1:{server.port}/api/cameras")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)  # their slots come back as their threads see them closed
        status = get(f"http://127.0.0.1:{server.port}/api/cameras")[0]
        server.close()
    assert status == 200


def test_a_request_head_must_arrive_within_the_deadline(preview, monkeypatch):
    """A header line every 0.3 s kept a connection for ever: the idle timeout counts per read."""
    monkeypatch.setattr(WebServer, "HEAD_TIMEOUT_S", 1.0)
    server = WebServer(WebConfig(port=0), Snapshot, preview)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as c:
            c.sendall(b"GET /api/cameras HTTP/1.1\r\n")
            t0 = time.monotonic()
            cut = False
            while not cut and time.monotonic() - t0 < 6:
                time.sleep(0.3)
                try:
                    c.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    cut = True
                c.setblocking(False)
                try:
                    cut = cut or c.recv(100) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    cut = True
                c.setblocking(True)
        assert cut
        assert server.api_snapshot()["live_view"]["cut"] == 1
    finally:
        server.close()


def test_slow_heads_without_the_token_do_not_starve_those_that_hold_it(preview):
    """64 sockets sending a header line now and then held all 64 slots: every request,
    authorised ones included, was answered 503 until they stopped."""
    server = WebServer(WebConfig(port=0, token="s3cret"), Snapshot, preview)
    server.start()
    kept = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    slow = []
    try:
        assert ask(kept, token="s3cret") == b"HTTP/1.1 200 OK"  # admitted, then kept alive
        for _ in range(WebServer.MAX_WAITING + 6):
            c = socket.create_connection(("127.0.0.1", server.port), timeout=20)
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            slow.append(c)
        time.sleep(0.5)  # all accepted, each waiting for the rest of its head
        for c in slow:
            with contextlib.suppress(OSError):
                c.sendall(b"X-Slow: 1\r\n")
        base = f"http://127.0.0.1:{server.port}/api/cameras"
        assert get(base, {"Authorization": "Bearer s3cret"})[0] == 200
        assert get(base)[0] == 401  # told, not turned away
        assert ask(kept, token="s3cret") == b"HTTP/1.1 200 OK"
        assert sum(closed_by_server(c) for c in slow[:6]) == 6  # the oldest waiting made room
        assert server.api_snapshot()["live_view"]["refused"] == 0
    finally:
        for c in [kept, *slow]:
            c.close()
        server.close()


def test_the_listen_backlog_is_raised(preview):
    server = WebServer(WebConfig(port=0), Snapshot, preview)
    server.start()
    try:
        listed = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True).stdout
    finally:
        server.close()
    backlog = int(listed.split()[2])  # Send-Q of a listening socket: its backlog
    assert backlog >= 128


def test_names_from_the_config_are_text_in_the_page(model_path, sample_path, running):
    evil = '<img src=x onerror="document.title=`owned`">'
    cfg = live_config(model_path, sample_path)
    cfg["graph"][2]["analytics"]["cameras"]["campus"]["lines"][0]["name"] = evil
    p = running(cfg)
    d = browser()
    try:
        d.get(f"http://127.0.0.1:{p.side.web.port}/")
        deadline = time.monotonic() + 30
        text = ""
        while evil not in text and time.monotonic() < deadline:
            time.sleep(0.3)
            text = d.execute_script("return [...document.querySelectorAll('.counts li')].map((e) => e.textContent)"
                                    ".join(' ')")
        time.sleep(0.5)  # an image that fails to load runs its onerror at once
        title = d.title
        images = d.execute_script("return document.querySelectorAll('.counts img').length")
    finally:
        d.quit()
    assert evil in text  # shown as the literal name
    assert images == 0 and title != "owned"  # never parsed as markup, never run


def read_to_end(c: socket.socket) -> bool:
    """Whether the server ended the connection (what it sent before is read and dropped)."""
    try:
        while c.recv(65536):
            pass
    except ConnectionError:
        pass
    return True


def test_open_streams_hold_no_thread_each_and_close_cuts_them(preview):
    """A thread per connection let a crowd of viewers cost a thread each; closing waited
    for streams that never end."""
    server = WebServer(WebConfig(port=0), Snapshot, preview, cameras=lambda: ["door"])
    server.start()
    before = threading.active_count()
    streams = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(20)]
    try:
        for c in streams:
            c.sendall(b"GET /stream/door HTTP/1.1\r\nHost: x\r\n\r\n")
        for c in streams:
            assert c.recv(100).startswith(b"HTTP/1.1 200")  # each open, waiting for a picture
        assert get(f"http://127.0.0.1:{server.port}/api/cameras")[0] == 200
        assert threading.active_count() <= before + WebServer.WORKERS
        assert closed_in_time(server)
        assert all(read_to_end(c) for c in streams)
    finally:
        for c in streams:
            c.close()
        server.close()


def test_routes_added_by_the_caller_need_the_token_websockets_included(preview):
    """`routes` (the live video's WebSocket) are behind the same token as every route."""
    import asyncio

    import aiohttp
    from aiohttp import web

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str(message.data)
        return ws

    server = WebServer(WebConfig(port=0, token="s3cret"), Snapshot, preview,
                       routes=lambda app: app.router.add_get("/api/echo", echo))
    server.start()

    async def talk(token: str) -> str:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(f"http://127.0.0.1:{server.port}/api/echo{token}") as ws:
                    await ws.send_str("hello")
                    return (await ws.receive(timeout=10)).data
            except aiohttp.WSServerHandshakeError as e:
                return str(e.status)

    try:
        assert asyncio.run(talk("")) == "401"
        assert asyncio.run(talk("?token=wrong")) == "401"
        assert asyncio.run(talk("?token=s3cret")) == "hello"
    finally:
        server.close()
