"""`pipeline status`: the table from whatever fields the API answer has, one line with
exit status 1 when nothing answers, and a URL refused without any of its user info."""
import base64
import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ROOT
from pipeline.status_view import parse_url, read_status, render


def test_the_table_shows_what_the_answer_has_and_a_dash_for_what_it_lacks():
    answer = {"elapsed_s": 61.2, "throughput_fps": 9.0, "recent": {"fps": 4.5}, "processed": 300,
              "cameras": {"door": {"state": "streaming", "fps": 3.0, "recent": {"fps": 2.5}, "processed": 200,
                                   "dropped": {"stale": 3, "full": 2},
                                   "recording": {"state": "recording", "file": "door.20261202T120000Z.mp4"}},
                          "yard": {"state": "reconnecting\x1b[31m", "processed": 100}}}
    lines = render(read_status("http://127.0.0.1:8080", answer)).splitlines()
    assert lines[0] == "pipeline at http://127.0.0.1:8080: up 61 s, 2 camera(s), 4.5 fps, 300 frames, cpu -%"
    assert lines[2].split() == ["door", "streaming", "2.5", "200", "5", "on", "recording", "door.20261202T120000Z.mp4"]
    assert lines[3].split() == ["yard", "reconnecting?[31m", "-", "100", "-", "off"]  # no escape reaches the terminal


def test_nothing_listening_is_one_line_and_exit_1(pipeline_cmd):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    r = subprocess.run([*pipeline_cmd, "status", "--url", f"http://127.0.0.1:{port}"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"error: http://127.0.0.1:{port}: nothing answers (Connection refused): is the "
                                     "pipeline running with outputs.web on this port?"]


def test_a_url_with_credentials_reaches_its_host_and_port_with_them_as_basic_auth(pipeline_cmd):
    seen: list[str] = []

    class Run(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            body = json.dumps({"elapsed_s": 5, "cameras": {"door": {"state": "streaming"}}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Run)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        r = subprocess.run([*pipeline_cmd, "status", "--url", f"http://viewer:p%40ss:w@127.0.0.1:{port}/"],
                           capture_output=True, text=True, cwd=ROOT, timeout=60, env={**os.environ, "PIPELINE_TOKEN": ""})
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 0, r.stderr
    assert seen == [f"/api/cameras Basic {base64.b64encode(b'viewer:p@ss:w').decode()}"]
    assert r.stdout.startswith(f"pipeline at http://127.0.0.1:{port}: up 5 s, 1 camera(s)")
    assert "viewer" not in r.stdout + r.stderr and "p%40ss" not in r.stdout + r.stderr


@pytest.mark.parametrize("url", ["bob:S3cretPw@127.0.0.1:18799", "//bob:S3cretPw@127.0.0.1:18799",
                                 "ftp://bob:S3cretPw@127.0.0.1:1", "http://bob:S3cretPw@127.0.0.1:port",
                                 "http://bob:S3cret#Pw@127.0.0.1:1", "http://bob:S3cret/Pw@127.0.0.1:1",
                                 "http://bob:S3cret?Pw@127.0.0.1:1", "http://bob:S3cret@Pw@127.0.0.1:1",
                                 "http://bob:12#Pw@127.0.0.1:1"])
def test_a_url_refused_shows_none_of_its_user_info_whatever_its_form(url):
    with pytest.raises(ValueError) as refused:
        parse_url(url)
    line = str(refused.value)
    assert line.startswith("--url: ") and "***@" in line, line
    assert "bob" not in line and "S3cret" not in line and "Pw" not in line and ":12" not in line


def test_a_url_without_a_scheme_is_one_line_without_its_password_and_exit_2(pipeline_cmd):
    r = subprocess.run([*pipeline_cmd, "status", "--url", "bob:S3cretPw@127.0.0.1:18799"], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["error: --url: expected http://HOST:PORT, got '***@127.0.0.1:18799'"]
