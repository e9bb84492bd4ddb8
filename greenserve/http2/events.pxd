# Cython declarations for events.py (pure-Python mode: events.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Each event is a C struct of object fields, public as the pure build's __slots__ are: the codec
# makes two or three per request and the protocol reads them, at C level where it knows the type
# (http2_protocol.pxd cimports RequestReceived) and by a slot's descriptor elsewhere.

cimport cython

cdef class Event:
    pass

cdef class RequestReceived(Event):
    cdef public object stream_id, method, scheme, authority, path, headers, end_stream, content_length
    cdef public object never_indexed

cdef class DataReceived(Event):
    cdef public object stream_id, data, flow_controlled_length

cdef class TrailersReceived(Event):
    cdef public object stream_id, headers

cdef class StreamEnded(Event):
    cdef public object stream_id

cdef class StreamReset(Event):
    cdef public object stream_id, error_code, remote, reason

cdef class RequestRejected(Event):
    cdef public object stream_id, status, reason

cdef class WindowUpdated(Event):
    cdef public object stream_id, delta

cdef class SettingsChanged(Event):
    cdef public object changed

cdef class SettingsAcknowledged(Event):
    pass

cdef class PingReceived(Event):
    cdef public object data

cdef class PingAcknowledged(Event):
    cdef public object data

cdef class PriorityIgnored(Event):
    cdef public object stream_id, depends_on

cdef class ConnectionTerminated(Event):
    cdef public object error_code, last_stream_id, additional_data, remote, reason

@cython.locals(event=RequestReceived)
cpdef RequestReceived request_received(stream_id, method, scheme, authority, path, headers, end_stream,
                                       content_length, never_indexed)
@cython.locals(event=DataReceived)
cpdef DataReceived data_received(stream_id, data, flow_controlled_length)
@cython.locals(event=StreamEnded)
cpdef StreamEnded stream_ended(stream_id)
