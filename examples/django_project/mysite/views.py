import hashlib
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST, require_safe

MAX_SLEEP = 10.0
# /outbound/ fetches only from this machine: an example must not be an open proxy.
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _digest(chunks):
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def _read_in_chunks(stream, size=65536):
    while True:
        chunk = stream.read(size)
        if not chunk:
            return
        yield chunk


@require_safe
def index(request):
    return HttpResponse("Hello from Django on greenserve!\n", content_type="text/plain")


@require_http_methods(["GET", "POST"])
def form(request):
    # CsrfViewMiddleware refuses a POST without a valid token (403) before this view runs.
    context = {"echoed": None, "last_name": request.session.get("last_name")}
    if request.method == "POST":
        context["echoed"] = request.POST.get("name", "")
        request.session["last_name"] = context["echoed"]  # a signed cookie: no database
    return render(request, "form.html", context)


@csrf_exempt  # an API for non-browser clients: no cookie, so no CSRF token
@require_POST
def api_echo(request):
    try:
        data = json.loads(request.body)
    except ValueError:
        return JsonResponse({"error": "expected a JSON body"}, status=400)
    return JsonResponse({"echo": data})


@csrf_exempt
@require_POST
def upload(request):
    file = request.FILES.get("file")
    if file is None:
        return JsonResponse({"error": "no 'file' field in the form"}, status=400)
    size, sha256 = _digest(file.chunks())
    return JsonResponse({"filename": file.name, "size": size, "sha256": sha256})


@csrf_exempt
@require_POST
def upload_raw(request):
    """Hash the raw request body, read piece by piece (never all in memory)."""
    stream = request
    if "CONTENT_LENGTH" not in request.META and request.META.get("wsgi.input_terminated"):
        # Django sizes its input stream by Content-Length, so a chunked body reads as empty.
        # greenserve's wsgi.input ends where the body ends (wsgi.input_terminated), so the
        # body of a chunked request can be read from it directly.
        stream = request.META["wsgi.input"]
    size, sha256 = _digest(_read_in_chunks(stream))
    return JsonResponse(
        {
            "size": size,
            "sha256": sha256,
            "transfer_encoding": request.headers.get("Transfer-Encoding"),
            "content_length": request.headers.get("Content-Length"),
        }
    )


@require_safe
def stream(request):
    delay = min(float(request.GET.get("delay", 0)), 1.0)
    prefix = request.GET.get("prefix", "line")

    def generate():
        for number in range(1, 6):
            if number > 1 and delay:
                time.sleep(delay)
            yield "%s %d\n" % (prefix, number)

    return StreamingHttpResponse(generate(), content_type="text/plain")


@require_safe
def static_file(request, name):
    """A file from STATIC_ROOT as a FileResponse: greenserve sends it via wsgi.file_wrapper."""
    root = Path(settings.STATIC_ROOT).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise Http404("no such static file")
    return FileResponse(path.open("rb"))


@require_safe
def sleep(request):
    try:
        seconds = float(request.GET.get("seconds", 1))
    except ValueError:
        return JsonResponse({"error": "seconds must be a number"}, status=400)
    seconds = max(0.0, min(seconds, MAX_SLEEP))
    began = time.monotonic()
    time.sleep(seconds)  # cooperative: the greenserve command ran gevent's patch_all first
    # When the sleep began and ended (the server's clock): a client can see sleeps overlap.
    return JsonResponse({"slept": seconds, "began": began, "ended": time.monotonic()})


@require_safe
def outbound(request):
    """An outbound HTTP call with requests while serving (cooperative: the socket is patched)."""
    url = request.GET.get("url", "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.hostname not in LOOPBACK:
        return JsonResponse({"error": "url must be http(s) on 127.0.0.1, ::1 or localhost"}, status=400)
    import requests  # imported by the app, after greenserve patched: urllib3's sockets cooperate

    began = time.monotonic()
    response = requests.get(url, timeout=10)
    return JsonResponse(
        {"status": response.status_code, "body": response.text[:1000], "began": began, "ended": time.monotonic()}
    )
