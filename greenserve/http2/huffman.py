"""HPACK's Huffman code (RFC 7541 §5.2, Appendix B): encode, and decode with a table-driven machine.

Decoding reads four bits at a time: ``_build_decoder`` walks the code's tree once, at import, and
records for each (node, nibble) the node reached, the symbol emitted on the way if any, and
whether the walk met EOS. No code is shorter than 5 bits, so a nibble completes at most one
symbol. ``decode`` is then two table look-ups per input byte, and the check of the padding at
the end is a property of the node it stopped at (fewer than 8 bits, all ones: §5.2).
"""

from greenserve.http2.errors import HPACKError

__all__ = ["encode", "encoded_length", "decode"]

# RFC 7541 Appendix B: (code, length in bits) for each symbol 0-255 and EOS (256), the code's
# bits right-aligned in the int, most significant bit sent first.
_CODE_TABLE = (
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28),  # 0-3
    (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),  # 4-7
    (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28),  # 8-11
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),  # 12-15
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),  # 16-19
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),  # 20-23
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28),  # 24-27
    (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),  # 28-31
    (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),  # 32-35
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),  # 36-39
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11),  # 40-43
    (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),  # 44-47
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6),  # 48-51
    (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),  # 52-55
    (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),  # 56-59
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),  # 60-63
    (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7),  # 64-67
    (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),  # 68-71
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7),  # 72-75
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),  # 76-79
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),  # 80-83
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),  # 84-87
    (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13),  # 88-91
    (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),  # 92-95
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),  # 96-99
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),  # 100-103
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),  # 104-107
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),  # 108-111
    (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5),  # 112-115
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),  # 116-119
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15),  # 120-123
    (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),  # 124-127
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),  # 128-131
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),  # 132-135
    (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),  # 136-139
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),  # 140-143
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23),  # 144-147
    (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),  # 148-151
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),  # 152-155
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),  # 156-159
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22),  # 160-163
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),  # 164-167
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24),  # 168-171
    (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),  # 172-175
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),  # 176-179
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),  # 180-183
    (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),  # 184-187
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),  # 188-191
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19),  # 192-195
    (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),  # 196-199
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),  # 200-203
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),  # 204-207
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27),  # 208-211
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),  # 212-215
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),  # 216-219
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),  # 220-223
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),  # 224-227
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),  # 228-231
    (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25),  # 232-235
    (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),  # 236-239
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26),  # 240-243
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),  # 244-247
    (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),  # 248-251
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),  # 252-255
    (0x3fffffff, 30),  # 256-256
)

EOS = 256
_CODES = tuple(code for code, length in _CODE_TABLE[:256])
_LENGTHS = bytes(length for code, length in _CODE_TABLE[:256])

# The decoder's flags, per (node, nibble).
_EMIT = 1  # a symbol was completed: it is in _SYMBOL
_FAIL = 2  # the walk decoded EOS, which §5.2 forbids inside a string


def _build_decoder():
    """(next node, symbol, flags) for each (node * 16 + nibble), and which nodes may end a string.

    Nodes are the tree's internal nodes, the root first; there are 256 of them (257 leaves).
    """
    children = [[None, None]]  # internal node -> [child for bit 0, child for bit 1]
    leaves = {}  # (node, bit) -> symbol
    for symbol, (code, length) in enumerate(_CODE_TABLE):
        node = 0
        for shift in range(length - 1, 0, -1):
            bit = (code >> shift) & 1
            if children[node][bit] is None:
                children[node][bit] = len(children)
                children.append([None, None])
            node = children[node][bit]
        leaves[node, code & 1] = symbol
    # §5.2: "padding strictly longer than 7 bits MUST be treated as a decoding error" and
    # "padding not corresponding to the most significant bits of the code for the EOS symbol
    # MUST be treated as a decoding error": a string may end only on the all-ones path from
    # the root, fewer than 8 bits deep.
    accepting = bytearray(len(children))
    node = 0
    for depth in range(8):
        accepting[node] = 1
        node = children[node][1]
    next_node, symbols, flags = bytearray(), bytearray(), bytearray()
    for start in range(len(children)):
        for nibble in range(16):
            node, emitted, flag = start, 0, 0
            for shift in (3, 2, 1, 0):
                bit = (nibble >> shift) & 1
                if (node, bit) in leaves:
                    symbol = leaves[node, bit]
                    if symbol == EOS:
                        flag |= _FAIL
                        emitted = 0
                    else:
                        flag |= _EMIT
                        emitted = symbol
                    node = 0
                else:
                    node = children[node][bit]
            next_node.append(node)
            symbols.append(emitted)
            flags.append(flag)
    return bytes(next_node), bytes(symbols), bytes(flags), bytes(accepting)


_NEXT, _SYMBOL, _FLAGS, _ACCEPTING = _build_decoder()


def encoded_length(data):
    """How many bytes ``encode(data)`` makes: to choose Huffman only where it is shorter."""
    bits = 0
    for byte in data:
        bits += _LENGTHS[byte]
    return (bits + 7) >> 3


def encode(data):
    """``data`` (bytes) in the Huffman code, padded with the most significant bits of EOS (ones)."""
    out = bytearray()
    acc = 0  # bits not yet written, right-aligned; never more than 7 + 30 of them
    bits = 0
    for byte in data:
        length = _LENGTHS[byte]
        acc = ((acc << length) | _CODES[byte]) & 0x3FFFFFFFFF
        bits += length
        while bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
    if bits:
        out.append(((acc << (8 - bits)) | (0xFF >> bits)) & 0xFF)
    return bytes(out)


def decode(data):
    """The bytes a Huffman-coded string stands for; HPACKError for EOS inside it or bad padding."""
    out = bytearray()
    state = 0
    # The two nibbles' steps are written out: a call per nibble would double the pure build's
    # cost of decoding, which every request's header block pays.
    for byte in data:
        index = (state << 4) | (byte >> 4)
        flags = _FLAGS[index]
        if flags:
            if flags & _FAIL:
                raise HPACKError("Huffman-coded string contains EOS")
            out.append(_SYMBOL[index])
        state = _NEXT[index]
        index = (state << 4) | (byte & 0x0F)
        flags = _FLAGS[index]
        if flags:
            if flags & _FAIL:
                raise HPACKError("Huffman-coded string contains EOS")
            out.append(_SYMBOL[index])
        state = _NEXT[index]
    if not _ACCEPTING[state]:
        raise HPACKError("Huffman-coded string has invalid padding")
    return bytes(out)
