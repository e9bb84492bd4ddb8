"""The PROXY protocol parser (greenserve/proxy_protocol.py): byte vectors for v1 and v2, valid and
malformed, each fed whole, a byte at a time and split at every position; and the property that
however a generated header (followed by a request) is cut into reads, the result is the same.
"""

import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenserve.proxy_protocol import (
    PP2_TYPE_AUTHORITY,
    PP2_TYPE_SSL,
    V2_SIGNATURE,
    ProxyHeaderParser,
    ProxyProtocolError,
    parse_header,
)

REQUEST = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def v2(command=0x21, family=0x11, block=b"", length=None):
    """A v2 header: signature, version/command, family/protocol, length, block."""
    return V2_SIGNATURE + bytes([command, family]) + struct.pack("!H", len(block) if length is None else length) + block


def tlv(kind, value):
    return bytes([kind]) + struct.pack("!H", len(value)) + value


def ipv4_block(src="203.0.113.7", dst="10.0.0.2", sport=51000, dport=443):
    return socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!HH", sport, dport)


def ipv6_block(src="2001:db8::7", dst="2001:db8::2", sport=51000, dport=443):
    pack = lambda a: socket.inet_pton(socket.AF_INET6, a)  # noqa: E731
    return pack(src) + pack(dst) + struct.pack("!HH", sport, dport)


def feed_split(data, cuts):
    """Feed data cut at the given positions; (header, rest) once complete, (None, b"") if never."""
    parser = ProxyHeaderParser()
    start = 0
    for cut in list(cuts) + [len(data)]:
        piece = data[start:cut]
        start = cut
        header = parser.feed(piece)
        if header is not None:
            return header, parser.rest + data[start:]
    return None, b""


def every_way(data):
    """(header, rest) for data fed whole, a byte at a time, and cut once at every position; all
    must agree (the same ProxyProtocolError from all, or the same result)."""
    ways = [[], list(range(1, len(data)))] + [[cut] for cut in range(1, len(data))]
    results = []
    for cuts in ways:
        try:
            header, rest = feed_split(data, cuts)
        except ProxyProtocolError as exc:
            results.append(("error", str(exc)))
            last_error = exc
            continue
        results.append(("ok", (_as_tuple(header), rest)))
    kinds = {kind for kind, _ in results}
    assert len(kinds) == 1, "split-dependent result for %r: %r" % (data, results)
    values = {value for _, value in results}
    assert len(values) == 1, "split-dependent result for %r: %r" % (data, values)
    if kinds == {"error"}:
        raise last_error
    return results[0][1]


def _as_tuple(header):
    if header is None:
        return None
    return (header.version, header.local, header.source, header.destination, header.ssl, header.authority, header.tlvs)


# --- version 1 ---

V1_VALID = [
    # the specification's own example (§2.1)
    (b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n", (1, False, ("192.168.0.1", 56324), ("192.168.0.11", 443))),
    (b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
     (1, False, ("255.255.255.255", 65535), ("255.255.255.255", 65535))),
    (b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n", (1, False, ("0.0.0.0", 0), ("0.0.0.0", 0))),
    (b"PROXY TCP6 2001:DB8::1 2001:db8:0:0:0:0:0:2 1 2\r\n", (1, False, ("2001:db8::1", 1), ("2001:db8::2", 2))),
    (b"PROXY TCP6 ::ffff:192.0.2.1 ::1 8080 80\r\n", (1, False, ("::ffff:192.0.2.1", 8080), ("::1", 80))),
    (b"PROXY TCP6 " + b":".join([b"ffff"] * 8) + b" " + b":".join([b"ffff"] * 8) + b" 65535 65535\r\n",
     (1, False, ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535), ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535))),
    (b"PROXY UNKNOWN\r\n", (1, True, None, None)),
    # §2.1: for UNKNOWN "the receiver must ignore anything presented before the CRLF"
    (b"PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n", (1, True, None, None)),
    (b"PROXY UNKNOWN " + b":".join([b"ffff"] * 8) + b" " + b":".join([b"ffff"] * 8) + b" 65535 65535\r\n",
     (1, True, None, None)),  # 107 bytes: the longest line (§2.1)
]


@pytest.mark.parametrize("data, expected", V1_VALID, ids=[repr(d[:30]) for d, _ in V1_VALID])
def test_v1_valid(data, expected):
    header, rest = every_way(data + REQUEST)
    assert header[:4] == expected
    assert header[4] is None  # v1 says nothing of TLS
    assert rest == REQUEST


def test_v1_longest_line_is_107_bytes():
    line = V1_VALID[-1][0]
    assert len(line) == 107
    every_way(line)  # accepted
    with pytest.raises(ProxyProtocolError, match="no CRLF within 107"):
        every_way(line[:-2] + b"0\r\n")  # 108


V1_INVALID = [
    # not a PROXY header at all: the receiver "MUST not try to guess" (§2)
    (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "did not start with a PROXY"),
    (b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "did not start"),
    (b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"),
    (b"PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n", "did not start"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(20), "did not start"),  # a TLS ClientHello
    # the line's end
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "LF without CR"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX\r\n", "CR not followed by LF"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", "CR not followed by LF"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 " + b"0" * 80 + b"\r\n", "no CRLF within 107"),
    (b"PROXY UNKNOWN" + b" " * 100 + b"\r\n", "no CRLF within 107"),
    # the protocol
    (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"),
    (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"),
    (b"PROXY \r\n", "protocol"),
    (b"PROXY\r\n", "did not start"),
    (b"PROXY UNKNOWNX\r\n", "protocol"),
    # fields: count and single spaces
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "is not 'PROXY TCP4"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "is not 'PROXY TCP4"),
    (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "is not 'PROXY TCP4"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "is not 'PROXY TCP4"),
    (b"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n", "is not 'PROXY TCP4"),
    # addresses
    (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", "not an IPv4"),
    (b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n", "not an IPv4"),
    (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", "not an IPv4"),
    (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "not an IPv4"),  # octal confusion (§2.1)
    (b"PROXY TCP4 1.2.3.4 5.6.7.-8 1 2\r\n", "not an IPv4"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.+8 1 2\r\n", "not an IPv4"),
    (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "not an IPv4"),  # family mismatch
    (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "not an IPv6"),
    (b"PROXY TCP6 ::1 ::1::2 1 2\r\n", "not an IPv6"),
    (b"PROXY TCP6 ::1%eth0 ::1 1 2\r\n", "not an IPv6"),
    (b"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n", "not an IPv6"),
    (b"PROXY TCP6 [::1] ::1 1 2\r\n", "not an IPv6"),
    (b"PROXY TCP4 localhost 5.6.7.8 1 2\r\n", "not an IPv4"),
    # ports
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 0x50\r\n", "not a port"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \xd9\xa1\r\n", "not a port"),  # a non-ASCII digit
]


@pytest.mark.parametrize("data, message", V1_INVALID, ids=[repr(d[:40]) for d, _ in V1_INVALID])
def test_v1_invalid(data, message):
    with pytest.raises(ProxyProtocolError, match=message):
        every_way(data + REQUEST)


def test_v1_refused_at_the_first_wrong_byte():
    parser = ProxyHeaderParser()
    assert parser.feed(b"PROX") is None
    with pytest.raises(ProxyProtocolError):
        parser.feed(b"I")
    with pytest.raises(ProxyProtocolError):
        ProxyHeaderParser().feed(b"G")


# --- version 2 ---

SSL_TLV = tlv(PP2_TYPE_SSL, bytes([0x01]) + bytes(4) + tlv(0x21, b"TLSv1.3") + tlv(0x23, b"TLS_AES_128_GCM_SHA256"))

V2_VALID = [
    (v2(0x21, 0x11, ipv4_block()), (2, False, ("203.0.113.7", 51000), ("10.0.0.2", 443), None, None)),
    (v2(0x21, 0x21, ipv6_block()), (2, False, ("2001:db8::7", 51000), ("2001:db8::2", 443), None, None)),
    (v2(0x21, 0x21, ipv6_block(src="::ffff:192.0.2.1")),
     (2, False, ("::ffff:192.0.2.1", 51000), ("2001:db8::2", 443), None, None)),
    # the TLS TLV (HAProxy's send-proxy-v2-ssl) and the SNI name
    (v2(0x21, 0x11, ipv4_block() + SSL_TLV + tlv(PP2_TYPE_AUTHORITY, "bücher.example".encode())),
     (2, False, ("203.0.113.7", 51000), ("10.0.0.2", 443), True, "bücher.example")),
    # the TLV present with PP2_CLIENT_SSL clear: a plain client
    (v2(0x21, 0x11, ipv4_block() + tlv(PP2_TYPE_SSL, bytes(5))),
     (2, False, ("203.0.113.7", 51000), ("10.0.0.2", 443), False, None)),
    # unknown TLVs are skipped, empty ones are fine
    (v2(0x21, 0x11, ipv4_block() + tlv(0x04, b"") + tlv(0xE0, b"x" * 300)),
     (2, False, ("203.0.113.7", 51000), ("10.0.0.2", 443), None, None)),
    # LOCAL (health checks): the endpoints stand, whatever the block holds (§2.2)
    (v2(0x20, 0x00), (2, True, None, None, None, None)),
    (v2(0x20, 0x11, ipv4_block()), (2, True, None, None, None, None)),
    (v2(0x20, 0x00, b"\xff" * 7), (2, True, None, None, None, None)),
    # UNSPEC, and valid combinations not implemented here, fall back to UNSPEC (§2.2)
    (v2(0x21, 0x00), (2, True, None, None, None, None)),
    (v2(0x21, 0x12, ipv4_block()), (2, True, None, None, None, None)),  # UDP over IPv4
    (v2(0x21, 0x31, bytes(216)), (2, True, None, None, None, None)),  # unix stream
    (v2(0x21, 0x10, ipv4_block()), (2, True, None, None, None, None)),  # AF_INET, UNSPEC protocol
]


@pytest.mark.parametrize("data, expected", V2_VALID, ids=[d[12:16].hex() + "-" + str(len(d)) for d, _ in V2_VALID])
def test_v2_valid(data, expected):
    header, rest = every_way(data + REQUEST)
    assert header[:6] == expected
    assert rest == REQUEST


def test_v2_tlvs_are_kept():
    header, _ = parse_header(v2(0x21, 0x11, ipv4_block() + tlv(0x05, b"id-1") + SSL_TLV))
    assert header.tlvs[0] == (0x05, b"id-1")
    assert header.tlvs[1][0] == PP2_TYPE_SSL


V2_INVALID = [
    (V2_SIGNATURE[:5] + b"\x01" + V2_SIGNATURE[6:] + bytes([0x21, 0x11, 0, 12]) + ipv4_block(), "did not start"),
    (V2_SIGNATURE[:-1] + b"\x00" + bytes([0x21, 0x11, 0, 12]) + ipv4_block(), "did not start"),
    (b"\r\n\r\nGET / HTTP/1.1\r\n\r\n", "did not start"),
    (v2(0x11, 0x11, ipv4_block()), "version 1, not 2"),
    (v2(0x31, 0x11, ipv4_block()), "version 3, not 2"),
    (v2(0x22, 0x11, ipv4_block()), "unassigned command 2"),
    (v2(0x2F, 0x11, ipv4_block()), "unassigned command 15"),
    (v2(0x21, 0x41, ipv4_block()), "unknown address family 4"),
    (v2(0x21, 0xF1, ipv4_block()), "unknown address family 15"),
    (v2(0x21, 0x13, ipv4_block()), "unknown transport protocol 3"),
    # the length against the addresses it must hold
    (v2(0x21, 0x11, ipv4_block()[:11]), "11 address bytes"),
    (v2(0x21, 0x21, ipv4_block()), "12 address bytes, IPv6"),
    (v2(0x21, 0x11, b""), "0 address bytes"),
    # TLVs that do not fit
    (v2(0x21, 0x11, ipv4_block() + b"\x04\x00"), "2 stray bytes"),
    (v2(0x21, 0x11, ipv4_block() + b"\x04\x00\x05abc"), "overruns"),
    (v2(0x21, 0x11, ipv4_block() + tlv(PP2_TYPE_SSL, b"\x01\x00\x00")), "SSL TLV of 3 bytes"),
    (v2(0x21, 0x11, ipv4_block() + tlv(PP2_TYPE_SSL, b"\x01" + bytes(4) + b"\x21\x00\x09TLS")), "overruns"),
    (v2(0x21, 0x11, ipv4_block() + tlv(PP2_TYPE_AUTHORITY, b"\xff\xfe")), "not UTF-8"),
    # oversized
    (v2(0x21, 0x11, ipv4_block() + tlv(0xE0, bytes(4096))), "more than 4096"),
    (v2(0x21, 0x11, b"", length=65535), "more than 4096"),
]


@pytest.mark.parametrize("data, message", V2_INVALID, ids=[str(i) for i in range(len(V2_INVALID))])
def test_v2_invalid(data, message):
    with pytest.raises(ProxyProtocolError, match=message):
        every_way(data + REQUEST)


def test_v2_oversized_refused_before_its_bytes_arrive():
    parser = ProxyHeaderParser()
    with pytest.raises(ProxyProtocolError, match="65551-byte header"):
        parser.feed(V2_SIGNATURE + b"\x21\x11\xff\xff")


def test_v2_bad_version_refused_at_its_byte():
    parser = ProxyHeaderParser()
    assert parser.feed(V2_SIGNATURE) is None
    with pytest.raises(ProxyProtocolError, match="version"):
        parser.feed(b"\x11")


def test_incomplete_header_is_not_a_header():
    for data in (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r", v2(0x21, 0x11, ipv4_block())[:-1], b"", b"\r\n\r\n\x00"):
        assert feed_split(data, []) == (None, b"")
        with pytest.raises(ProxyProtocolError, match="incomplete"):
            parse_header(data)


# --- wanted: reading exactly the header, never past it (PROXY before a TLS handshake) ---


@pytest.mark.parametrize(
    "data",
    [d for d, _ in V1_VALID] + [d for d, _ in V2_VALID],
    ids=lambda d: repr(d[:20]),
)
def test_reading_wanted_bytes_stops_exactly_at_the_header_end(data):
    stream = data + b"\x16\x03\x01"  # what follows must stay unread
    parser = ProxyHeaderParser()
    taken = 0
    header = None
    while header is None:
        want = parser.wanted
        assert want > 0
        header = parser.feed(stream[taken : taken + want])
        taken += want
        assert taken <= len(data)
    assert taken == len(data)
    assert parser.rest == b""


# --- the property: however the bytes are split, the same result ---

ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: "%d.%d.%d.%d" % t)
ipv6 = st.binary(min_size=16, max_size=16).map(lambda b: socket.inet_ntop(socket.AF_INET6, b))
ports = st.integers(0, 65535)


@st.composite
def headers(draw):
    """(bytes, expected (version, local, source, destination, ssl)) for a valid header."""
    kind = draw(st.sampled_from(["v1-4", "v1-6", "v1-unknown", "v2-4", "v2-6", "v2-local"]))
    if kind == "v1-unknown":
        return b"PROXY UNKNOWN\r\n", (1, True, None, None, None)
    if kind == "v2-local":
        return v2(0x20, 0x00, draw(st.binary(max_size=40))), (2, True, None, None, None)
    six = kind.endswith("6")
    address = ipv6 if six else ipv4
    src, dst, sport, dport = draw(address), draw(address), draw(ports), draw(ports)
    if kind.startswith("v1"):
        line = "PROXY TCP%s %s %s %d %d\r\n" % ("6" if six else "4", src, dst, sport, dport)
        return line.encode(), (1, False, (src, sport), (dst, dport), None)
    block = (ipv6_block if six else ipv4_block)(src, dst, sport, dport)
    ssl = draw(st.sampled_from([None, True, False]))
    extra = draw(st.lists(st.tuples(st.sampled_from([0x01, 0x04, 0x05, 0xE1]), st.binary(max_size=20)), max_size=3))
    tlvs = b"".join(tlv(k, v) for k, v in extra)
    if ssl is not None:
        tlvs += tlv(PP2_TYPE_SSL, bytes([0x01 if ssl else 0x00]) + bytes(4))
    return v2(0x21, 0x21 if six else 0x11, block + tlvs), (2, False, (src, sport), (dst, dport), ssl)


@settings(max_examples=150, deadline=None)
@given(headers(), st.binary(max_size=30), st.data())
def test_any_split_gives_the_same_header(header_and_expected, trailing, data):
    encoded, expected = header_and_expected
    stream = encoded + trailing
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=8))))
    cuts = [cut for cut in cuts if 0 < cut < len(stream)]
    header, rest = feed_split(stream, cuts)
    assert _as_tuple(header)[:5] == expected
    assert rest == trailing


@settings(max_examples=150, deadline=None)
@given(headers(), st.data())
def test_any_corruption_is_refused_or_still_valid_whatever_the_split(header_and_expected, data):
    # One byte changed: whatever the parser decides, it decides the same at every split.
    encoded, _ = header_and_expected
    position = data.draw(st.integers(0, len(encoded) - 1))
    corrupted = encoded[:position] + bytes([data.draw(st.integers(0, 255))]) + encoded[position + 1 :]
    try:
        every_way(corrupted + REQUEST)
    except ProxyProtocolError:
        pass
