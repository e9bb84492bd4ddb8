"""greenserve.static's open-file cache, in-process: bounded, revalidated, and a file dropped from it
while a response still sends it stays open until that response releases it."""

import os

import pytest

from greenserve import static
from greenserve.static import Static


def _environ(**headers):
    environ = {"REQUEST_METHOD": "GET"}
    environ.update({"HTTP_" + name.upper(): value for name, value in headers.items()})
    return environ


def _names(fd):
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None


@pytest.fixture
def root(tmp_path):
    for index in range(4):
        (tmp_path / ("f%d.txt" % index)).write_bytes(b"file %d\n" % index)
    return tmp_path


def test_bounded_and_a_dropped_file_outlives_its_last_response(root, monkeypatch):
    monkeypatch.setattr(static, "SMALL_FILE", -1)  # (sent from the descriptor, not from memory)
    mounts = Static(["/s=%s" % root], cache_size=2)
    held = mounts.answer(_environ(), "/s/f0.txt")
    assert held.status == "200 OK" and os.pread(held.file.fd, 100, 0) == b"file 0\n"
    fd = held.file.fd
    for index in (1, 2, 3):
        answer = mounts.answer(_environ(), "/s/f%d.txt" % index)
        answer.release()
    assert len(mounts.cache) == 2  # f0 was dropped from the cache...
    assert _names(fd) == str(root / "f0.txt")  # ...but its response still holds it open
    held.release()
    assert _names(fd) != str(root / "f0.txt")  # closed by the last release
    mounts.close()


def test_a_changed_file_is_reopened_after_revalidation(root, monkeypatch):
    monkeypatch.setattr(static, "REVALIDATE", 0.0)
    monkeypatch.setattr(static, "SMALL_FILE", -1)  # (sent from the descriptor, not from memory)
    mounts = Static(["/s=%s" % root])
    first = mounts.answer(_environ(), "/s/f1.txt")
    etag = dict(first.headers)["ETag"]
    first.release()
    replacement = root / "new.tmp"
    replacement.write_bytes(b"changed, and longer\n")
    os.replace(replacement, root / "f1.txt")
    second = mounts.answer(_environ(), "/s/f1.txt")
    assert dict(second.headers)["ETag"] != etag
    assert os.pread(second.file.fd, 100, 0) == b"changed, and longer\n"
    second.release()
    # A .gz appearing beside it is found at the next revalidation, with Vary.
    (root / "f1.txt.gz").write_bytes(b"gz")
    third = mounts.answer(_environ(accept_encoding="gzip"), "/s/f1.txt")
    assert ("Content-Encoding", "gzip") in third.headers and ("Vary", "Accept-Encoding") in third.headers
    third.release()
    mounts.close()


def test_within_the_revalidation_period_no_stat_is_made(root, monkeypatch):
    monkeypatch.setattr(static, "REVALIDATE", 3600.0)  # (no clock in the test)
    mounts = Static(["/s=%s" % root])
    mounts.answer(_environ(), "/s/f2.txt").release()
    calls = []
    real_stat = os.stat
    monkeypatch.setattr(static.os, "stat", lambda *args, **kwargs: calls.append(args) or real_stat(*args, **kwargs))
    mounts.answer(_environ(), "/s/f2.txt").release()
    assert calls == []  # served from the cache: no system call for the path
    mounts.close()


@pytest.mark.parametrize("sendfile", [True, False])
def test_a_file_truncated_under_its_response_closes_the_connection(root, monkeypatch, sendfile):
    """Truncated in place while its stat is cached: the head announced the old length, so the
    connection closes short (the client sees it), one error-log line says why, and the server
    serves on."""
    from tests.conftest import Client, ServerThread, hello_app

    monkeypatch.setattr(static, "REVALIDATE", 3600.0)  # the cached size stays the old one
    big = root / "big.bin"
    big.write_bytes(b"x" * 300000)
    server = ServerThread(hello_app, static={"/s": str(root)}, sendfile=sendfile).start()
    try:
        with Client(server.address) as client:
            client.request("GET", "/s/big.bin")
            assert len(client.read_response().body) == 300000
        os.truncate(big, 1000)
        with Client(server.address) as client:
            client.request("GET", "/s/big.bin")
            data = client.read_until_close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert b"Content-Length: 300000" in head and len(body) == 1000
        assert "static file: file ended 299000 bytes short" in server.errors.getvalue()
        with Client(server.address) as client:
            assert client.get("/other").status == 200
    finally:
        server.stop()


def test_a_small_file_is_sent_from_memory_and_renewed_with_it(root, monkeypatch):
    # A file of SMALL_FILE bytes or less goes with its head in one send, from memory read when
    # it was opened; a Range is a slice of it; a changed file brings its new bytes.
    monkeypatch.setattr(static, "REVALIDATE", 0.0)
    mounts = Static(["/s=%s" % root])
    whole = mounts.answer(_environ(), "/s/f1.txt")
    assert whole.status == "200 OK" and whole.file is None and whole.body == b"file 1\n"
    assert dict(whole.headers)["Content-Length"] == "7"
    whole.release()
    part = mounts.answer(_environ(range="bytes=2-3"), "/s/f1.txt")
    assert part.status == "206 Partial Content" and part.body == b"le" and dict(part.headers)["Content-Length"] == "2"
    part.release()
    head = mounts.answer(dict(_environ(), REQUEST_METHOD="HEAD"), "/s/f1.txt")
    assert head.body == b"" and dict(head.headers)["Content-Length"] == "7"
    head.release()
    replacement = root / "new.tmp"
    replacement.write_bytes(b"changed\n")
    os.replace(replacement, root / "f1.txt")
    again = mounts.answer(_environ(), "/s/f1.txt")
    assert again.body == b"changed\n"
    again.release()
    # One byte over the bound: from the descriptor.
    (root / "big.txt").write_bytes(b"b" * (static.SMALL_FILE + 1))
    big = mounts.answer(_environ(), "/s/big.txt")
    assert big.file is not None and big.length == static.SMALL_FILE + 1
    big.release()
    mounts.close()


def test_a_paths_judging_is_remembered_within_a_bound(root, monkeypatch):
    # split_target is pure, so a path's judging is remembered (a fifth of an answer's time);
    # what is remembered is bounded, refusals are not kept, and the file is still looked up.
    monkeypatch.setattr(static, "TARGETS_KEPT", 3)
    monkeypatch.setattr(static, "REVALIDATE", 0.0)
    mounts = Static(["/s=%s" % root])
    for index in range(5):
        mounts.answer(_environ(), "/s/f%d.txt" % (index % 4)).release()
        assert len(mounts.targets) <= 3
    assert mounts.answer(_environ(), "/s/../etc/passwd").status.startswith("404")
    assert "/s/../etc/passwd" not in mounts.targets
    mounts.answer(_environ(), "/s/f0.txt").release()
    os.unlink(root / "f0.txt")
    assert mounts.answer(_environ(), "/s/f0.txt").status.startswith("404")  # remembered, yet gone
    mounts.close()


def test_a_file_that_fails_to_load_leaks_no_descriptor(root, monkeypatch):
    # A small file's read failing (EIO from a failing disk) is a 500 for that request; before,
    # each retry left its descriptors open (the file's and its .gz's), until the worker ran out
    # and every static file was a 404.
    (root / "f0.txt.gz").write_bytes(b"gzipped stand-in")
    mounts = Static(["/s=%s" % root])
    before = len(os.listdir("/proc/self/fd"))

    def failing_pread(*args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(static.os, "pread", failing_pread)
    for _ in range(20):
        with pytest.raises(OSError, match="Input/output error"):
            mounts.answer(_environ(), "/s/f0.txt")
    assert len(os.listdir("/proc/self/fd")) == before
    monkeypatch.undo()
    answer = mounts.answer(_environ(), "/s/f0.txt")
    assert answer.status == "200 OK" and answer.body == b"file 0\n"
    mounts.close()


def test_out_of_descriptors_is_the_servers_trouble_not_a_missing_file(root, monkeypatch):
    # EMFILE (a worker at its open-file limit) was a 404, as if the file were not there (and a
    # CDN may keep a 404): now it is raised, which the responder answers 500 with the error in
    # the error log; a missing file is still a 404.
    mounts = Static(["/s=%s" % root])
    real_open = os.open

    def out_of_descriptors(path, *args, **kwargs):
        if str(path).endswith("f0.txt"):
            raise OSError(24, "Too many open files")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(static.os, "open", out_of_descriptors)
    with pytest.raises(OSError, match="Too many open files"):
        mounts.answer(_environ(), "/s/f0.txt")
    assert mounts.answer(_environ(), "/s/f1.txt").status == "200 OK"
    assert mounts.answer(_environ(), "/s/nothere.txt").status == "404 Not Found"
    monkeypatch.undo()
    assert mounts.answer(_environ(), "/s/f0.txt").status == "200 OK"
    mounts.close()
