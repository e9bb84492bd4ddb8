"""Static requests are requests: the command's --metrics-bind counts them in
greenserve_requests_total and apart in greenserve_static_requests_total, and --statsd-host sends
them in gunicorn.requests and apart as greenserve.static.requests."""

import socket
import urllib.request

from tests.conftest import CLIServer, free_port, wait_until

APP = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"app"]
'''


def _get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read()
    except urllib.error.HTTPError as exc:
        return exc.read()


def test_metrics_and_statsd_count_static_requests(tmp_path):
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.txt").write_bytes(b"static\n")
    (tmp_path / "app.py").write_text(APP)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(10)
    metrics_port = free_port()
    server = CLIServer("--static", "/static=static", "--workers", "1", "--metrics-bind",
                       "127.0.0.1:%d" % metrics_port, "--statsd-host", "127.0.0.1:%d" % receiver.getsockname()[1],
                       "app:app", cwd=str(tmp_path)).wait_ready()
    try:
        assert _get(server.url + "/static/a.txt") == b"static\n"
        assert _get(server.url + "/static/missing") == b"Not Found\n"
        assert _get(server.url + "/elsewhere") == b"app"
        lines = []

        def counted(name):
            return sum(int(line.split(":")[1].split("|")[0]) for line in lines if line.startswith(name + ":"))

        def statsd_says():
            lines.extend(receiver.recv(65536).decode().split("\n"))
            return counted("gunicorn.requests") >= 3 and counted("greenserve.static.requests") >= 2

        wait_until(statsd_says, 20, "statsd's gunicorn.requests:3 and greenserve.static.requests:2")
        assert (counted("gunicorn.requests"), counted("greenserve.static.requests")) == (3, 2)

        def scraped():
            return _get("http://127.0.0.1:%d/metrics" % metrics_port).decode()

        wait_until(lambda: "greenserve_static_requests_total 2\n" in scraped(), 20, "the static count in /metrics")
        text = scraped()
        total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("greenserve_requests_total{"))
        assert total >= 3  # the static requests are requests too (and /metrics' own are not counted)
    finally:
        server.stop()
        receiver.close()
