"""H2Config: the limits of one HTTP/2 connection, given at construction (no global settings).

The first four are announced to the client in our SETTINGS frame (RFC 9113 §6.5.2); the rest
are how much of a known attack we take before ending the connection with ENHANCE_YOUR_CALM
(docs/http2.md, "The codec", lists each with the attack it answers).
"""

__all__ = ["H2Config"]

_MAX_WINDOW = 2**31 - 1  # RFC 9113 §6.9.1
_MIN_FRAME_SIZE = 2**14  # §6.5.2: SETTINGS_MAX_FRAME_SIZE's range
_MAX_FRAME_SIZE = 2**24 - 1


class H2Config:
    """Keyword arguments only; each is checked here, once (ValueError)."""

    __slots__ = ("max_concurrent_streams", "initial_window_size", "max_frame_size",
                 "max_header_list_size", "header_table_size", "connection_window_size",
                 "max_header_block_size", "reset_burst", "reset_rate", "max_queued_control_frames",
                 "max_empty_frames", "closed_stream_memory")

    def __init__(
        self,
        *,
        max_concurrent_streams=100,  # SETTINGS_MAX_CONCURRENT_STREAMS; more get REFUSED_STREAM
        initial_window_size=65535,  # SETTINGS_INITIAL_WINDOW_SIZE: request bytes in flight per stream
        max_frame_size=16384,  # SETTINGS_MAX_FRAME_SIZE we accept
        max_header_list_size=65536,  # SETTINGS_MAX_HEADER_LIST_SIZE; over it: 431
        header_table_size=4096,  # SETTINGS_HEADER_TABLE_SIZE: our HPACK decoder's table, bytes
        connection_window_size=None,  # request bytes in flight on the connection; None: as per stream
        max_header_block_size=None,  # compressed header block bytes, all CONTINUATIONs; None: 2 x the list's
        reset_burst=200,  # rapid reset: streams the peer may cancel, or make us reset, at once...
        reset_rate=33.0,  # ... and per second after that (and one per stream completed)
        max_queued_control_frames=1000,  # PING/SETTINGS ACKs and RST_STREAMs not yet taken by data_to_send
        max_empty_frames=100,  # empty DATA/CONTINUATION frames that carry nothing, in a row
        closed_stream_memory=1000,  # closed stream ids remembered, to answer their late frames (§5.1)
    ):
        self.max_concurrent_streams = _check("max_concurrent_streams", max_concurrent_streams, 0, 2**31 - 1)
        self.initial_window_size = _check("initial_window_size", initial_window_size, 0, _MAX_WINDOW)
        self.max_frame_size = _check("max_frame_size", max_frame_size, _MIN_FRAME_SIZE, _MAX_FRAME_SIZE)
        self.max_header_list_size = _check("max_header_list_size", max_header_list_size, 1, 2**32 - 1)
        self.header_table_size = _check("header_table_size", header_table_size, 0, 2**32 - 1)
        if connection_window_size is None:
            connection_window_size = max(initial_window_size, 65535)
        self.connection_window_size = _check("connection_window_size", connection_window_size, 65535, _MAX_WINDOW)
        if max_header_block_size is None:
            # A block decodes to at least about its own size (+32 per field), so twice the
            # list's limit leaves room to decode a block somewhat over it and answer 431,
            # while a flood of CONTINUATION frames still ends early.
            max_header_block_size = max(2 * max_header_list_size, 16384)
        self.max_header_block_size = _check("max_header_block_size", max_header_block_size, 1, 2**32 - 1)
        self.reset_burst = _check("reset_burst", reset_burst, 1, 2**31 - 1)
        if not reset_rate >= 0:
            raise ValueError("reset_rate must be >= 0, not %r" % (reset_rate,))
        self.reset_rate = float(reset_rate)
        self.max_queued_control_frames = _check("max_queued_control_frames", max_queued_control_frames, 1, 2**31 - 1)
        self.max_empty_frames = _check("max_empty_frames", max_empty_frames, 1, 2**31 - 1)
        self.closed_stream_memory = _check("closed_stream_memory", closed_stream_memory, 1, 2**31 - 1)

    def __repr__(self):
        return "H2Config(%s)" % ", ".join("%s=%r" % (n, getattr(self, n)) for n in self.__slots__)


def _check(name, value, low, high):
    if type(value) is not int or not low <= value <= high:
        raise ValueError("%s must be an integer from %d to %d, not %r" % (name, low, high, value))
    return value
