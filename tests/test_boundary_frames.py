"""The partition wire's frames (issue #23): what is sent is what is read, frames that arrive together are read
from one buffer, and anything malformed is refused with ``WireError``.

References: the arrays and JSON sent, byte for byte.
"""

import json
import select
import socket

import numpy as np
import pytest

from dbkit.partition import mailbox
from dbkit.partition.boundary_frames import FRAME, KINDS, FrameReader, send_frame
from dbkit.partition.mailbox import Mailbox
from dbkit.ps.wire_frames import WireError


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


FRAMES = [((3, "f", 2, 1), np.arange(12, dtype=np.float32).reshape(3, 4), None),
          ((3, "b", 2, 0), np.linspace(-1, 1, 1000, dtype=np.float32).reshape(10, 100), None),  # > the buffer
          ((3, "go"), None, {"op": "step", "lr": 0.05, "pad": "x" * 700}),  # JSON > the buffer
          ((3, "done", 1), np.ones(5, dtype=np.float32), {"finite": True}),  # a flat vector
          ((4, "dlogits"), np.zeros((2, 0), dtype=np.float32), None)]  # rows, no columns


@pytest.mark.parametrize("size", [64, 1 << 17])
def test_frames_sent_back_to_back_are_read_as_sent(pair, size):
    a, b = pair
    for key, values, meta in FRAMES:
        send_frame(a, key, values, meta)
    reader = FrameReader(b, size=size)
    for key, values, meta in FRAMES:
        got_key, got_values, got_meta = reader.read()
        assert got_key == key
        assert got_meta == meta
        if values is None:
            assert got_values is None
        else:
            assert got_values.shape == values.shape and got_values.dtype == np.float32
            np.testing.assert_array_equal(got_values, values)
    assert reader.buffered == 0


def test_a_frame_behind_another_is_read_without_waiting_on_the_socket(pair):
    a, b = pair
    x, y = np.full((2, 3), 1.5, dtype=np.float32), np.full((2, 3), -2.0, dtype=np.float32)
    send_frame(a, (1, "f", 2, 1), x)
    send_frame(a, (1, "b", 2, 1), y)  # both in the socket before anything reads
    box = Mailbox(0, timeout=0.5)  # a short timeout: the second take must not wait on the socket
    box.add_connection(1, b)
    try:
        np.testing.assert_array_equal(box.take((1, "f", 2, 1))[0], x)
        np.testing.assert_array_equal(box.take((1, "b", 2, 1))[0], y)
    finally:
        box.shut()


def test_a_reader_too_small_for_a_header_is_refused(pair):
    with pytest.raises(ValueError, match="at least a header"):
        FrameReader(pair[1], size=FRAME.size - 1)


class PartialSocket:
    """A socket whose ``sendmsg`` takes only ``first`` bytes (a full buffer, a signal), then sends whole."""

    def __init__(self, first: int) -> None:
        self.first, self.out = first, bytearray()

    def sendmsg(self, parts):
        data = b"".join(bytes(p) for p in parts)[:self.first]
        self.out += data
        return len(data)

    def sendall(self, data):
        self.out += bytes(data)


@pytest.mark.parametrize("first", [0, 5, FRAME.size + 3, FRAME.size + 40])
def test_a_partial_send_still_sends_the_whole_frame(pair, first):
    a, b = pair
    values = np.arange(20, dtype=np.float32).reshape(2, 10)
    sock = PartialSocket(first)
    assert send_frame(sock, (7, "f", 1, 0), values, {"k": 1}) == values.nbytes  # type: ignore[arg-type]
    a.sendall(sock.out)
    b.settimeout(5)  # a frame cut short fails here instead of waiting for the rest
    key, got, meta = FrameReader(b).read()
    assert key == (7, "f", 1, 0) and meta == {"k": 1}
    np.testing.assert_array_equal(got, values)


def _frame(kind=KINDS["f"], rows=1, meta=b"", payload=b"") -> bytes:
    return FRAME.pack(kind, 1, 2, 0, rows, len(meta), len(payload)) + meta + payload


@pytest.mark.parametrize("raw,match", [
    (_frame(kind=99), "unknown kind"),
    (_frame(meta=b"{not json"), "does not parse"),
    (_frame(meta=json.dumps([1, 2]).encode()), "not an object"),
    (_frame(rows=3, payload=np.ones(4, dtype=np.float32).tobytes()), "do not make 3 rows"),
    (_frame(payload=b"\0" * 6), "float32"),
    (FRAME.pack(1, 1, 2, 0, 1, 1 << 30, 0), "bytes of JSON"),
    (_frame(payload=np.ones(8, dtype=np.float32).tobytes())[:-5], "closed"),  # the peer goes mid-frame
])
def test_a_malformed_frame_is_refused(pair, raw, match):
    a, b = pair
    a.sendall(raw)
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(WireError, match=match):
        FrameReader(b, size=64).read()


class LetterInTheGap:
    """Stands in for a mailbox's reading lock: the first time a waiting thread takes it (after it looked for
    its letter and before it sleeps in ``select``), a partner in this process puts that letter."""

    def __init__(self, box: Mailbox, key: tuple, values: np.ndarray) -> None:
        self._lock, self._box, self._key, self._values = box._reading, box, key, values
        self.put = False

    def acquire(self, blocking: bool = True) -> bool:
        got = self._lock.acquire(blocking)
        if got and not self.put:
            self.put = True
            self._box.put(self._key, self._values)
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def test_a_letter_put_between_looking_and_sleeping_wakes_the_reader(monkeypatch):
    """A partner in this process puts the letter after the waiting thread looked for it and before it sleeps:
    the reader takes it instead of sleeping out its timeout in ``select`` (CI saw a step fail this way: the
    reader slept 30 s, its partners gave up)."""
    empty_wakes, real_select = [], select.select

    def counting_select(r, w, x, timeout):
        ready = real_select(r, w, x, timeout)
        if not ready[0]:
            empty_wakes.append(timeout)
        return ready

    monkeypatch.setattr(mailbox.select, "select", counting_select)
    box = Mailbox(2, timeout=3.0)
    x = np.arange(6, dtype=np.float32)
    gap = LetterInTheGap(box, (1, "f", 1, 0), x)
    box._reading = gap  # type: ignore[assignment]
    try:
        np.testing.assert_array_equal(box.take((1, "f", 1, 0))[0], x)
        assert gap.put
        assert empty_wakes == []  # no sleep out to the timeout with the letter waiting
    finally:
        box._reading = gap._lock
        box.shut()
