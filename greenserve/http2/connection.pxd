# Cython declarations for connection.py (pure-Python mode: connection.py stays plain, runnable
# Python). Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Windows, sizes and stream ids are C integers (a window is at most 2^31-1 and may go negative,
# §6.9.2; a sum of two fits a long long before it is checked); the frame handlers are C methods,
# dispatched by type in receive(). The frame layer and HPACK are called at C level through their
# .pxd; their types are cimported under other names so that connection.py's own imports of them
# stay module attributes.
cimport cython

from greenserve.http2.frames cimport FrameReader as _FrameReader
from greenserve.http2.frames cimport data_payload, headers_payload, priority_payload, uint31, uint32
from greenserve.http2.frames cimport settings_payload, goaway_payload, frame_header, headers_frames
from greenserve.http2.hpack cimport Decoder as _Decoder, Encoder as _Encoder
from greenserve.http2.validation cimport request_head, trailers
from greenserve.http2.events cimport data_received, request_received, stream_ended

# The frame types and flags tested per frame: C ints here (imported from frames.py; nothing
# imports them from this module).
cdef int DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE
cdef int CONTINUATION, ACK, END_HEADERS, END_STREAM
cdef long long _MAX_WINDOW, _MAX_STREAM_ID, _DEFAULT_WINDOW

cdef class _Stream:
    cdef long long stream_id
    cdef long long inbound_window
    cdef long long outbound_window
    cdef long long unacknowledged
    cdef long long unread
    cdef bint remote_closed
    cdef bint local_closed
    cdef bint response_started
    cdef object content_length
    cdef long long received

cdef class H2Connection:
    cdef public object config
    cdef public object state
    cdef public dict peer_settings
    cdef public long long highest_stream_id
    cdef dict _streams
    cdef dict _closed
    cdef _FrameReader _reader
    cdef _Decoder _decoder
    cdef _Encoder _encoder
    cdef list _out
    cdef bint _got_settings
    cdef bint _settings_acked
    cdef long long _stream_window
    cdef long long _inbound_window
    cdef long long _unacknowledged
    cdef long long _outbound_window
    cdef Py_ssize_t _outbound_frame_size
    cdef long long _block_stream
    cdef int _block_flags
    cdef list _block_parts
    cdef Py_ssize_t _block_size
    cdef bint _block_self_dependent
    cdef double _reset_tokens
    cdef double _reset_clock
    cdef double _reset_rate
    cdef double _reset_burst
    cdef long long _queued_control
    cdef long long _empty_frames
    cdef long long _goaway_last

    @cython.locals(stream=_Stream)
    cpdef send_window(self, stream_id)
    @cython.locals(stream=_Stream)
    cpdef stream_window(self, stream_id)

    @cython.locals(data=bytes)
    cpdef bytes data_to_send(self)

    @cython.locals(events=list, reader=_FrameReader, frame=tuple, frame_type=int, flags=int, stream_id=cython.longlong,
                   payload=bytes)
    cpdef list receive(self, data, now=*)

    @cython.locals(data=bytes, length=Py_ssize_t, stream=_Stream)
    cdef _on_data(self, int flags, long long stream_id, bytes payload, list events)

    @cython.locals(fragment=bytes)
    cdef _on_headers(self, int flags, long long stream_id, bytes payload, list events)

    cdef _on_continuation(self, int flags, long long stream_id, bytes payload, list events)

    cdef _check_block_size(self)

    @cython.locals(stream_id=cython.longlong, flags=int, parts=list, block=bytes, stream=_Stream)
    cdef _end_header_block(self, list events)

    @cython.locals(end_stream=bint, stream=_Stream)
    cdef _new_stream(self, long long stream_id, int flags, headers, too_large, list events)

    cdef _trailers(self, _Stream stream, int flags, headers, too_large, list events)

    cdef _reject_too_large(self, long long stream_id, bint end_stream, reason, list events)

    cdef _remote_end(self, _Stream stream, list events)

    cdef _on_priority(self, int flags, long long stream_id, bytes payload, list events)

    @cython.locals(stream=_Stream)
    cdef _on_rst_stream(self, int flags, long long stream_id, bytes payload, list events)

    cdef _on_push_promise(self, int flags, long long stream_id, bytes payload, list events)

    cdef _on_ping(self, int flags, long long stream_id, bytes payload, list events)

    cdef _on_goaway(self, int flags, long long stream_id, bytes payload, list events)

    @cython.locals(stream=_Stream)
    cdef _on_window_update(self, int flags, long long stream_id, bytes payload, list events)

    @cython.locals(changed=dict)
    cdef _on_settings(self, int flags, long long stream_id, bytes payload, list events)

    @cython.locals(stream=_Stream)
    cdef _peer_setting(self, identifier, value)

    @cython.locals(delta=cython.longlong, stream=_Stream)
    cdef _our_settings_apply(self)

    @cython.locals(stream=_Stream, pseudo=Py_ssize_t, block=bytes)
    cpdef send_headers(self, stream_id, headers, bint end_stream=*, bint checked=*)

    @cython.locals(stream=_Stream, length=Py_ssize_t, window=cython.longlong, frame_size=Py_ssize_t, out=list,
                   pos=Py_ssize_t, size=Py_ssize_t, last=bint)
    cpdef send_data(self, stream_id, data, bint end_stream=*)

    @cython.locals(stream=_Stream)
    cpdef send_informational(self, stream_id, headers)

    @cython.locals(stream=_Stream)
    cpdef acknowledge_received_data(self, stream_id, size)

    @cython.locals(stream=_Stream)
    cpdef reset_stream(self, stream_id, error_code=*)

    cdef _send_preface(self)

    @cython.locals(stream=_Stream)
    cdef _Stream _sending_stream(self, stream_id)

    cdef _local_end(self, _Stream stream)

    cdef _close(self, _Stream stream, bint completed)

    @cython.locals(closed=dict, memory=Py_ssize_t)
    cdef _remember_closed(self, long long stream_id, bint reset_by_us)

    cdef _return_window(self, _Stream stream, long long size)

    cdef _check_not_idle(self, long long stream_id, what)

    cdef _count_empty_frame(self, what)

    @cython.locals(tokens=double)
    cdef _refill_resets(self, double now)

    cdef _spend_reset(self, message)

    cdef _queue_control(self, bytes frame)

    @cython.locals(stream=_Stream)
    cdef _stream_error(self, exc, list events)

    cdef _connection_error(self, exc, list events)

    cdef _final_goaway(self)

@cython.locals(fields=list, pseudo=Py_ssize_t)
cdef tuple _fields_to_send(headers)
