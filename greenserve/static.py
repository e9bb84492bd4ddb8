"""Static files served by the server itself (``--static URL_PREFIX=DIRECTORY``): the mounts, the
safe resolution of a request's path beneath a mount's directory, RFC 9110's conditional requests
(§13), ranges (§14) and content coding (§12.5.3), and a small cache of open files.

The responder asks ``Static.answer`` for a request whose raw path starts with a mount's prefix
(``Responder._static``) and sends the answer through its own file path (sendfile on plain
sockets, reads over TLS, DATA frames on HTTP/2), so a static request is logged and counted as
any other. The HTTP decisions (``preconditions``, ``byte_range``, ``if_range_holds``,
``choose_encoding``, ``split_target``, ``is_hashed``) are pure functions of their arguments,
tested with byte vectors (tests/static/test_rules.py). docs/static.md is the reference.
"""

import errno
import mimetypes
import os
import re
import stat as stat_module
from email.utils import formatdate, mktime_tz, parsedate_tz
from time import monotonic
from urllib.parse import unquote_to_bytes

from greenserve.http import errors

DEFAULT_MAX_AGE = 60  # seconds, as whitenoise: a changed file reaches browsers within a minute
# A name carrying a hash of its content never changes content: a year, and no revalidation.
IMMUTABLE = "public, max-age=31536000, immutable"
ALLOW = "GET, HEAD"
INDEX = "index.html"
# Files kept open per worker (each with its .br and .gz: up to 3 descriptors, 384 in all, well
# within the open-file limit the start raises for --worker-connections), and how old a cached
# stat may be before the file's path is stat'ed again: an edited file is served within a second.
CACHE_SIZE = 128
REVALIDATE = 1.0
# A file this small is kept in memory with its open descriptor (128 x 3 x 16 KiB: 6 MiB at most
# a worker) and sent with its head in one send, as an application's body is, instead of a send
# of the head and a sendfile: 1 KiB files at 85k req/s against hello's 148k on one core, the
# two system calls and the file path being the difference (docs/performance.md, "Static files").
SMALL_FILE = 16384
# Raw paths whose judging (split_target) is remembered, at most, per worker.
TARGETS_KEPT = 4096
# Precompressed files looked for beside a file, in the order preferred at equal quality
# (brotli is smaller than gzip).
ENCODINGS = (("br", ".br"), ("gzip", ".gz"))

# O_NONBLOCK: opening a FIFO would wait for a writer, blocking the worker's event loop. O_NOCTTY:
# a terminal never becomes the worker's. Types are checked by stat before any open (a device's
# open may act, as a tape's rewinds) and by fstat after it (a path swapped in between).
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_OPEN_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)

# The web's types, right whatever the system's mime.types says (Debian's lacks .mjs and
# .webmanifest; .js is text/javascript by RFC 9239).
TYPES = {
    ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html",
    ".htm": "text/html", ".svg": "image/svg+xml", ".wasm": "application/wasm", ".woff2": "font/woff2",
    ".woff": "font/woff", ".ttf": "font/ttf", ".otf": "font/otf", ".webmanifest": "application/manifest+json",
    ".json": "application/json", ".map": "application/json", ".txt": "text/plain", ".xml": "text/xml",
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
    ".avif": "image/avif", ".ico": "image/vnd.microsoft.icon", ".pdf": "application/pdf", ".mp4": "video/mp4",
    ".webm": "video/webm", ".mp3": "audio/mpeg", ".ogg": "audio/ogg", ".zip": "application/zip",
}
_CHARSET_TYPES = ("text/", "application/json", "application/manifest+json")

# A content hash in a file name (the part before the extension): Django's
# ManifestStaticFilesStorage and webpack write ``name.<hex>.ext`` (app.3f2a9c.js,
# styles.55e7cbb9ba48.css), Vite ``name-<8 base64url>.ext`` (index-BfN2s0Kd.js). A digit and a
# letter are both required, so that words (app.facade.js, jquery-autoplay.js) and dates
# (report-20240101.pdf) are not taken for hashes: a wrong "immutable" would pin a file for a year.
_HASHED = re.compile(
    r"(?:\.(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{6,}"
    r"|-(?=[A-Za-z0-9_-]{0,7}[0-9])(?=[A-Za-z0-9_-]{0,7}[A-Za-z])[A-Za-z0-9_-]{8})(?:\.[A-Za-z0-9]+)+$"
)
_ENTITY_TAG = re.compile(r'(W/)?("[^"]*")')


class SettingsError(ValueError):
    """A mount that cannot be served (its directory missing): the message is one line."""


# --- the settings' values ---------------------------------------------------------------------


def parse_mount(text):
    """``URL_PREFIX=DIRECTORY`` -> ``(prefix, directory)``, the prefix ending in ``/``; ValueError."""
    prefix, sep, directory = text.partition("=")
    prefix = prefix.strip()
    if not sep or not directory:
        raise ValueError("expected URL_PREFIX=DIRECTORY, such as /static=./static, got %r" % (text,))
    if not prefix.startswith("/") or any(char in prefix for char in "?#%\\ \t\0"):
        raise ValueError("a URL prefix is a path such as /static (no query, escapes or spaces), got %r" % (prefix,))
    prefix = prefix.rstrip("/") + "/"
    if prefix == "/":
        raise ValueError("a static mount at / would hide the whole application; mount it at a prefix such as /static")
    if any(segment in (".", "..") for segment in prefix.split("/")):
        raise ValueError("a URL prefix has no . or .. segments, got %r" % (prefix,))
    return prefix, directory


def mount_list(value):
    """The ``static`` setting: a ``PREFIX=DIRECTORY`` string, a list of them, or a dict from
    prefixes to directories -> a list of ``PREFIX=DIRECTORY`` strings, each prefix once."""
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, dict):
        value = ["%s=%s" % (prefix, directory) for prefix, directory in value.items()]
    texts, seen = [], set()
    for item in value:
        if not isinstance(item, str):
            raise ValueError("expected URL_PREFIX=DIRECTORY strings, got %r" % (item,))
        prefix, directory = parse_mount(item)
        if prefix in seen:
            raise ValueError("the URL prefix %s is mounted twice" % prefix)
        seen.add(prefix)
        texts.append("%s=%s" % (prefix.rstrip("/"), os.fspath(directory)))
    return texts


def check_directories(texts, base=None):
    """The mounts with their directories checked and made absolute, from ``base`` (default: the
    current directory, --chdir's at start); SettingsError naming the first that is not a directory."""
    checked = []
    for text in texts:
        prefix, directory = parse_mount(text)
        path = os.path.abspath(directory if base is None else os.path.join(base, directory))
        if not os.path.isdir(path):
            raise SettingsError("--static %s: no such directory: %s" % (text, directory))
        checked.append("%s=%s" % (prefix.rstrip("/"), path))
    return checked


# --- the HTTP rules, pure ----------------------------------------------------------------------


def split_target(rest):
    """The raw path after a mount's prefix -> ``(segments, trailing_slash)``, or None: refused.

    Percent-escapes are decoded exactly once (``%252e`` stays the three characters ``%2e``, a
    name, never ``.``), the result must be strict UTF-8 (overlong forms such as ``%c0%ae`` for
    ``.`` are invalid UTF-8, refused, not normalised), and segments are judged after decoding
    (``..%2f`` is ``../``). Refused: NUL, backslashes (a separator to some file systems and
    proxies), empty segments (``//etc``), ``.`` and ``..``, and names starting with ``.``
    (``.env``, ``.git/``), control characters.
    """
    try:
        raw = rest.encode("latin-1")  # the bytes as received (the parser's str is latin-1)
    except UnicodeEncodeError:
        return None
    if b"%" in raw:
        raw = unquote_to_bytes(raw)
    if b"\\" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    segments = text.split("/")
    trailing = segments[-1] == ""
    if trailing:
        segments.pop()
    for segment in segments:
        if not segment or segment[0] == "." or not segment.isprintable():
            return None  # (isprintable is False for NUL and every control character)
    return segments, trailing


def content_type(name):
    """The Content-Type for a file name, by its extension; text with charset=utf-8."""
    extension = os.path.splitext(name)[1].lower()
    kind = TYPES.get(extension)
    if kind is None:
        kind = mimetypes.guess_type("x" + extension)[0] or "application/octet-stream"
    if kind.startswith(_CHARSET_TYPES):
        kind += "; charset=utf-8"
    return kind


def is_hashed(name):
    """Does the file name carry a hash of its content (see _HASHED)?"""
    return _HASHED.search(name) is not None


def cache_control(name, max_age):
    """The Cache-Control of a file: a year and immutable for a hashed name, else max_age
    (0: ``no-cache``, the client revalidates each time, a 304 when unchanged)."""
    if is_hashed(name):
        return IMMUTABLE
    if max_age <= 0:
        return "no-cache"
    return "public, max-age=%d" % max_age


def entity_tag(size, mtime_ns, inode):
    """A strong ETag from what changes when the file does (RFC 9110 §8.8.3): a rename over it
    changes the inode, an edit the time or the size."""
    return '"%x-%x-%x"' % (size, mtime_ns, inode)


def http_date(seconds):
    return formatdate(seconds, usegmt=True)


def parse_http_date(text):
    """An HTTP-date (IMF-fixdate, RFC 850 or asctime, RFC 9110 §5.6.7) -> seconds, or None."""
    if not text:
        return None
    parsed = parsedate_tz(text)
    if parsed is None:
        return None
    try:
        return mktime_tz(parsed)
    except (OverflowError, ValueError):
        return None


def _tags(text):
    """An If-Match/If-None-Match value -> ``"*"``, or a list of (weak, opaque-tag)."""
    if text.strip() == "*":
        return "*"
    return [(bool(weak), tag) for weak, tag in _ENTITY_TAG.findall(text)]


def _matches_strong(text, etag):
    tags = _tags(text)
    return tags == "*" or (False, etag) in tags


def _matches_weak(text, etag):
    tags = _tags(text)
    return tags == "*" or any(tag == etag for _, tag in tags)


def preconditions(method, if_match, if_unmodified_since, if_none_match, if_modified_since, etag, modified):
    """RFC 9110 §13.2.2's order: 200 (go on), 304 or 412. Header values are None when absent;
    ``modified``: the file's Last-Modified, in whole seconds."""
    if if_match is not None:
        if not _matches_strong(if_match, etag):
            return 412
    elif if_unmodified_since is not None:
        date = parse_http_date(if_unmodified_since)
        if date is not None and modified > date:
            return 412
    if if_none_match is not None:
        if _matches_weak(if_none_match, etag):
            return 304 if method in ("GET", "HEAD") else 412
    elif if_modified_since is not None and method in ("GET", "HEAD"):
        date = parse_http_date(if_modified_since)
        if date is not None and modified <= date:
            return 304
    return 200


def if_range_holds(value, etag, modified):
    """RFC 9110 §13.1.5: does the If-Range validator still name the file? An entity tag must
    match strongly; a date must be the Last-Modified exactly (a weak tag never matches)."""
    value = value.strip()
    if value.startswith('"'):
        return value == etag
    if value.startswith("W/"):
        return False
    date = parse_http_date(value)
    return date is not None and date == modified


UNSATISFIABLE = ()


def _digits(text):
    return text.isascii() and text.isdigit()


def byte_range(header, size):
    """RFC 9110 §14.1.2: a Range value -> ``(first, last)`` (inclusive) to answer 206,
    UNSATISFIABLE (416), or None: ignored, the whole file answered 200 (another unit, a
    syntax error, or several ranges, which a server may answer whole, §14.2)."""
    unit, sep, specs = header.partition("=")
    if not sep or unit.strip().lower() != "bytes" or "," in specs:
        return None
    first, dash, last = specs.strip().partition("-")
    first, last = first.strip(), last.strip()
    if not dash:
        return None
    if not first:
        if not _digits(last):
            return None
        suffix = int(last)
        if suffix == 0 or size == 0:
            return UNSATISFIABLE
        return max(size - suffix, 0), size - 1
    if not _digits(first) or (last and not _digits(last)):
        return None
    start = int(first)
    if last and int(last) < start:
        return None  # invalid (§14.1.1): ignored
    if start >= size:
        return UNSATISFIABLE
    return start, min(int(last), size - 1) if last else size - 1


def choose_encoding(header, available):
    """RFC 9110 §12.5.3: of ``available`` content codings (preferred first), the one the
    Accept-Encoding value ranks highest, or None for the file as it is (identity)."""
    if not header or not available:
        return None
    weights = {}
    for item in header.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        weight = 1.0
        for param in params.split(";"):
            key, _, number = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(number.strip())
                except ValueError:
                    weight = 0.0
                if not 0.0 <= weight <= 1.0:  # (NaN too)
                    weight = 0.0
        weights["gzip" if name == "x-gzip" else name] = weight
    star = weights.get("*", 0.0)
    best, best_weight = None, 0.0
    for coding in available:
        weight = weights.get(coding, star)
        if weight > best_weight:
            best, best_weight = coding, weight
    if best is not None and weights.get("identity", 0.0) > best_weight:
        return None
    return best


# --- open files and their cache ----------------------------------------------------------------


class _Missing(Exception):
    """Nothing servable at the path (absent, refused, or not a regular file): 404."""


class OpenFile:
    """One open file and its validators. Shared by the requests that send it: ``users`` counts
    them, so a file dropped from the cache is closed when the last has sent it."""

    __slots__ = ("fd", "size", "mtime_ns", "inode", "etag", "last_modified", "modified", "users", "dropped", "data")

    def __init__(self, fd, st):
        self.fd = fd
        self.size = st.st_size
        self.mtime_ns = st.st_mtime_ns
        self.inode = st.st_ino
        self.etag = entity_tag(st.st_size, st.st_mtime_ns, st.st_ino)
        self.modified = int(st.st_mtime)
        self.last_modified = http_date(self.modified)
        self.users = 0
        self.dropped = False
        #: the file's bytes, if it is small (SMALL_FILE): sent from memory, never read again
        self.data = None
        if st.st_size <= SMALL_FILE:
            data = os.pread(fd, st.st_size, 0)
            if len(data) == st.st_size:  # (else it changed under us: sendfile sends what is there)
                self.data = data

    def same(self, st):
        return st.st_ino == self.inode and st.st_size == self.size and st.st_mtime_ns == self.mtime_ns

    def release(self):
        self.users -= 1
        if self.dropped and not self.users:
            os.close(self.fd)

    def drop(self):
        self.dropped = True
        # (the bytes of a small file go with it: a Target may still hold its dropped Resource
        # until that path is asked for again, and a request sending them holds its own reference)
        self.data = None
        if not self.users:
            os.close(self.fd)


class Resource:
    """A file served under a URL: its open file and precompressed variants (``files``, by
    coding; None the file itself), its headers, and when its path was last stat'ed."""

    __slots__ = ("path", "files", "codings", "content_type", "cache_control", "checked", "plain", "answers", "whole",
                 "dropped")

    def __init__(self, path, files, max_age):
        name = os.path.basename(path)
        self.path = path
        self.files = files
        self.codings = tuple(coding for coding, _ in ENCODINGS if coding in files)
        self.content_type = content_type(name)
        self.cache_control = cache_control(name, max_age)
        self.checked = monotonic()
        #: by coding, the headers of a GET answered 200 whole (no precondition, no Range): most
        #: requests, their list made once
        self.plain = {}
        #: by coding, that answer itself for a file sent from memory: the same object each time
        #: (an answer without a file holds nothing to release, and nothing changes its headers)
        self.answers = {}
        #: the file itself, when it has no precompressed variant (no coding to choose): the
        #: answer's shortest path
        self.whole = files[None] if not self.codings else None
        #: out of the cache (evicted, or changed on disk): a Target holding it resolves again
        self.dropped = False

    def current(self):
        """Are the files at the path still the ones open (same inode, size, time; the same
        variants present)? A stat per file, once a REVALIDATE at most."""
        for coding, suffix in ((None, ""),) + ENCODINGS:
            try:
                st = os.stat(self.path + suffix)
            except OSError:
                st = None
            held = self.files.get(coding)
            if (st is None) != (held is None) or (held is not None and not held.same(st)):
                return False
        return True

    def drop(self):
        self.dropped = True
        self.answers.clear()  # (their bytes: a Target may hold this Resource a while)
        for file in self.files.values():
            file.drop()


class Answer:
    """What the responder sends: status, headers, and a body (bytes) or ``length`` bytes of
    ``file`` from ``offset`` (the file held until ``release``)."""

    __slots__ = ("status", "headers", "body", "file", "offset", "length")

    def __init__(self, status, headers, body=b"", file=None, offset=0, length=0):
        self.status = status
        self.headers = headers
        self.body = body
        self.file = file
        self.offset = offset
        self.length = length
        if file is not None:
            file.users += 1

    def release(self):
        if self.file is not None:
            self.file.release()
            self.file = None


def _error(status, extra=()):
    status_line, headers, body = errors.error_response(status)
    headers.extend(extra)
    return Answer(status_line, headers, body)


_REDIRECT = object()
# Errors that mean "no file to serve here": missing, not a directory on the way, a symlink
# refused by O_NOFOLLOW, a name too long, or not readable by the worker (a 404, as for a missing
# file: a client learns nothing of what exists).
_NOT_SERVED = frozenset((errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EACCES, errno.EPERM,
                         errno.EISDIR, errno.ENXIO))


class Target:
    """What a raw path was judged to be (split_target, beneath its mount), remembered per raw
    path in ``Static.targets``; and the Resource it led to last, until that Resource is dropped
    or due for revalidation (an answer then skips the cache key's hash and lookup)."""

    __slots__ = ("mount", "segments", "trailing", "key", "resource")

    def __init__(self, mount, segments, trailing):
        self.mount = mount
        self.segments = segments
        self.trailing = trailing
        self.key = (mount.prefix, tuple(segments), trailing)
        self.resource = None


class Mount:
    __slots__ = ("prefix", "root", "root_slash")

    def __init__(self, prefix, directory):
        self.prefix = prefix
        self.root = os.path.realpath(directory)
        self.root_slash = self.root.rstrip("/") + "/"


class Static:
    """The mounts of a server and the cache of their open files (one per worker)."""

    __slots__ = ("mounts", "prefixes", "max_age", "index", "follow_symlinks", "cache_size", "cache", "targets", "stats")

    def __init__(self, texts, max_age=DEFAULT_MAX_AGE, index=False, follow_symlinks=False, cache_size=CACHE_SIZE):
        mounts = [Mount(*parse_mount(text)) for text in texts]
        for mount in mounts:
            if not os.path.isdir(mount.root):
                raise SettingsError("static: no such directory: %s" % mount.root)
        # Longest first: /static/admin/ is chosen over /static/ for its URLs.
        self.mounts = sorted(mounts, key=lambda mount: len(mount.prefix), reverse=True)
        #: what the responder tests a request's raw path against (str.startswith takes a tuple)
        self.prefixes = tuple(mount.prefix for mount in self.mounts)
        self.max_age = max_age
        self.index = index
        self.follow_symlinks = follow_symlinks
        self.cache_size = cache_size
        self.cache = {}
        #: raw path -> what _target made of it
        self.targets = {}
        #: the server's stats.Sink (--metrics-bind, --statsd-host), told of each static request
        self.stats = None

    def close(self):
        for resource in self.cache.values():
            resource.drop()
        self.cache.clear()

    def answer(self, environ, path):
        """The Answer to a request whose raw path (before percent-decoding) is under a mount."""
        if self.stats is not None:
            self.stats.static_request()
        method = environ["REQUEST_METHOD"]
        if method != "GET" and method != "HEAD":
            return _error(405, [("Allow", ALLOW)])
        target = self.targets.get(path)
        if target is None:
            target = self._target(path)
            if target is None:
                return _error(404)
        resource = target.resource
        if resource is None or resource.dropped or monotonic() - resource.checked >= REVALIDATE:
            resource = self._resource(target)
            if resource is None:
                return _error(404)
            if resource is not _REDIRECT:
                target.resource = resource
        if resource is _REDIRECT:
            # A directory's index asked for without the slash: its relative links need it.
            query = environ.get("QUERY_STRING")
            location = path + "/" + ("?" + query if query else "")
            return _error(301, [("Location", location)])
        return self._file_answer(environ, method, resource)

    def _file_answer(self, environ, method, resource):
        file = resource.whole
        if file is None:
            coding = choose_encoding(environ.get("HTTP_ACCEPT_ENCODING"), resource.codings)
            file = resource.files[coding]
        else:
            coding = None
        get = environ.get
        if method == "GET" and get("HTTP_RANGE") is None and get("HTTP_IF_NONE_MATCH") is None and \
                get("HTTP_IF_MODIFIED_SINCE") is None and get("HTTP_IF_MATCH") is None and \
                get("HTTP_IF_UNMODIFIED_SINCE") is None:
            # Most requests: the whole file, 200, the same headers each time (timeit: 1.8 us an
            # answer before, most of it building them), and for a small file the same answer.
            shared = resource.answers.get(coding)
            if shared is not None:
                return shared
            plain = resource.plain.get(coding)
            if plain is None:
                plain = resource.plain[coding] = tuple(
                    self._validators(resource, file) + self._entity(resource, coding) + [("Content-Length", str(file.size))])
            if file.data is not None:
                shared = resource.answers[coding] = Answer("200 OK", list(plain), file.data)
                return shared
            return Answer("200 OK", list(plain), file=file, offset=0, length=file.size)
        headers = self._validators(resource, file)
        status = preconditions(method, get("HTTP_IF_MATCH"), get("HTTP_IF_UNMODIFIED_SINCE"), get("HTTP_IF_NONE_MATCH"),
                               get("HTTP_IF_MODIFIED_SINCE"), file.etag, file.modified)
        if status == 304:
            return Answer("304 Not Modified", headers)
        if status == 412:
            return _error(412, headers)
        headers += self._entity(resource, coding)
        size = file.size
        first, length, status = 0, size, "200 OK"
        wanted = get("HTTP_RANGE")
        if wanted is not None and method == "GET":  # §14.2: Range is defined for GET alone
            if_range = get("HTTP_IF_RANGE")
            span = byte_range(wanted, size) if if_range is None or if_range_holds(if_range, file.etag, file.modified) else None
            if span is UNSATISFIABLE:
                return _error(416, [("Content-Range", "bytes */%d" % size)])
            if span is not None:
                first, last = span
                length, status = last - first + 1, "206 Partial Content"
                headers.append(("Content-Range", "bytes %d-%d/%d" % (first, last, size)))
        headers.append(("Content-Length", str(length)))
        if method == "HEAD":
            return Answer(status, headers)
        if file.data is not None:
            return Answer(status, headers, file.data if length == size else file.data[first:first + length])
        return Answer(status, headers, file=file, offset=first, length=length)

    @staticmethod
    def _validators(resource, file):
        """The headers every answer about the file carries, a 304's included."""
        headers = [("ETag", file.etag), ("Last-Modified", file.last_modified), ("Cache-Control", resource.cache_control)]
        if resource.codings:
            headers.append(("Vary", "Accept-Encoding"))  # RFC 9110 §12.5.5: caches key on it
        return headers

    @staticmethod
    def _entity(resource, coding):
        """The headers that describe the body sent (a 200's or a 206's)."""
        headers = [("Content-Type", resource.content_type)]
        if coding is not None:
            headers.append(("Content-Encoding", coding))
        headers.append(("Accept-Ranges", "bytes"))
        headers.append(("X-Content-Type-Options", "nosniff"))
        return headers

    def _target(self, path):
        """The Target of a raw path (its mount, segments, trailing slash and cache key),
        remembered in ``targets`` (split_target is pure: a path judged once is judged the same again; timeit:
        a fifth of an answer's time), or None: refused (not remembered)."""
        for mount in self.mounts:
            if path.startswith(mount.prefix):
                break
        split = split_target(path[len(mount.prefix):])
        if split is None:
            return None
        targets = self.targets
        if len(targets) >= TARGETS_KEPT:
            targets.clear()  # (a scan of many paths costs their judging again, not memory)
        target = targets[path] = Target(mount, *split)
        return target

    def _resource(self, target):
        """The cached Resource for the target (revalidated once a REVALIDATE), None, or _REDIRECT."""
        cache = self.cache
        key = target.key
        resource = cache.get(key)
        if resource is not None:
            now = monotonic()
            if now - resource.checked < REVALIDATE:
                return resource
            if resource.current():
                resource.checked = now
                return resource
            del cache[key]
            resource.drop()
        try:
            resource = self._load(target.mount, target.segments, target.trailing)
        except _Missing:
            return None
        if resource is _REDIRECT:
            return resource
        if len(cache) >= self.cache_size:
            cache.pop(next(iter(cache))).drop()  # the oldest loaded
        cache[key] = resource
        return resource

    def _load(self, mount, segments, trailing):
        fd, st = self._open(mount, segments)
        if fd is None:  # a directory
            if not self.index:
                raise _Missing
            if not trailing:
                return _REDIRECT
            segments = segments + [INDEX]
            fd, st = self._open(mount, segments)
            if fd is None:
                raise _Missing
        elif trailing:
            os.close(fd)
            raise _Missing  # a file named as a directory (file.txt/)
        files = {}
        try:
            files[None] = OpenFile(fd, st)
            for coding, suffix in ENCODINGS:
                try:
                    fd, st = self._open(mount, segments[:-1] + [segments[-1] + suffix])
                except _Missing:
                    continue
                if fd is not None:
                    files[coding] = OpenFile(fd, st)
        except BaseException:
            # (a read of a small file failed, EIO: its answer is a 500, and a retry must not leak
            # one more descriptor each time until every file is a 404 for want of them)
            for file in files.values():
                file.drop()
            if fd is not None and all(file.fd != fd for file in files.values()):
                os.close(fd)
            raise
        return Resource(os.path.join(mount.root, *segments), files, self.max_age)

    def _open(self, mount, segments):
        """``(fd, stat)`` of the regular file at segments beneath the mount, or ``(None, stat)``
        for a directory; _Missing for anything else or anything outside; OSError for the
        server's own trouble (out of descriptors, a disk error)."""
        path = os.path.join(mount.root, *segments)
        try:
            if self.follow_symlinks:
                return _open_checked(path, None)
            return self._open_beneath(mount, path)
        except OSError as exc:
            if exc.errno in _NOT_SERVED:
                raise _Missing from None
            # The server's own trouble (EMFILE: out of descriptors; EIO): a 500 and its cause in
            # the error log, not a 404 that says the file is not there and that a CDN may keep.
            raise

    def _open_beneath(self, mount, path):
        """Open path, refusing a symlink that leads outside the mount's root or to a hidden
        name. realpath resolves the links; the real path is then opened a component at a time
        with O_NOFOLLOW from the root, so a link swapped in since (a race) is refused too."""
        real = os.path.realpath(path)
        if real == mount.root:
            parts = []
        elif real.startswith(mount.root_slash):
            parts = real[len(mount.root_slash):].split("/")
        else:
            raise _Missing  # a symlink out of the directory
        for part in parts:
            if part.startswith("."):
                raise _Missing  # a link to a hidden name (.env)
        if not parts:
            return None, os.stat(real)
        directory = os.open(mount.root, _OPEN_DIR)
        try:
            for part in parts[:-1]:
                inner = os.open(part, _OPEN_DIR | os.O_NOFOLLOW, dir_fd=directory)
                os.close(directory)
                directory = inner
            return _open_checked(parts[-1], directory)
        finally:
            os.close(directory)


def _open_checked(path, directory):
    """Stat before opening (no open of a device or a FIFO), open without blocking, fstat again."""
    follow = directory is None
    st = os.stat(path, dir_fd=directory, follow_symlinks=follow)
    if stat_module.S_ISDIR(st.st_mode):
        return None, st
    if not stat_module.S_ISREG(st.st_mode):
        raise _Missing
    fd = os.open(path, _OPEN_FILE if follow else _OPEN_FILE | os.O_NOFOLLOW, dir_fd=directory)
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            raise _Missing
    except BaseException:
        os.close(fd)
        raise
    return fd, st
