"""`pipeline status`: the table from whatever fields the API answer has, and one line with
exit status 1 when nothing answers."""
import base64
import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import ROOT
from pipeline.status_view import read_status, render


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
