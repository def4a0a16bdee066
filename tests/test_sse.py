"""SSEDecoder: line breaks, UTF-8 across chunk boundaries, fields, and the truncated flag."""

from __future__ import annotations

import json

import pytest

from pytest_toolbench.transport.sse import SSEDecoder, SSEEvent


def decode(*chunks: bytes) -> tuple[list[SSEEvent], SSEDecoder]:
    """Feed ``chunks`` in order, close, and return all events and the decoder."""
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events, decoder


def datas(*chunks: bytes) -> list[str]:
    return [event.data for event in decode(*chunks)[0]]


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
def test_each_line_break_kind(eol: bytes) -> None:
    stream = b"data: one" + eol + eol + b"data: two" + eol + b"data: 2b" + eol + eol
    assert datas(stream) == ["one", "two\n2b"]


def test_mixed_line_breaks() -> None:
    assert datas(b"data: a\r\n\rdata: b\n\r\ndata: c\r\r") == ["a", "b", "c"]


def test_crlf_split_across_chunks_is_one_line_break() -> None:
    # Were the CR and LF two breaks, the LF would be a blank line dispatching "x" alone.
    events, _ = decode(b"data: x\r", b"\ndata: y\r\n\r\n")
    assert [event.data for event in events] == ["x\ny"]


def test_cr_at_chunk_end_dispatches_without_waiting() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert [event.data for event in decoder.feed(b"\r")] == ["x"]
    assert [event.data for event in decoder.feed(b"\ndata: y\n\n")] == ["y"]


def test_unicode_line_separators_are_not_line_breaks() -> None:
    payload = json.dumps({"content": "a\u2028b\u2029c\x85d"}, ensure_ascii=False)
    events, _ = decode(f"data: {payload}\n\n".encode())
    assert len(events) == 1
    assert json.loads(events[0].data) == {"content": "a\u2028b\u2029c\x85d"}


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_multibyte_char_split_at_every_byte(char: str) -> None:
    stream = f"data: {char}{char}\n\n".encode()
    for cut in range(len(stream) + 1):
        assert datas(stream[:cut], stream[cut:]) == [char * 2], cut


def test_invalid_utf8_is_replaced() -> None:
    assert datas(b"data: a\xffb\n\n") == ["a\ufffdb"]


def test_comments_are_counted_and_not_dispatched() -> None:
    events, decoder = decode(b": keep-alive\n\n:\ndata: x\n: inside\n\n")
    assert [event.data for event in events] == ["x"]
    assert decoder.comments == 3


def test_event_and_id_fields() -> None:
    events, _ = decode(b"event: error\nid: 7\ndata: boom\n\ndata: next\n\n")
    assert events == [
        SSEEvent(data="boom", event="error", id="7"),
        # The event type resets after dispatch; the last event ID persists (per the spec).
        SSEEvent(data="next", event="message", id="7"),
    ]


def test_id_with_null_is_ignored_and_empty_id_resets() -> None:
    events, _ = decode(b"id: 1\ndata: a\n\nid: x\0y\ndata: b\n\nid\ndata: c\n\n")
    assert [event.id for event in events] == ["1", "1", None]


def test_retry_field() -> None:
    _, decoder = decode(b"retry: 1500\n\nretry: soon\n\n")
    assert decoder.retry == 1500


def test_field_value_spacing() -> None:
    # Only one leading space is removed; no colon means the whole line is the field name.
    assert datas(b"data:x\n\ndata:  two\n\ndata\n\n") == ["x", " two", ""]


def test_unknown_fields_ignored_and_empty_event_not_dispatched() -> None:
    assert datas(b"foo: bar\n\nevent: ping\n\ndata: x\n\n") == ["x"]


def test_multi_line_data() -> None:
    assert datas(b'data: {\ndata:   "a": 1\ndata: }\n\n') == ['{\n  "a": 1\n}']


def test_bom_at_stream_start_is_stripped_even_when_split() -> None:
    assert datas(b"\xef\xbb", b"\xbfdata: x\n\n") == ["x"]


def test_bom_later_in_stream_is_kept() -> None:
    assert datas(b"data: \xef\xbb\xbfx\n\n") == ["\ufeffx"]


@pytest.mark.parametrize(
    "stream", [b"data: x\n", b'data: {"partial', b"data: x\ndata: y"], ids=repr
)
def test_unterminated_event_is_discarded_and_flagged(stream: bytes) -> None:
    events, decoder = decode(b"data: first\n\n", stream)
    assert [event.data for event in events] == ["first"]
    assert decoder.truncated


@pytest.mark.parametrize("tail", [b"", b"\n", b": bye"], ids=repr)
def test_clean_end_is_not_truncated(tail: bytes) -> None:
    _, decoder = decode(b"data: x\n\n" + tail)
    assert not decoder.truncated


def test_byte_by_byte_equals_whole() -> None:
    stream = (
        "\ufeff: hi\r\nevent: a\rid: 1\ndata: é😀\u2028\r\n\r\n"
        'data: {"x": "€"}\n\ndata: [DONE]\r\rdata: tail'
    ).encode()
    whole, whole_decoder = decode(stream)
    pieces, piece_decoder = decode(*(stream[i : i + 1] for i in range(len(stream))))
    assert pieces == whole
    assert len(whole) == 3
    assert (piece_decoder.comments, piece_decoder.truncated) == (1, True)
    assert (whole_decoder.comments, whole_decoder.truncated) == (1, True)


def test_long_line_across_many_chunks() -> None:
    payload = "x" * 100_000
    stream = f"data: {payload}\n\n".encode()
    assert datas(*(stream[i : i + 7] for i in range(0, len(stream), 7))) == [payload]


@pytest.mark.parametrize("stream", [
    b'data: {"a": 1}\n\ndata: {"b": "hal',
    b"event: delta\ndata: one\ndata: tw",
    b"data: whole line, no blank one\n",
    b"data: first\n: a keep-alive cut sh",
    b"id: 7\nretry: 10\ndata: x\r\ndata:y",
], ids=["half_line", "named", "no_blank_line", "comment_after_data", "crlf"])
def test_the_event_a_stream_ended_inside_replays_to_the_same_cut(stream: bytes) -> None:
    """``cut`` holds the unterminated event's lines; sent again as they are (what a replay
    does), they end a stream inside the same event."""
    first = SSEDecoder()
    complete = first.feed(stream) + first.close()
    assert first.truncated and first.cut is not None
    again = SSEDecoder()
    prefix = b"".join(f"data: {event.data}\n\n".encode() for event in complete)
    assert again.feed(prefix + first.cut.encode()) + again.close() == complete
    assert again.truncated and again.cut == first.cut
