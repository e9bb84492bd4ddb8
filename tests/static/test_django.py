"""docs/deployment.md's Django recipe, run as written: a project made by ``django-admin
startproject``, ManifestStaticFilesStorage, ``collectstatic``, then ``greenserve --static
/static=./staticfiles myproject.wsgi``. The page Django renders names hashed files; each is served
by greenserve with a year's immutable Cache-Control, the stylesheet's ``url()`` rewritten by
Django to another hashed file that is served too, the admin's own assets, the unhashed copies
with the short max-age, and a 304 to a revalidation."""

import json
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest

from tests.conftest import CLIServer, subprocess_env

pytest.importorskip("django")

SETTINGS_TAIL = '''
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "assets"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
}
'''

URLS = '''
from django.http import HttpResponse
from django.template import engines
from django.urls import path

PAGE = engines["django"].from_string(
    '{% load static %}<link rel="stylesheet" href="{% static "site.css" %}">'
    '<img src="{% static "img/dot.png" %}">'
)


def home(request):
    return HttpResponse(PAGE.render({}, request))


urlpatterns = [path("", home)]
'''
# A 1x1 PNG, and a stylesheet that refers to it: collectstatic rewrites the url() to its hashed name.
DOT = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
CSS = b'body { background: url("img/dot.png"); }\n'


def run(args, cwd):
    done = subprocess.run(args, cwd=cwd, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("django")
    run([sys.executable, "-m", "django", "startproject", "myproject", "."], root)
    with open(root / "myproject" / "settings.py", "a") as settings:
        settings.write(SETTINGS_TAIL)
    (root / "myproject" / "urls.py").write_text(URLS)
    (root / "assets" / "img").mkdir(parents=True)
    (root / "assets" / "site.css").write_bytes(CSS)
    (root / "assets" / "img" / "dot.png").write_bytes(DOT)
    run([sys.executable, "manage.py", "collectstatic", "--noinput"], root)
    server = CLIServer("--static", "/static=./staticfiles", "myproject.wsgi", cwd=str(root)).wait_ready()
    yield root, server
    code, _, err = server.stop()
    assert code == 0, err


def test_the_page_names_hashed_files_that_are_served_immutable(project):
    root, server = project
    status, _, page = get(server.url + "/")
    assert status == 200, page
    css_path, png_path = re.findall(rb'(?:href|src)="(/static/[^"]+)"', page)
    assert re.fullmatch(rb"/static/site\.[0-9a-f]{12}\.css", css_path), page
    assert re.fullmatch(rb"/static/img/dot\.[0-9a-f]{12}\.png", png_path), page

    status, headers, css = get(server.url + css_path.decode())
    assert status == 200
    assert headers["Content-Type"] == "text/css; charset=utf-8"
    assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
    # Django rewrote the stylesheet's url() to the image's hashed name, relative to the sheet.
    referred = re.search(rb'url\("([^"]+)"\)', css).group(1)
    assert b"/static/" + referred == png_path, css

    status, headers, png = get(server.url + png_path.decode())
    assert (status, png) == (200, DOT)
    assert headers["Content-Type"] == "image/png"
    assert headers["Cache-Control"] == "public, max-age=31536000, immutable"

    # A revalidation (a reload that asks anyway) is a 304.
    status, _, body = get(server.url + png_path.decode(), {"If-None-Match": headers["ETag"]})
    assert (status, body) == (304, b"")


def test_the_admins_assets_and_the_unhashed_copies(project):
    root, server = project
    manifest = json.loads((root / "staticfiles" / "staticfiles.json").read_text())["paths"]
    hashed = manifest["admin/css/base.css"]
    status, headers, body = get(server.url + "/static/" + hashed)
    assert status == 200 and body == (root / "staticfiles" / hashed).read_bytes()
    assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
    # collectstatic keeps each file under its own name too: served with the short max-age, so a
    # page that names it sees a deploy within a minute.
    status, headers, body = get(server.url + "/static/site.css")
    assert (status, body) == (200, CSS)
    assert headers["Cache-Control"] == "public, max-age=60"
    # The manifest itself is a file of the directory like any other; Django's own settings are not.
    assert get(server.url + "/static/../myproject/settings.py")[0] == 404
    assert get(server.url + "/static/%2e%2e/myproject/settings.py")[0] == 404
