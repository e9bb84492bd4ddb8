"""The character classes of RFC 9110/9112 as byte strings, and the numbers that bound a request.

Each class is written next to the ABNF it comes from, so a strictness rule reads like the RFC.
They are byte strings meant for ``bytes.translate(None, CLASS)``: deleting every allowed byte
leaves the disallowed ones, so "is this all tchar?" is one C-level pass with no regex and no
Python loop (``not value.translate(None, TCHAR)``).
"""

DIGIT = b"0123456789"
HEXDIG = b"0123456789abcdefABCDEF"
ALPHA = bytes(range(ord("a"), ord("z") + 1)) + bytes(range(ord("A"), ord("Z") + 1))

# RFC 9110 §5.6.2
#   tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
#           "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
#   token = 1*tchar
TCHAR = b"!#$%&'*+-.^_`|~" + DIGIT + ALPHA

# RFC 5234 B.1: VCHAR = %x21-7E; RFC 9110 §5.5: obs-text = %x80-FF
VCHAR = bytes(range(0x21, 0x7F))
OBS_TEXT = bytes(range(0x80, 0x100))

# RFC 9110 §5.5
#   field-value   = *field-content
#   field-content = field-vchar [ 1*( SP / HTAB / field-vchar ) field-vchar ]
#   field-vchar   = VCHAR / obs-text
# So a value may hold SP and HTAB but no other control character: NUL, bare CR and LF,
# DEL and the rest of CTL are all invalid (RFC 9110 §5.5: "Field values containing CR, LF,
# or NUL characters are invalid and dangerous").
FIELD_VALUE_CHARS = VCHAR + OBS_TEXT + b" \t"

# Every byte that may appear anywhere in a request head (request-line, field lines and the
# CRLFs between them). The head is checked against this once, as a whole; CR and LF are then
# checked to come only in CRLF pairs (RFC 9112 §2.2: a bare CR is invalid).
HEAD_CHARS = FIELD_VALUE_CHARS + b"\r\n"

# RFC 9112 §3.2: request-target is origin-form / absolute-form / authority-form / asterisk-form,
# all made of URI characters (RFC 3986), which are a subset of VCHAR. Like h11 we also accept
# obs-text (raw UTF-8 that some clients send unencoded) but never a control character or space.
TARGET_CHARS = VCHAR + OBS_TEXT

# RFC 9110 §7.2, RFC 3986 §3.2.2:
#   Host = uri-host [ ":" port ]
#   uri-host = IP-literal / IPv4address / reg-name
#   reg-name = *( unreserved / pct-encoded / sub-delims )
# unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~"; sub-delims = "!" / "$" / "&" / "'" / "(" /
# ")" / "*" / "+" / "," / ";" / "="; IP-literal adds "[", "]" and ":"; pct-encoded adds "%".
HOST_CHARS = ALPHA + DIGIT + b"-._~" + b"!$&'()*+,;=" + b"%" + b":[]"

# RFC 9112 §7.1.1
#   chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
#   chunk-ext-val  = token / quoted-string
# quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE, qdtext = HTAB / SP / %x21 / %x23-5B /
# %x5D-7E / obs-text (RFC 9110 §5.6.4). The extension is checked by the chunked reader.
QDTEXT = b"\t !" + bytes(range(0x23, 0x5C)) + bytes(range(0x5D, 0x7F)) + OBS_TEXT
WHITESPACE = " \t"  # OWS / BWS = *( SP / HTAB ), as str for str.strip()

# Methods that are valid tokens by construction; anything else is checked against TCHAR.
KNOWN_METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT")
)

# RFC 9112 §7.1: chunk-size = 1*HEXDIG. We refuse sizes of more than 16 hex digits (2**64):
# a longer one is an overflow attempt, not a real chunk (the smuggling attacks on servers that
# parse chunk sizes into fixed-width integers use exactly these).
MAX_CHUNK_SIZE_DIGITS = 16
# The chunk-size line holds a size and optional extensions; its bound keeps a peer from making us
# buffer without end while we look for its CRLF.
MAX_CHUNK_LINE = 4096
# Content-Length: 1*DIGIT. More than 19 digits cannot be a real length (it exceeds 2**63).
MAX_CONTENT_LENGTH_DIGITS = 19

# The request limits a parser keeps when not told otherwise (``head.Limits()``), and the defaults of
# the settings limit_request_line, limit_request_fields, limit_request_field_size and
# limit_request_body: the settings table reads them from here. The head's are gunicorn's numbers,
# so its configurations carry over; a body may be up to 1 GiB.
DEFAULT_MAX_REQUEST_LINE = 4094
DEFAULT_MAX_HEADER_COUNT = 100
DEFAULT_MAX_HEADER_SIZE = 8190
DEFAULT_MAX_BODY = 1024 * 1024 * 1024
