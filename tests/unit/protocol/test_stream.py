"""Frames and chunked bodies survive any split; step grants cannot be forged or reused late."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.protocol.stepcred import GrantError, sign_grant, verify_grant
from muster.protocol.stream import ChunkedDecoder, FrameDecoder, StreamError, frame, json_frame

FRAMES = [
    (b"m", -1, b'{"started":[0,1],"token":"t"}'),
    (b"o", 0, b"hello\n"),
    (b"e", 1, b""),
    (b"o", 12, bytes(range(256)) * 3),
    (b"x", 0, b'{"code":7,"signal":0}'),
    (b"d", -1, b""),
]


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, pos = [], 0
    for n in sizes:
        piece = body[pos : pos + n]
        if piece:
            out.append(b"%x\r\n" % len(piece) + piece + b"\r\n")
        pos += n
    if pos < len(body):
        out.append(b"%x\r\n" % (len(body) - pos) + body[pos:] + b"\r\n")
    out.append(b"0\r\n\r\n")
    return b"".join(out)


@given(cuts=st.lists(st.integers(1, 60), max_size=40), chunks=st.lists(st.integers(1, 300), max_size=10))
def test_frames_come_out_whole_whatever_the_network_does(cuts: list[int], chunks: list[int]) -> None:
    body = b"".join(frame(k, t, p) for k, t, p in FRAMES)
    wire = chunked(body, chunks)
    dechunk, decoder = ChunkedDecoder(), FrameDecoder()
    got, pos = [], 0
    for n in cuts + [len(wire)]:
        got += decoder.feed(dechunk.feed(wire[pos : pos + n]))
        pos += n
    assert got == FRAMES
    assert dechunk.done


def test_json_frames_and_bad_headers() -> None:
    assert FrameDecoder().feed(json_frame(b"x", 3, {"code": 1})) == [(b"x", 3, b'{"code":1}')]
    with pytest.raises(StreamError):
        FrameDecoder().feed(b"garbage here\n")


KEY = b"k" * 32


def test_a_grant_verifies_and_its_content_comes_back() -> None:
    text, sig = sign_grant(KEY, {"job_id": 5, "uid": 1001, "issued": 50.0, "expires": 200.0})
    assert verify_grant(KEY, text, sig, now=100.0)["uid"] == 1001


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t, s: (t.replace("1001", "0"), s), "signature"),  # run as root instead
        (lambda t, s: (t, s[:-1] + ("0" if s[-1] != "0" else "1")), "signature"),
        (lambda t, s: (t, "nothex"), "signature"),
        (lambda t, s: (None, s), "malformed"),
    ],
)
def test_a_tampered_grant_is_refused(mutate, message) -> None:  # type: ignore[no-untyped-def]
    text, sig = sign_grant(KEY, {"job_id": 5, "uid": 1001, "issued": 50.0, "expires": 200.0})
    bad_text, bad_sig = mutate(text, sig)
    with pytest.raises(GrantError, match=message):
        verify_grant(KEY, bad_text, bad_sig, now=100.0)


def test_a_grant_from_another_cluster_or_too_late_is_refused() -> None:
    text, sig = sign_grant(KEY, {"job_id": 5, "issued": 50.0, "expires": 200.0})
    with pytest.raises(GrantError, match="signature"):
        verify_grant(b"x" * 32, text, sig, now=100.0)
    with pytest.raises(GrantError, match="expired"):
        verify_grant(KEY, text, sig, now=201.0)
