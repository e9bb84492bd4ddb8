"""A small Flask application served by greenserve.

    greenserve --chdir examples flask_app:app               # or, as an app factory:
    greenserve --chdir examples 'flask_app:create_app()'

Routes: GET / (text), GET/POST /form (an HTML form protected by a session-based CSRF token),
POST /api/echo (JSON in, JSON out), POST /upload (multipart file upload), POST /upload/raw (the
raw request body, also when it is sent with Transfer-Encoding: chunked), GET /stream (a streamed
response without Content-Length), GET /static/<file> (Flask's static files, sent through
wsgi.file_wrapper), GET /sleep?seconds=x (time.sleep, cooperative because the greenserve
command monkey-patches before importing the app) and GET /outbound?url=http://127.0.0.1:PORT/...
(an outbound HTTP call with requests while serving: the patched socket makes it cooperative;
loopback URLs only, and requests must be installed).
"""

import hashlib
import hmac
import os
import secrets
import time
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    jsonify,
    render_template_string,
    request,
    session,
    stream_with_context,
)

MAX_SLEEP = 10.0
# /outbound fetches only from this machine: an example must not be an open proxy.
LOOPBACK = ("127.0.0.1", "::1", "localhost")

bp = Blueprint("example", __name__)

FORM_PAGE = """<!doctype html>
<html>
<head><meta charset="utf-8"><title>greenserve + Flask: form</title></head>
<body>
  {% if echoed is not none %}<p id="echo">Hello, {{ echoed }}!</p>{% endif %}
  <form method="post" action="{{ url_for('example.form') }}">
    <input type="hidden" name="csrf_token" value="{{ csrf_token }}">
    <label>Name <input type="text" name="name"></label>
    <button type="submit">Send</button>
  </form>
</body>
</html>
"""


def csrf_token():
    """This session's CSRF token, made on first use (the session is a signed cookie)."""
    token = session.get("csrf_token")
    if token is None:
        token = session["csrf_token"] = secrets.token_urlsafe(32)
    return token


def check_csrf():
    expected = session.get("csrf_token")
    sent = request.form.get("csrf_token", "")
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        abort(400, description="CSRF token missing or invalid.")


@bp.get("/")
def index():
    return Response("Hello from Flask on greenserve!\n", mimetype="text/plain")


@bp.route("/form", methods=["GET", "POST"])
def form():
    echoed = None
    if request.method == "POST":
        check_csrf()
        echoed = request.form.get("name", "")
    return render_template_string(FORM_PAGE, echoed=echoed, csrf_token=csrf_token())


@bp.post("/api/echo")
def api_echo():
    data = request.get_json(silent=True)
    if data is None:
        return jsonify(error="expected a JSON body"), 400
    return jsonify(echo=data)


def _size_and_sha256(stream):
    """Read a stream to its end in 64 KiB pieces; return its size and SHA-256 hex digest."""
    digest = hashlib.sha256()
    size = 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return size, digest.hexdigest()
        digest.update(chunk)
        size += len(chunk)


@bp.post("/upload")
def upload():
    file = request.files.get("file")
    if file is None:
        return jsonify(error="no 'file' field in the form"), 400
    size, sha256 = _size_and_sha256(file.stream)
    return jsonify(filename=file.filename, size=size, sha256=sha256)


@bp.post("/upload/raw")
def upload_raw():
    # request.stream reads to the end of the body even without Content-Length (a chunked
    # request), because greenserve sets wsgi.input_terminated.
    size, sha256 = _size_and_sha256(request.stream)
    return jsonify(
        size=size,
        sha256=sha256,
        transfer_encoding=request.headers.get("Transfer-Encoding"),
        content_length=request.headers.get("Content-Length"),
    )


@bp.get("/stream")
def stream():
    delay = min(float(request.args.get("delay", 0)), 1.0)

    @stream_with_context
    def generate():
        # stream_with_context keeps the request context alive while the server iterates.
        prefix = request.args.get("prefix", "line")
        for number in range(1, 6):
            if number > 1 and delay:
                time.sleep(delay)
            yield "%s %d\n" % (prefix, number)

    return Response(generate(), mimetype="text/plain")


@bp.get("/sleep")
def sleep():
    try:
        seconds = float(request.args.get("seconds", 1))
    except ValueError:
        abort(400, description="seconds must be a number")
    seconds = max(0.0, min(seconds, MAX_SLEEP))
    began = time.monotonic()
    time.sleep(seconds)  # cooperative: the greenserve command ran gevent's patch_all first
    # When the sleep began and ended (the server's clock): a client can see sleeps overlap.
    return jsonify(slept=seconds, began=began, ended=time.monotonic())


@bp.get("/outbound")
def outbound():
    url = request.args.get("url", "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.hostname not in LOOPBACK:
        abort(400, description="url must be http(s) on 127.0.0.1, ::1 or localhost")
    import requests  # imported by the app, after greenserve patched: urllib3's sockets cooperate

    began = time.monotonic()
    response = requests.get(url, timeout=10)
    return jsonify(status=response.status_code, body=response.text[:1000], began=began, ended=time.monotonic())


def create_app():
    """The app factory: ``greenserve 'flask_app:create_app()'``."""
    app = Flask(__name__)  # static files: examples/static/, at /static/<file>
    app.config.update(
        # An example key; set FLASK_SECRET_KEY in anything real.
        SECRET_KEY=os.environ.get("FLASK_SECRET_KEY", "greenserve-example-flask-secret-key"),
        MAX_CONTENT_LENGTH=16 * 1024 * 1024,
    )
    app.register_blueprint(bp)
    return app


app = create_app()
