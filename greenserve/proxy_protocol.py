"""The PROXY protocol header (HAProxy's, versions 1 and 2), sans-I/O: bytes in, one header out.

A TCP load balancer (HAProxy, a cloud network load balancer, stunnel) that cannot add
X-Forwarded-For to HTTP it does not parse says who the client is in a header it sends before
anything else on the connection. ``ProxyHeaderParser`` is fed the connection's first bytes as
they arrive, split anywhere, and hands back a ``ProxyHeader`` once the header is complete, or
raises ``ProxyProtocolError`` as soon as the bytes cannot be one. It never touches a socket;
``connection.py`` reads, and decides what to do with the result.

The rules below are quoted from the specification, haproxy's doc/proxy-protocol.txt
(2020/03/05), section by section, above the code that applies them. Strict, as the HTTP parser
is: whatever does not match exactly is refused, never repaired (§2.1: "Any sequence which does
not exactly match the protocol must be discarded and cause the receiver to abort the
connection").
"""

import ipaddress
import socket

__all__ = ["ProxyHeader", "ProxyHeaderParser", "ProxyProtocolError", "parse_header", "V2_SIGNATURE"]

# §2.1: "The maximum line lengths the receiver must support including the CRLF are: [...]
# worst case (optional fields set to 0xff): "PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff
# 65535 65535\r\n" => 107 chars". "If the CRLF sequence is not found in the first 107
# characters, the receiver should declare the line invalid."
V1_MAX_LENGTH = 107
# §2.1: a string identifying the protocol: "PROXY" ( \x50 \x52 \x4F \x58 \x59 ), then exactly one space.
V1_PREFIX = b"PROXY "
# §2.1: "unknown connection (short form): "PROXY UNKNOWN\r\n" => 15 chars": the shortest v1 line.
V1_MIN_LENGTH = 15

# §2.2: "The binary header format starts with a constant 12 bytes block containing the
# protocol signature: \x0D \x0A \x0D \x0A \x00 \x0D \x0A \x51 \x55 \x49 \x54 \x0A"
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
# §2.2: struct proxy_hdr_v2 { uint8_t sig[12]; uint8_t ver_cmd; uint8_t fam; uint16_t len; }
# "Thus the length of the protocol header in bytes is always exactly 16 + this value."
V2_FIXED_LENGTH = 16
# The length field allows 64 KiB. What a proxy sends is the addresses (at most 216 bytes) and
# a few TLVs (the SNI name, a unique id of at most 128 bytes, the TLS version and cipher):
# well under 1 KiB. A larger header is refused before it is buffered (it is read before the
# connection's first request, under header_timeout, like a request head).
V2_MAX_LENGTH = 4096

# §2.2: "The highest four bits contains the version. [...] it must always be sent as \x2 and
# the receiver must only accept this value." The lowest four bits, the command:
#   \x0 : LOCAL : "the connection was established on purpose by the proxy without being
#         relayed. [...] Such connections exist when the proxy sends health-checks to the
#         server. The receiver must accept this connection as valid and must use the real
#         connection endpoints and discard the protocol block including the family"
#   \x1 : PROXY : "the receiver must then use the information provided in the protocol block"
#   "other values are unassigned [...] Receivers must drop connections presenting unexpected values here."
_V2_VERSION = 0x2
_LOCAL = 0x0
_PROXY = 0x1

# §2.2, the 14th byte: address family (high nibble) and transport protocol (low nibble).
#   family 0x0 AF_UNSPEC, 0x1 AF_INET (4-byte addresses), 0x2 AF_INET6 (16), 0x3 AF_UNIX (108);
#   "other values [...] must be rejected as invalid by receivers".
#   protocol 0x0 UNSPEC, 0x1 STREAM, 0x2 DGRAM; "other values [...] must be rejected as invalid".
# The address block is "source layer 3 address, destination layer 3 address, source layer 4
# address if any, destination layer 4 address if any", in network byte order; so for
#   \x11 TCP over IPv4: "Address length is 2*4 + 2*2 = 12 bytes"
#   \x21 TCP over IPv6: "Address length is 2*16 + 2*2 = 36 bytes"
# "Only the UNSPEC protocol byte (\x00) is mandatory to implement on the receiver. A receiver
# is not required to implement other ones, provided that it automatically falls back to the
# UNSPEC mode for the valid combinations above that it does not support": here TCP over IPv4
# and IPv6 are implemented; UDP and AF_UNIX fall back to UNSPEC, where "the receiver is free
# to accept the connection anyway and use the real endpoint addresses [...] The receiver
# should ignore address information."
_MAX_FAMILY = 0x3
_MAX_PROTOCOL = 0x2
_STREAM = 0x1
# Addresses as text the way getpeername() gives them (inet_ntop: ::ffff:192.0.2.1 for a mapped
# IPv4 address), so REMOTE_ADDR reads the same with and without a proxy in front.
_ADDRESS_SIZES = {0x1: (4, socket.AF_INET), 0x2: (16, socket.AF_INET6)}

# §2.2: TLVs after the addresses: "The first byte is the Type of the vector. The second two
# bytes represent the length in bytes of the value [...] A receiver may choose to skip over
# and ignore the TLVs it is not interested in or it does not understand."
PP2_TYPE_ALPN = 0x01
PP2_TYPE_AUTHORITY = 0x02
PP2_TYPE_CRC32C = 0x03
PP2_TYPE_NOOP = 0x04
PP2_TYPE_UNIQUE_ID = 0x05
PP2_TYPE_SSL = 0x20
# §2.2.6: struct pp2_tlv_ssl { uint8_t client; uint32_t verify; struct pp2_tlv sub_tlv[0]; };
# "The PP2_CLIENT_SSL flag indicates that the client connected over SSL/TLS."
_SSL_TLV_FIXED = 5
PP2_CLIENT_SSL = 0x01


class ProxyProtocolError(ValueError):
    """The bytes are not a valid PROXY protocol header: the connection is closed, nothing answered."""


class ProxyHeader:
    """One parsed header.

    ``local``: True when the header names no client (v2 LOCAL, a health check of the proxy's
    own; v1 UNKNOWN; v2 with a family or protocol not implemented here): the connection's own
    endpoints stand. Otherwise ``source`` is the client's ``(address, port)`` and
    ``destination`` the ``(address, port)`` it connected to, addresses as inet_ntop(3) writes
    them. ``ssl`` is None when the header does not say (v1, v2 without the SSL TLV), else
    whether the client's connection to the proxy used TLS. ``authority`` is the v2 AUTHORITY
    TLV (the client's TLS SNI name) or None; ``tlvs`` every v2 TLV as ``(type, value)`` pairs.
    """

    __slots__ = ("version", "local", "source", "destination", "ssl", "authority", "tlvs")

    def __init__(self, version, local, source=None, destination=None, ssl=None, authority=None, tlvs=()):
        self.version = version
        self.local = local
        self.source = source
        self.destination = destination
        self.ssl = ssl
        self.authority = authority
        self.tlvs = tlvs

    def __repr__(self):
        if self.local:
            return "<ProxyHeader v%d local>" % self.version
        return "<ProxyHeader v%d %s:%d -> %s:%d%s>" % (
            (self.version,) + self.source + self.destination + (" ssl" if self.ssl else "",)
        )


class ProxyHeaderParser:
    """Feed the connection's first bytes; ``feed`` returns the ``ProxyHeader`` once complete.

    ``rest`` then holds the bytes that followed the header in the last piece fed (the start of
    the first request). ``wanted`` says how many more bytes can be read without reading past
    the header's end, for a reader that must leave what follows in the kernel (a TLS handshake).
    Raises ``ProxyProtocolError`` at the first byte that cannot belong to a valid header.
    """

    def __init__(self):
        self._buffer = bytearray()
        self.rest = b""
        self.header = None

    @property
    def wanted(self):
        buffer = self._buffer
        size = len(buffer)
        if buffer[:1] == b"\r":  # version 2: the fixed part, then exactly its length
            if size < V2_FIXED_LENGTH:
                return V2_FIXED_LENGTH - size
            return V2_FIXED_LENGTH + int.from_bytes(buffer[14:16], "big") - size
        if size < V1_MIN_LENGTH:  # unknown yet, or version 1 shorter than its shortest line
            return V1_MIN_LENGTH - size
        # Version 1 without its CRLF yet: it ends two bytes on at the earliest (one after a CR).
        return 1 if buffer[-1:] == b"\r" else 2

    def feed(self, data):
        if self.header is not None:
            raise RuntimeError("the PROXY header is already complete")
        buffer = self._buffer
        start = len(buffer)
        buffer += data
        first = buffer[:1]
        if first == b"\r":
            header, end = self._v2(buffer, start)
        elif first == b"P" or not first:
            header, end = self._v1(buffer, start)
        else:
            raise ProxyProtocolError("the connection did not start with a PROXY protocol header")
        if header is None:
            return None
        self.header = header
        self.rest = bytes(buffer[end:])
        self._buffer = None
        return header

    # --- version 1 ---

    def _v1(self, buffer, start):
        size = len(buffer)
        if buffer[: len(V1_PREFIX)] != V1_PREFIX[:size]:
            raise ProxyProtocolError("the connection did not start with a PROXY protocol header")
        # §2.1: "The receiver must not tolerate a single CR or LF character to end the line when
        # a complete CRLF sequence is expected." Looked for from the first new byte (and the one
        # before it, a CR whose LF has just arrived), so a header fed a byte at a time is O(n).
        end = buffer.find(b"\n", max(start - 1, 0), V1_MAX_LENGTH)
        # The same error whatever the split: a CR counts once the byte after it has arrived
        # within the first 107.
        if end < 0:
            cr = buffer.find(b"\r", 0, V1_MAX_LENGTH)
            if cr >= 0 and cr + 1 < min(size, V1_MAX_LENGTH):
                raise ProxyProtocolError("PROXY v1: a CR not followed by LF")
            if size >= V1_MAX_LENGTH:
                raise ProxyProtocolError("PROXY v1: no CRLF within %d bytes" % V1_MAX_LENGTH)
            return None, 0
        if buffer.find(b"\r", 0, end - 1) >= 0:
            raise ProxyProtocolError("PROXY v1: a CR not followed by LF")
        if buffer[end - 1] != 0x0D:
            raise ProxyProtocolError("PROXY v1: a line ended by LF without CR")
        return _v1_header(bytes(buffer[: end - 1])), end + 1

    # --- version 2 ---

    def _v2(self, buffer, start):
        size = len(buffer)
        if buffer[:12] != V2_SIGNATURE[:size]:
            raise ProxyProtocolError("the connection did not start with a PROXY protocol header")
        if size > 12 and start <= 12:
            version, command = buffer[12] >> 4, buffer[12] & 0x0F
            if version != _V2_VERSION:
                raise ProxyProtocolError("PROXY v2: version %d, not 2" % version)
            if command not in (_LOCAL, _PROXY):
                raise ProxyProtocolError("PROXY v2: unassigned command %d" % command)
        if size > 13 and start <= 13:
            family, protocol = buffer[13] >> 4, buffer[13] & 0x0F
            if family > _MAX_FAMILY:
                raise ProxyProtocolError("PROXY v2: unknown address family %d" % family)
            if protocol > _MAX_PROTOCOL:
                raise ProxyProtocolError("PROXY v2: unknown transport protocol %d" % protocol)
        if size < V2_FIXED_LENGTH:
            return None, 0
        end = V2_FIXED_LENGTH + int.from_bytes(buffer[14:16], "big")
        if end > V2_MAX_LENGTH:
            raise ProxyProtocolError("PROXY v2: a %d-byte header, more than %d" % (end, V2_MAX_LENGTH))
        if size < end:
            return None, 0
        return _v2_header(buffer[12] & 0x0F, buffer[13], bytes(buffer[V2_FIXED_LENGTH:end])), end


def parse_header(data):
    """``(header, rest)`` for bytes holding a whole header; ProxyProtocolError if they do not."""
    parser = ProxyHeaderParser()
    header = parser.feed(data)
    if header is None:
        raise ProxyProtocolError("incomplete PROXY protocol header")
    return header, parser.rest


# §2.1: "exactly one space", "TCP4", "TCP6" or "UNKNOWN", the source and destination addresses,
# the source and destination ports. "For "UNKNOWN", the rest of the line before the CRLF may be
# omitted by the sender, and the receiver must ignore anything presented before the CRLF is
# found." "If the announced transport protocol is "UNKNOWN", then the receiver [...] SHOULD
# accept the connection and use the real connection's parameters as if there were no PROXY
# protocol header on the wire."
def _v1_header(line):
    fields = line.split(b" ")
    protocol = fields[1] if len(fields) > 1 else b""
    if protocol == b"UNKNOWN":
        return ProxyHeader(1, True)
    if protocol == b"TCP4":
        address = _v1_ipv4
    elif protocol == b"TCP6":
        address = _v1_ipv6
    else:
        raise ProxyProtocolError("PROXY v1: protocol %r, not TCP4, TCP6 or UNKNOWN" % _shown(protocol))
    if len(fields) != 6:
        raise ProxyProtocolError("PROXY v1: %r is not 'PROXY %s src dst sport dport'" % (_shown(line), protocol.decode()))
    return ProxyHeader(
        1, False, (address(fields[2]), _v1_port(fields[4])), (address(fields[3]), _v1_port(fields[5]))
    )


_DIGITS = b"0123456789"
_IPV6_CHARS = b"0123456789abcdefABCDEF:."


# §2.1: "IPv4 addresses must be indicated as a series of exactly 4 integers in the range
# [0..255] inclusive written in decimal representation separated by exactly one dot between
# each other. Heading zeroes are not permitted in front of numbers in order to avoid any
# possible confusion with octal numbers."
def _v1_ipv4(text):
    parts = text.split(b".")
    if len(parts) != 4 or not all(_decimal(part, 3) is not None and int(part) <= 255 for part in parts):
        raise ProxyProtocolError("PROXY v1: %r is not an IPv4 address" % _shown(text))
    return text.decode("ascii")


# §2.1: "IPv6 addresses must be indicated as series of sets of 4 hexadecimal digits (upper or
# lower case) delimited by colons between each other, with the acceptance of one double colon
# sequence to replace the largest acceptable range of consecutive zeroes. The total number of
# decoded bits must exactly be 128." Senders write what inet_ntop(3) gives, which shortens
# groups and writes a mapped IPv4 address in dotted form (::ffff:192.0.2.1): both accepted;
# a zone index (%eth0) or anything but hex digits, colons and dots is not.
def _v1_ipv6(text):
    if not text or text.translate(None, _IPV6_CHARS):
        raise ProxyProtocolError("PROXY v1: %r is not an IPv6 address" % _shown(text))
    try:
        packed = ipaddress.IPv6Address(text.decode("ascii")).packed
    except ValueError:
        raise ProxyProtocolError("PROXY v1: %r is not an IPv6 address" % _shown(text)) from None
    return socket.inet_ntop(socket.AF_INET6, packed)


# §2.1: "the TCP source port represented as a decimal integer in the range [0..65535]
# inclusive. Heading zeroes are not permitted".
def _v1_port(text):
    port = _decimal(text, 5)
    if port is None or port > 65535:
        raise ProxyProtocolError("PROXY v1: %r is not a port" % _shown(text))
    return port


def _decimal(text, max_digits):
    """The value of 1 to max_digits decimal digits without a heading zero, else None."""
    if not text or len(text) > max_digits or text.translate(None, _DIGITS) or (text[0] == 0x30 and len(text) > 1):
        return None
    return int(text)


def _v2_header(command, family_protocol, block):
    # §2.2: "Receivers MUST always consider this field to skip the appropriate number of bytes
    # and must not assume zero is presented for LOCAL connections." LOCAL discards the block.
    if command == _LOCAL:
        return ProxyHeader(2, True)
    family, protocol = family_protocol >> 4, family_protocol & 0x0F
    if protocol != _STREAM or family not in _ADDRESS_SIZES:
        return ProxyHeader(2, True)  # UNSPEC, or a combination not implemented: fall back to it
    size, address_family = _ADDRESS_SIZES[family]
    tlv_start = 2 * size + 4
    if len(block) < tlv_start:
        raise ProxyProtocolError(
            "PROXY v2: %d address bytes, %s over TCP needs %d" % (len(block), "IPv4" if size == 4 else "IPv6", tlv_start)
        )
    source = (socket.inet_ntop(address_family, block[:size]), int.from_bytes(block[2 * size : 2 * size + 2], "big"))
    destination = (
        socket.inet_ntop(address_family, block[size : 2 * size]),
        int.from_bytes(block[2 * size + 2 : tlv_start], "big"),
    )
    tlvs = _tlvs(block, tlv_start)
    ssl = authority = None
    for kind, value in tlvs:
        if kind == PP2_TYPE_SSL:
            if len(value) < _SSL_TLV_FIXED:
                raise ProxyProtocolError("PROXY v2: an SSL TLV of %d bytes, shorter than 5" % len(value))
            # The sub-TLVs (TLS version, cipher, client certificate's CN) are the proxy's to log.
            _tlvs(value, _SSL_TLV_FIXED)
            ssl = bool(value[0] & PP2_CLIENT_SSL)
        elif kind == PP2_TYPE_AUTHORITY:
            # §2.2.2: "the host name value passed by the client, as an UTF8-encoded string".
            try:
                authority = value.decode("utf-8")
            except UnicodeDecodeError:
                raise ProxyProtocolError("PROXY v2: an AUTHORITY TLV that is not UTF-8") from None
    return ProxyHeader(2, False, source, destination, ssl, authority, tlvs)


def _tlvs(block, offset):
    """The (type, value) pairs from offset to the end of block; each must fit exactly.

    PP2_TYPE_CRC32C is kept, not verified (§2.2.3 makes checking optional for a receiver): the
    header comes from a peer that is trusted already, over TCP, which has its own checksum.
    """
    tlvs = []
    end = len(block)
    while offset < end:
        if end - offset < 3:
            raise ProxyProtocolError("PROXY v2: %d stray bytes after the TLVs" % (end - offset))
        length = int.from_bytes(block[offset + 1 : offset + 3], "big")
        if offset + 3 + length > end:
            raise ProxyProtocolError("PROXY v2: a TLV of %d bytes overruns the header" % length)
        tlvs.append((block[offset], block[offset + 3 : offset + 3 + length]))
        offset += 3 + length
    return tuple(tlvs)


def _shown(data):
    """Client bytes for an error message: short, printable."""
    return data[:60].decode("ascii", "backslashreplace")
