"""HPACK (RFC 7541): the decoder for the client's header blocks and the encoder for ours.

One ``Decoder`` and one ``Encoder`` per connection: each keeps its side's dynamic table, which
must stay in step with the peer's, so every header block is decoded whole and in order, even the
blocks of streams that are refused or reset (RFC 9113 §4.3).

Limits against HPACK bombs: the decoder's dynamic table never grows beyond the
SETTINGS_HEADER_TABLE_SIZE we announced (a size update above it is a COMPRESSION_ERROR,
§6.3); the decoded header list is measured as RFC 9113 §6.5.2 measures it (name + value + 32
per field) and fields past ``max_header_list_size`` are not kept, only counted, so a small block
that names one large table entry thousands of times costs no memory, and the caller learns it
by ``HeaderListTooLarge`` after the block; integers longer than 5 continuation octets are
refused (§5.1: "exceed implementation limits"); a string may not run past the block's end.
The block's own size is bounded before decoding, by the connection (CONTINUATION floods).

The encoder keeps its dynamic table to ``table_size_limit`` bytes whatever the peer allows,
uses Huffman only where it is shorter, never indexes fields whose values change per response,
and sends a field marked sensitive as "never indexed" (§6.2.3, §7.1.3).
"""

from greenserve.http2.errors import HeaderListTooLarge, HPACKError
from greenserve.http2.huffman import decode as huffman_decode
from greenserve.http2.huffman import encode as huffman_encode
from greenserve.http2.huffman import encoded_length as huffman_length

__all__ = ["STATIC_TABLE", "ENTRY_OVERHEAD", "Decoder", "Encoder", "encode_integer"]

# RFC 7541 Appendix A; index 1 is the first entry.
STATIC_TABLE = (
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"),
    (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"), (b":status", b"200"),
    (b":status", b"204"), (b":status", b"206"), (b":status", b"304"), (b":status", b"400"),
    (b":status", b"404"), (b":status", b"500"), (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"), (b"accept-language", b""), (b"accept-ranges", b""),
    (b"accept", b""), (b"access-control-allow-origin", b""), (b"age", b""), (b"allow", b""),
    (b"authorization", b""), (b"cache-control", b""), (b"content-disposition", b""),
    (b"content-encoding", b""), (b"content-language", b""), (b"content-length", b""),
    (b"content-location", b""), (b"content-range", b""), (b"content-type", b""), (b"cookie", b""),
    (b"date", b""), (b"etag", b""), (b"expect", b""), (b"expires", b""), (b"from", b""), (b"host", b""),
    (b"if-match", b""), (b"if-modified-since", b""), (b"if-none-match", b""), (b"if-range", b""),
    (b"if-unmodified-since", b""), (b"last-modified", b""), (b"link", b""), (b"location", b""),
    (b"max-forwards", b""), (b"proxy-authenticate", b""), (b"proxy-authorization", b""), (b"range", b""),
    (b"referer", b""), (b"refresh", b""), (b"retry-after", b""), (b"server", b""), (b"set-cookie", b""),
    (b"strict-transport-security", b""), (b"transfer-encoding", b""), (b"user-agent", b""), (b"vary", b""),
    (b"via", b""), (b"www-authenticate", b""),
)
_STATIC = STATIC_TABLE
_STATIC_LENGTH = 61
_FIRST_DYNAMIC = 62  # §2.3.3: the dynamic table's indexes follow the static table's
_STATIC_INDEX = {entry: index for index, entry in reversed(list(enumerate(STATIC_TABLE, 1)))}
_STATIC_NAME_INDEX = {name: index for index, (name, value) in reversed(list(enumerate(STATIC_TABLE, 1)))}

# §4.1: "The size of an entry is the sum of its name's length in octets, its value's length in
# octets, and 32." RFC 9113 §6.5.2 measures a header list the same way.
ENTRY_OVERHEAD = 32
_OVERHEAD = ENTRY_OVERHEAD

# §5.1: integers that "exceed implementation limits -- in value or octet length -- MUST be
# treated as decoding errors". Five continuation octets carry 35 bits, more than any length or
# index in a block that the connection lets reach the decoder.
_MAX_INTEGER_SHIFT = 28

# Fields whose values differ from one response to the next: indexing them would only evict the
# entries that do repeat (nghttp2 leaves the same ones out of its table).
_NOT_INDEXED = frozenset([b":path", b"content-length", b"set-cookie", b"etag", b"last-modified",
                          b"location", b"age", b"content-range", b"if-modified-since", b"if-none-match"])


def encode_integer(value, prefix_bits, first, out):
    """§5.1: ``value`` with an N-bit prefix, the prefix's byte OR-ed with ``first``, onto ``out``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        out.append(first | value)
        return
    out.append(first | limit)
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _encode_string(data, out):
    """§5.2: a string literal, Huffman-coded where that is shorter."""
    length = len(data)
    if length > 2:
        coded = huffman_length(data)
        if coded < length:
            encode_integer(coded, 7, 0x80, out)
            out += huffman_encode(data)
            return
    encode_integer(length, 7, 0, out)
    out += data


class Decoder:
    """Header blocks in, lists of ``(name, value)`` bytes tuples out; HPACKError for a bad block.

    ``max_allowed_table_size`` is our SETTINGS_HEADER_TABLE_SIZE as the peer has acknowledged
    it; ``max_table_size`` the size the peer's encoder chose (§4.2, at most the allowed one).
    After ``decode``, ``never_indexed`` lists the names of fields that came as "never indexed"
    (§6.2.3; None when there were none), for a caller that passes them on.
    """

    __slots__ = ("max_allowed_table_size", "max_table_size", "table_size", "max_header_list_size",
                 "never_indexed", "_entries", "_first", "_size_update_required", "_block", "_pos", "_end")

    def __init__(self, max_allowed_table_size=4096, max_header_list_size=65536):
        self.max_allowed_table_size = max_allowed_table_size
        self.max_table_size = 4096  # §4.2: the peer's encoder starts at the protocol default
        self.table_size = 0
        self.max_header_list_size = max_header_list_size
        self.never_indexed = None
        self._entries = []  # oldest first; entries before _first are evicted
        self._first = 0
        # Announced below the default: the peer's encoder must shrink its table first thing.
        self._size_update_required = max_allowed_table_size < 4096
        self._block = b""
        self._pos = 0
        self._end = 0

    def set_max_allowed_table_size(self, size):
        """Our new SETTINGS_HEADER_TABLE_SIZE took effect (the peer acknowledged it)."""
        self.max_allowed_table_size = size
        if size < self.max_table_size:
            # §4.2: the encoder "MUST signal" a size at most this one at the start of its next
            # block; until it does, its entries count as before.
            self._size_update_required = True

    def entries(self):
        """The dynamic table, newest first (§2.3.3's order), for tests and debugging."""
        return self._entries[self._first :][::-1]

    def decode(self, block):
        """The header list of one whole block (§3). HeaderListTooLarge after decoding all of it
        when its RFC 9113 §6.5.2 size is over ``max_header_list_size``."""
        self._block = block
        self._pos = 0
        self._end = len(block)
        self.never_indexed = None
        headers = []
        size = 0
        limit = self.max_header_list_size
        at_start = True
        while self._pos < self._end:
            byte = block[self._pos]
            if byte & 0x80:  # §6.1 indexed field
                entry = self._entry(self._integer(7))
            elif byte & 0x40:  # §6.2.1 literal with incremental indexing
                entry = self._literal(6)
                self._insert(entry)
            elif byte & 0x20:  # §6.3 dynamic table size update
                # §4.2: "This dynamic table size update MUST occur at the beginning of the
                # first header block following the change to the dynamic table size."
                if not at_start:
                    raise HPACKError("dynamic table size update after a field")
                self._resize(self._integer(5))
                continue
            else:  # §6.2.2 literal without indexing, §6.2.3 never indexed
                entry = self._literal(4)
                if byte & 0x10:
                    if self.never_indexed is None:
                        self.never_indexed = []
                    self.never_indexed.append(entry[0])
            if at_start:
                at_start = False
                if self._size_update_required:
                    raise HPACKError("the block does not start with the required table size update")
            size += len(entry[0]) + len(entry[1]) + _OVERHEAD
            if size <= limit:
                headers.append(entry)
        self._block = b""
        if self._size_update_required:
            raise HPACKError("the block does not start with the required table size update")
        if size > limit:
            raise HeaderListTooLarge(size, limit)
        return headers

    def _integer(self, prefix_bits):
        """§5.1, from ``_pos`` in the block, which it advances past the integer."""
        block = self._block
        pos = self._pos
        if pos >= self._end:
            raise HPACKError("block ends inside a field")
        mask = (1 << prefix_bits) - 1
        value = block[pos] & mask
        pos += 1
        if value == mask:
            shift = 0
            while True:
                if pos >= self._end:
                    raise HPACKError("block ends inside an integer")
                byte = block[pos]
                pos += 1
                value += (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
                if shift > _MAX_INTEGER_SHIFT:
                    raise HPACKError("integer longer than this decoder's limit")
        self._pos = pos
        return value

    def _string(self):
        """§5.2: a string literal, Huffman-decoded if its H bit says so."""
        if self._pos >= self._end:
            raise HPACKError("block ends before a string")
        huffman = self._block[self._pos] & 0x80
        length = self._integer(7)
        start = self._pos
        if length > self._end - start:
            raise HPACKError("string runs past the end of the block")
        self._pos = start + length
        if huffman:
            return huffman_decode(self._block[start : start + length])
        return self._block[start : start + length]

    def _literal(self, prefix_bits):
        """§6.2: a name (indexed or literal), then a value."""
        index = self._integer(prefix_bits)
        if index:
            name = self._entry(index)[0]
        else:
            name = self._string()
        return (name, self._string())

    def _entry(self, index):
        """§2.3.3: the static table's entries, then the dynamic table's, newest first."""
        if index <= _STATIC_LENGTH:
            if index == 0:
                raise HPACKError("index 0")  # §6.1: "MUST be treated as a decoding error"
            return _STATIC[index - 1]
        entries = self._entries
        back = index - _FIRST_DYNAMIC
        if back >= len(entries) - self._first:
            raise HPACKError("index %d beyond the dynamic table" % index)
        return entries[len(entries) - 1 - back]

    def _insert(self, entry):
        """§4.4: evict until the entry fits; one larger than the table empties it, unstored."""
        size = len(entry[0]) + len(entry[1]) + _OVERHEAD
        if size > self.max_table_size:
            self._entries = []
            self._first = 0
            self.table_size = 0
            return 0
        self._evict(self.max_table_size - size)
        self._entries.append(entry)
        self.table_size += size
        return 0

    def _resize(self, size):
        """§6.3: "an attempt to update the value beyond [the SETTINGS value] MUST be treated as a
        decoding error" -- the dynamic table never outgrows what we announced."""
        if size > self.max_allowed_table_size:
            raise HPACKError("table size update to %d beyond the %d allowed" % (size, self.max_allowed_table_size))
        self.max_table_size = size
        self._size_update_required = False
        self._evict(size)
        return 0

    def _evict(self, room):
        """§4.3/§4.4: drop the oldest entries until the table holds at most ``room`` bytes."""
        entries = self._entries
        first = self._first
        while self.table_size > room:
            entry = entries[first]
            self.table_size -= len(entry[0]) + len(entry[1]) + _OVERHEAD
            first += 1
        # Compact now and then, not per eviction: the list stays O(entries) and each entry is
        # moved O(1) times on average.
        if first > 32 and first * 2 > len(entries):
            del entries[:first]
            first = 0
        self._first = first
        return 0


class Encoder:
    """Header lists in, header blocks out.

    A header is ``(name, value)`` or ``(name, value, sensitive)`` of bytes, names lowercase; a
    sensitive one is sent "never indexed" (§6.2.3) so that no intermediary compresses it
    either (§7.1.3: secrets such as a short cookie or a token, which an attacker who can add
    fields of their own could otherwise guess by the block's length, CRIME-style).

    ``table_size_limit`` bounds the memory of our dynamic table; ``set_max_table_size`` takes
    the peer's SETTINGS_HEADER_TABLE_SIZE, and the table is the smaller of the two.
    """

    __slots__ = ("table_size_limit", "max_table_size", "table_size", "_entries", "_first", "_base",
                 "_full", "_names", "_update_pending", "_update_min", "_changes", "_last_headers", "_last_block")

    def __init__(self, table_size_limit=4096):
        self.table_size_limit = table_size_limit
        self.max_table_size = 4096  # §4.2: the decoder's table starts at the protocol default
        self.table_size = 0
        self._entries = []  # oldest first; those before _first are evicted
        self._first = 0
        self._base = 0  # insertion number of _entries[0]
        self._full = {}  # (name, value) -> insertion number of its newest entry
        self._names = {}  # name -> insertion number of the newest entry with it
        self._update_pending = False
        self._update_min = 0
        # The last block that changed no table, and its header list: a server sends the same
        # fields (the same tuples: framing.build_fields' caches) response after response, and
        # while the table is as it was, the same list is the same block (a tenth of a request).
        self._changes = 0  # insertions and evictions so far
        self._last_headers = None
        self._last_block = b""
        self.set_max_table_size(4096)

    def set_max_table_size(self, size):
        """The peer's SETTINGS_HEADER_TABLE_SIZE (§4.2): our table uses at most that, and at
        most ``table_size_limit``; a change is signalled at the start of the next block."""
        size = min(size, self.table_size_limit)
        if size == self.max_table_size and not self._update_pending:
            return
        # §4.2: "the smallest maximum table size that occurs in that interval MUST be
        # signaled in a dynamic table size update. The final maximum size is always signaled".
        self._update_min = min(size, self._update_min) if self._update_pending else size
        self._update_pending = True
        self.max_table_size = size
        self._evict(size)

    def encode(self, headers):
        """One header block for ``headers``, a list of 2- or 3-tuples (see the class)."""
        last = self._last_headers
        if last is not None and not self._update_pending and len(last) == len(headers):
            for index in range(len(headers)):
                if headers[index] is not last[index]:
                    break
            else:
                return self._last_block
        changes = self._changes
        out = bytearray()
        if self._update_pending:
            self._update_pending = False
            if self._update_min < self.max_table_size:
                encode_integer(self._update_min, 5, 0x20, out)
            encode_integer(self.max_table_size, 5, 0x20, out)
        for header in headers:
            if len(header) == 2:
                self._field(header[0], header[1], False, out)
            else:
                self._field(header[0], header[1], header[2], out)
        block = bytes(out)
        if self._changes == changes:
            self._last_headers = tuple(headers)
            self._last_block = block
        else:
            self._last_headers = None  # (the same list again would now find its fields indexed)
        return block

    def _field(self, name, value, sensitive, out):
        key = (name, value)
        if not sensitive:
            # The dynamic table first: a response's fields past :status are mostly found there,
            # and no field of the static table is ever inserted (it is found there first), so
            # the order of the two look-ups changes no block.
            number = self._full.get(key)
            if number is not None:  # §6.1 indexed, dynamic table
                encode_integer(self._index(number), 7, 0x80, out)
                return 0
            index = _STATIC_INDEX.get(key)
            if index is not None:  # §6.1 indexed, static table
                out.append(0x80 | index)
                return 0
        name_index = _STATIC_NAME_INDEX.get(name, 0)
        if not name_index:
            number = self._names.get(name)
            if number is not None:
                name_index = self._index(number)
        size = len(name) + len(value) + _OVERHEAD
        if sensitive:
            encode_integer(name_index, 4, 0x10, out)  # §6.2.3 never indexed
            indexing = False
        elif name in _NOT_INDEXED or size > self.max_table_size:
            encode_integer(name_index, 4, 0x00, out)  # §6.2.2 without indexing
            indexing = False
        else:
            encode_integer(name_index, 6, 0x40, out)  # §6.2.1 with incremental indexing
            indexing = True
        if not name_index:
            _encode_string(name, out)
        _encode_string(value, out)
        if indexing:
            self._insert(key, size)
        return 0

    def _index(self, number):
        """The index (§2.3.3) of the entry with insertion number ``number``."""
        return _FIRST_DYNAMIC + (self._base + len(self._entries) - 1 - number)

    def _insert(self, key, size):
        self._evict(self.max_table_size - size)
        self._changes += 1
        self._last_headers = None
        number = self._base + len(self._entries)
        self._entries.append(key)
        self.table_size += size
        self._full[key] = number
        self._names[key[0]] = number
        return 0

    def _evict(self, room):
        """Drop the oldest entries until the table holds at most ``room`` bytes, forgetting
        them in the look-up dicts unless a newer entry took their key."""
        entries = self._entries
        first = self._first
        while self.table_size > room:
            key = entries[first]
            number = self._base + first
            self.table_size -= len(key[0]) + len(key[1]) + _OVERHEAD
            if self._full.get(key) == number:
                del self._full[key]
            if self._names.get(key[0]) == number:
                del self._names[key[0]]
            first += 1
            self._changes += 1
            self._last_headers = None
        if first > 32 and first * 2 > len(entries):
            del entries[:first]
            self._base += first
            first = 0
        self._first = first
        return 0
