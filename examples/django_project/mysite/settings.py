"""Settings of the example Django project served by greenserve.

    greenserve --chdir examples/django_project mysite.wsgi:application

No database: sessions are signed cookies, and neither the admin nor auth is installed.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# An example key; set DJANGO_SECRET_KEY in anything real.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "greenserve-example-django-secret-key-not-for-production")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = []

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mysite.urls"
WSGI_APPLICATION = "mysite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "mysite" / "templates"],
        "APP_DIRS": False,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]

DATABASES = {}
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"

# Served by mysite.views.static_file (a FileResponse, which greenserve sends with sendfile).
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "static"

TIME_ZONE = "UTC"
USE_TZ = True

# With DEBUG off, Django mails errors to ADMINS by default; log them to standard error instead,
# where greenserve's own messages go.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
