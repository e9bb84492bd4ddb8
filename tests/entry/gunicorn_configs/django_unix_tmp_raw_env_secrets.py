# Written for greenserve's corpus; stands for the gunicorn configuration of paulo20223/itn_blog (gunicorn.py): a unix:/tmp socket, daemon = False, raw_env as a list carrying the settings module and database credentials.
bind = "unix:/tmp/blog_site.sock"
backlog = 512
daemon = False

raw_env = [
    "DJANGO_SETTINGS_MODULE=blog.settings.prod",
    "DATABASE_HOST=127.0.0.1",
    "DATABASE_PASSWORD=not-a-secret",
]
