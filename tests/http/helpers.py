"""Byte-vector helpers for the sans-I/O parser: run one byte string three ways, compare the events.

Like h11's ``tr()`` (h11/tests/test_io.py): every vector is fed whole, one byte at a time, and
followed by trailing bytes (the start of another request). A parser that decides differently
depending on how TCP happened to split the stream is a parser two peers can disagree with, so
all three must give the same events, the same final state and the same error status.
"""

from greenserve.http import errors
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA, PAUSED, Limits, Request, RequestParser

# The start of another pipelined request: a valid message followed by it must parse the same,
# and an invalid one must fail the same.
TRAILING = b"GET /next HTTP/1.1\r\nHost: next\r\n"

REQUEST_FIELDS = Request.__slots__


def request_tuple(request):
    return tuple((name, getattr(request, name)) for name in REQUEST_FIELDS)


def run(pieces, limits=None, max_data=-1):
    """Feed ``pieces`` one after the other, draining events after each.

    Returns ``(events, error)``: the events with consecutive body data joined (how the body was
    split depends on the feeding), ending with the last NEED_DATA/PAUSED; ``error`` is the
    ``ProtocolError`` raised, or None. After an error the parser must keep raising it.
    """
    parser = RequestParser(limits if limits is not None else Limits())
    events = []
    last = None
    for piece in pieces:
        parser.feed(piece)
        while True:
            try:
                event = parser.next_event(max_data)
            except errors.ProtocolError as exc:
                _assert_raises_again(parser, exc)
                return events, exc
            if event is NEED_DATA or event is PAUSED:
                last = event
                break
            if type(event) is bytes:
                assert event, "empty body data event"
                if max_data > 0:
                    assert len(event) <= max_data
                if events and type(events[-1]) is bytes:
                    events[-1] += event
                    continue
            else:
                assert event is END_OF_MESSAGE or isinstance(event, Request), event
            events.append(event)
    events.append(last)
    return events, None


def _assert_raises_again(parser, exc):
    # The contract: after an error the parser is dead and raises on every call, whatever is fed.
    for extra in (b"", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"):
        parser.feed(extra)
        try:
            parser.next_event()
        except errors.ProtocolError as again:
            assert again.status_hint == exc.status_hint
        else:
            raise AssertionError("the parser did not raise again after %r" % exc)


def _comparable(events):
    return [request_tuple(e) if isinstance(e, Request) else e for e in events]


def three_ways(data, limits=None, max_data=-1, trailing=True):
    """Run ``data`` whole, byte by byte and (if ``trailing``) followed by TRAILING.

    Asserts all runs agree and returns the whole-fed ``(events, error)``.
    """
    whole = run([data], limits, max_data)
    runs = {"byte by byte": run([data[i : i + 1] for i in range(len(data))], limits, max_data)}
    if trailing:
        runs["with trailing bytes"] = run([data + TRAILING], limits, max_data)
    for how, (events, error) in runs.items():
        if whole[1] is None:
            assert error is None, "%s: raised %r, whole: %r" % (how, error, _comparable(whole[0]))
        else:
            assert error is not None, "%s: no error, whole raised %r" % (how, whole[1])
            assert error.status_hint == whole[1].status_hint, "%s: %r, whole: %r" % (how, error, whole[1])
        assert _comparable(events) == _comparable(whole[0]), how
    return whole


def parse(data, limits=None, max_data=-1, trailing=True, final=NEED_DATA):
    """A valid vector: returns the events (Requests, joined body bytes, END_OF_MESSAGE), checked
    to be identical however the bytes are fed, and to end in ``final``."""
    events, error = three_ways(data, limits, max_data, trailing)
    assert error is None, "unexpected %s: %s" % (type(error).__name__, error)
    assert events[-1] is final, events
    return events[:-1]


def parse_one(data, limits=None, final=None):
    """A valid vector holding one request: returns ``(request, body)``."""
    events = parse(data, limits, final=final or NEED_DATA)
    assert isinstance(events[0], Request)
    assert events[-1] is END_OF_MESSAGE, events
    body = b"".join(e for e in events[1:-1])
    assert len(events) <= 3
    return events[0], body


def reject(data, status, limits=None, trailing=True, error_type=None):
    """An invalid vector: every way of feeding it raises a ProtocolError with ``status``."""
    events, error = three_ways(data, limits, trailing=trailing)
    assert error is not None, "accepted: %r" % (events,)
    assert error.status_hint == status, "%s %r: got %d, want %d" % (type(error).__name__, str(error), error.status_hint, status)
    if error_type is not None:
        assert isinstance(error, error_type), type(error)
    return error
