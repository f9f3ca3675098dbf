"""The SSE parser: what counts as an event, where the stream ends, and what one event carries."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.measure.sse import (
    SSEParser,
    error_of,
    has_choice,
    iter_sse_events,
    iter_sse_reads,
    usage_of,
)


async def _pieces(pieces: list[bytes]):
    for piece in pieces:
        yield piece


def parse_pieces(pieces: list[bytes]) -> list[dict]:
    async def collect():
        return [event async for event in iter_sse_events(_pieces(pieces))]

    return asyncio.run(collect())


def parse(data: bytes) -> list[dict]:
    """Parse a stream that arrives line by line."""
    return parse_pieces(data.splitlines(keepends=True))


def cut(data: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    bounds = (0, *cuts, len(data))
    return [data[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class _Protocol:
    """The little of aiohttp's protocol that a StreamReader touches."""

    connected = True
    _reading_paused = False

    def pause_reading(self):
        pass

    def resume_reading(self, resume_parser: bool = True):
        pass


def parse_network_pieces(pieces: list[bytes]) -> list[dict]:
    """Feed a real aiohttp StreamReader piece by piece, yielding to the reader between pieces,
    and parse what `iter_any()` hands over, as the load generator does."""

    async def run():
        reader = aiohttp.StreamReader(_Protocol(), 2**16, loop=asyncio.get_running_loop())

        async def feed():
            for piece in pieces:
                reader.feed_data(piece)
                await asyncio.sleep(0)
            reader.feed_eof()

        feeder = asyncio.create_task(feed())
        events = [event async for event in iter_sse_events(reader.iter_any())]
        await feeder
        return events

    return asyncio.run(run())


def test_each_data_event_is_one_json_object_and_done_ends_the_stream():
    stream = (
        b'data: {"choices": [{"text": "a"}]}\n\n'
        b'data: {"choices": [{"text": "b"}]}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"after": "done"}\n\n'
    )
    assert parse(stream) == [{"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]}]


def test_comments_blank_lines_and_other_fields_are_ignored():
    stream = (
        b": keep-alive comment\n\n"
        b"\n\n"
        b"event: completion\n"
        b"id: 7\n"
        b"retry: 1000\n"
        b'data: {"n": 1}\n\n'
        b"data: [DONE]\n\n"
    )
    assert parse(stream) == [{"n": 1}]


def test_data_without_a_space_after_the_colon_and_crlf_line_ends():
    assert parse(b'data:{"n": 1}\r\n\r\ndata: {"n": 2}\r\n\r\n') == [{"n": 1}, {"n": 2}]


def test_several_data_lines_make_one_event_joined_by_newlines():
    assert parse(b'data: {"n":\ndata: 1}\n\n') == [{"n": 1}]


def test_an_event_without_its_closing_blank_line_at_end_of_stream_is_dropped():
    assert parse(b'data: {"n": 1}\n\ndata: {"n": 2}\n') == [{"n": 1}]


STREAM = (
    b'data: {"choices": [{"text": "caf\xc3\xa9"}]}\r\n\r\n'
    b": comment\n\n"
    b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\n'
    b"data: [DONE]\n\n"
)
STREAM_EVENTS = [
    {"choices": [{"text": "caf\u00e9"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
]
# Cuts inside "data:", between \r and \n, inside the two bytes of the UTF-8 e-acute, and so on.
CUTS = [(), (3,), (5, 6), (33,), (32, 33, 34), (20, 39, 40, 41), tuple(range(1, len(STREAM)))]


@pytest.mark.parametrize("cuts", CUTS)
def test_a_stream_cut_into_chunks_anywhere_gives_the_same_events(cuts):
    assert STREAM[32:34] == b"\xc3\xa9" and STREAM[38:42] == b"\r\n\r\n"
    assert parse_pieces(cut(STREAM, cuts)) == STREAM_EVENTS


@pytest.mark.parametrize("cuts", CUTS)
def test_events_split_across_network_chunks_are_reassembled_from_an_aiohttp_reader(cuts):
    assert parse_network_pieces(cut(STREAM, cuts)) == STREAM_EVENTS


def test_a_line_without_end_is_refused_before_it_eats_the_memory():
    endless = [b"data: " + b"x" * 4096] * 300  # 1.2 MB and no newline

    with pytest.raises(ValueError, match="SSE line longer"):
        parse_pieces(endless)


def test_bytes_that_are_not_utf8_are_a_value_error():
    with pytest.raises(ValueError):
        parse(b'data: {"text": "\xff"}\n\n')


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"{not json"])
def test_data_that_is_not_a_json_object_raises_value_error(payload):
    with pytest.raises(ValueError):
        parse(b"data: " + payload + b"\n\n")


def test_completion_chunks_carry_a_choice_even_with_empty_text():
    assert has_choice({"choices": [{"index": 0, "text": " the", "finish_reason": None}]})
    assert has_choice({"choices": [{"index": 0, "text": "", "finish_reason": None}]})


def test_chat_chunks_carry_a_choice_in_the_delta_even_with_empty_content():
    assert has_choice({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
    assert has_choice({"choices": [{"index": 0, "delta": {"content": ""}}]})


def test_the_chat_role_announcement_is_not_a_token_unless_it_carries_text():
    # vLLM sends {"role": "assistant", "content": ""} in the same step as the first token.
    assert not has_choice({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                              "content": ""}}]})
    assert has_choice({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "content": "Hi"}}]})


def test_the_usage_only_chunk_and_error_events_carry_no_choice():
    assert not has_choice({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    assert not has_choice({"error": {"message": "x"}})


def test_usage_gives_prompt_and_completion_tokens():
    event = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 34,
                                      "total_tokens": 46}}
    assert usage_of(event) == (12, 34)


@pytest.mark.parametrize("event", [
    {"choices": [{"text": "a"}], "usage": None},
    {"choices": [{"text": "a"}]},
    {"choices": [], "usage": {"prompt_tokens": 12}},
])
def test_usage_is_none_unless_both_counts_are_there(event):
    assert usage_of(event) is None


def test_error_events_give_their_message():
    assert error_of({"error": {"object": "error", "message": "engine died"}}) == "engine died"
    assert error_of({"error": "plain text"}) == "plain text"
    assert error_of({"choices": [{"text": "a"}]}) is None


# Parsing a read as a whole: the fast path (every event one `data: ` line) and the line-by-line
# path must give the same events, wherever the network cuts the bytes.


def vllm_chunk(text: str, finish: str | None = None) -> dict:
    return {"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1764633600,
            "model": "m", "choices": [{"index": 0, "text": text, "logprobs": None,
                                       "finish_reason": finish, "stop_reason": None}],
            "usage": None}


VLLM_EVENTS = [
    vllm_chunk(" The"), vllm_chunk(""), vllm_chunk(" caf\u00e9"), vllm_chunk(" [DONE]"),
    vllm_chunk(".", "length"),
    {"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1764633600,
     "model": "m", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5,
                                            "total_tokens": 10}},
]
VLLM_STREAM = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in VLLM_EVENTS) + (
    b"data: [DONE]\n\n")


def reads(pieces: list[bytes]) -> list[list[dict]]:
    async def collect():
        return [events async for events in iter_sse_reads(_pieces(pieces))]

    return asyncio.run(collect())


def test_a_whole_vllm_stream_in_one_read_is_its_events_in_one_batch_up_to_done():
    # Token chunks, one whose text says [DONE] (a token, not the end), the usage chunk, [DONE].
    assert reads([VLLM_STREAM + b'data: {"after": "done"}\n\n']) == [VLLM_EVENTS]


def test_a_vllm_stream_cut_in_two_at_any_byte_gives_each_piece_the_events_it_completed():
    n = len(VLLM_EVENTS)
    for at in range(1, len(VLLM_STREAM)):
        k = min(VLLM_STREAM[:at].count(b"\n\n"), n)  # events complete in the first piece
        expected = [VLLM_EVENTS[:k]] * (k > 0) + [VLLM_EVENTS[k:]] * (k < n)
        assert reads([VLLM_STREAM[:at], VLLM_STREAM[at:]]) == expected, f"cut at byte {at}"


def test_each_read_hands_over_the_events_it_completed():
    events = [vllm_chunk(f" t{i}") for i in range(5)]
    raw = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    # Two events and half of the third; the rest of the third and the fourth; the fifth, [DONE].
    half = len(raw[2]) // 2
    pieces = [raw[0] + raw[1] + raw[2][:half], raw[2][half:] + raw[3],
              raw[4] + b"data: [DONE]\n\n"]
    assert reads(pieces) == [events[:2], events[2:4], events[4:]]


def test_a_read_that_completes_no_event_hands_over_nothing():
    parser = SSEParser()
    assert parser.feed(b'data: {"choices": [') == []
    assert parser.feed(b"]}\n") == []
    assert parser.feed(b"\n") == [{"choices": []}]


def test_after_done_the_parser_takes_nothing_more():
    parser = SSEParser()
    assert parser.feed(b'data: {"n": 1}\n\ndata: [DONE]\n\ndata: {"n": 2}\n\n') == [{"n": 1}]
    assert parser.done
    assert parser.feed(b'data: {"n": 3}\n\n') == []


def test_an_error_event_in_a_batch_is_an_event_like_any_other():
    stream = (b"data: " + orjson.dumps(vllm_chunk(" a")) + b"\n\n"
              b'data: {"error": {"object": "error", "message": "engine died", "code": 500}}\n\n')
    (batch,) = reads([stream])
    assert [error_of(e) for e in batch] == [None, "engine died"]


@pytest.mark.parametrize("stream", [
    b'data: {"n": 1}, {"n": 2}\n\n',  # two objects in one event: not two events
    b'data: {"n": 1}\n\ndata: [1]\n\n',  # one good event, then one that is no object
    b'data: {"n": 1}\n\ndata: {"n": \n\n',  # one good event, then broken JSON
])
def test_a_bad_event_among_good_ones_is_a_value_error(stream):
    with pytest.raises(ValueError):
        SSEParser().feed(stream)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


@given(
    texts=st.lists(_TEXT, max_size=8),
    crlf=st.booleans(),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_stream_cut_anywhere_gives_the_events_that_were_sent(texts, crlf, comments, cuts):
    events = [vllm_chunk(t) for t in texts]
    end = b"\r\n" if crlf else b"\n"
    stream = b"".join((b": ping" + end + end if comments else b"")
                      + b"data: " + orjson.dumps(e) + end + end for e in events)
    stream += b"data: [DONE]" + end + end
    pieces = cut(stream, tuple(sorted({c % (len(stream) + 1) for c in cuts})))
    assert [e for batch in reads(pieces) for e in batch] == events
