"""The SSE parser: what counts as an event, where the stream ends, and what one event carries."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tuner.measure.sse import error_of, has_choice, iter_sse_events, usage_of


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
