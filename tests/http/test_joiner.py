"""The builds' b"".join for response heads and batches (http/_chttp.Joiner, http/_pyhttp.Joiner)."""

import pytest

from greenserve._accel import compiled
from greenserve.http import _pyhttp

CASES = [
    [],
    [b""],
    [b"HTTP/1.1 200 OK\r\n"],
    [b"HTTP/1.1 200 OK\r\n", b"", b"Content-Length: 2\r\n", b"\r\n"],
    [b"x" * 70000, b"y"],
    [bytearray(b"ab"), b"c"],  # not bytes: bytes.join's way
    [memoryview(b"ab"), b"c"],
]


def joiners():
    found = [_pyhttp.Joiner()]
    if compiled():  # (the pure build cannot import the C one: it cimports compiled modules)
        from greenserve.http import _chttp

        found.append(_chttp.Joiner())
    return found


@pytest.mark.parametrize("pieces", CASES, ids=range(len(CASES)))
def test_each_build_joins_as_bytes_join_does(pieces):
    for joiner in joiners():
        assert joiner.join(list(pieces)) == b"".join(pieces)


def test_each_build_refuses_text_as_bytes_join_does():
    for joiner in joiners():
        with pytest.raises(TypeError):
            joiner.join([b"a", "b"])
