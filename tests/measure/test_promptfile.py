"""A user's own prompts (tuner.measure.prompt_file, tuner.measure.prompts.file_prompts): the three
JSONL shapes, one-line errors that name the line and the fix, and how prompts are picked by the
model's tokenizer and given their output lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.measure.prompt_file import FilePrompt, PromptFileError, read_prompt_file
from tuner.measure.prompts import file_prompts

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat-prompts.jsonl"


def write(tmp_path: Path, *lines) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_the_three_shapes_are_read_into_prompts_and_replies(tmp_path):
    path = write(
        tmp_path,
        {"prompt": "Tell me about tensor parallelism."},
        "",  # blank lines are skipped, and line numbers still count them
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"},
                           {"from": "human", "value": "More?"}]},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Why batch?"},
                      {"role": "assistant", "content": "Throughput."}]},
        {"messages": [{"role": "user", "content": "No reply yet"}]},
    )
    text, sharegpt, openai, open_ended = read_prompt_file(path)
    assert text == FilePrompt(1, text="Tell me about tensor parallelism.")
    assert text.message_dicts() == [{"role": "user",
                                     "content": "Tell me about tensor parallelism."}]
    # A conversation's prompt runs up to its first assistant turn, which is the reply.
    assert sharegpt == FilePrompt(3, messages=(("user", "Hi"),), reply="Hello!")
    assert openai.line == 4 and openai.reply == "Throughput."
    assert openai.message_dicts() == [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Why batch?"}]
    assert open_ended.reply is None


@pytest.mark.parametrize("line, message", [
    ("{not json", r"line 2: not JSON .*: write one JSON object per line"),
    ('["a list"]', r"line 2: a JSON list, not an object"),
    ('{"text": "x"}', r'line 2: no "prompt", "conversations" or "messages" field: use one'),
    ('{"prompt": ""}', r'line 2: "prompt" must be non-empty text'),
    ('{"conversations": []}', r"line 2: the conversation must be a non-empty list"),
    ('{"conversations": [{"from": "robot", "value": "x"}]}',
     r"line 2: turn 0 has \"from\" 'robot': use one of .*human"),
    ('{"messages": [{"role": "user"}]}', r'line 2: turn 0 has no text in "content": add it'),
    ('{"messages": [{"role": "assistant", "content": "hi"}]}',
     r"line 2: no user turn with text before the first assistant turn"),
])
def test_a_bad_line_is_a_one_line_error_naming_the_line_and_the_fix(tmp_path, line, message):
    path = write(tmp_path, {"prompt": "fine"}, line)
    with pytest.raises(PromptFileError, match=message) as e:
        read_prompt_file(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_a_missing_or_empty_file_says_so(tmp_path):
    with pytest.raises(PromptFileError, match="does not exist: check workload.prompt_file"):
        read_prompt_file(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(PromptFileError, match="has no records"):
        read_prompt_file(tmp_path / "empty.jsonl")


def test_the_shipped_example_file_reads(tiny_model):
    records = read_prompt_file(EXAMPLE)
    assert len(records) >= 20 and all(r.is_chat and r.reply for r in records)


# picking prompts with the model's tokenizer


def count(tiny_model, text: str) -> int:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    return len(tok.encode(text, add_special_tokens=False).ids)


def test_prompts_longer_than_input_len_tokens_are_skipped_and_the_rest_cycled(tmp_path,
                                                                              tiny_model):
    short, long = "The quick brown fox.", "The quick brown fox jumps over the lazy dog " * 20
    path = write(tmp_path, {"prompt": short}, {"prompt": long})
    limit = count(tiny_model, short)
    got = file_prompts(read_prompt_file(path), 5, api="completions", input_len=limit,
                       output_len=16, output_len_from="spec",
                       tokenizer_json=tiny_model / "tokenizer.json", seed=0)
    assert [p.text for p in got] == [short] * 5
    assert all(p.output_len == 16 and p.messages is None for p in got)


def test_dataset_output_lengths_are_the_replies_token_counts_capped_at_output_len(tmp_path,
                                                                                  tiny_model):
    reply = "Batching more sequences raises throughput."
    path = write(tmp_path,
                 {"messages": [{"role": "user", "content": "Why batch?"},
                               {"role": "assistant", "content": reply}]},
                 {"messages": [{"role": "user", "content": "No reply"}]})
    n = count(tiny_model, reply)
    args = dict(api="chat", input_len=100, output_len_from="dataset",
                tokenizer_json=tiny_model / "tokenizer.json", seed=0)
    (p,) = file_prompts(read_prompt_file(path), 1, output_len=1000, **args)
    assert p.output_len == n  # the record without a reply is skipped
    assert p.messages == [{"role": "user", "content": "Why batch?"}]
    (capped,) = file_prompts(read_prompt_file(path), 1, output_len=3, **args)
    assert capped.output_len == 3


def test_the_order_is_a_seeded_shuffle(tmp_path, tiny_model):
    path = write(tmp_path, *({"prompt": f"prompt number {i}"} for i in range(20)))
    args = dict(api="completions", input_len=100, output_len=4, output_len_from="spec",
                tokenizer_json=tiny_model / "tokenizer.json")
    a = [p.text for p in file_prompts(read_prompt_file(path), 20, seed=1, **args)]
    assert a == [p.text for p in file_prompts(read_prompt_file(path), 20, seed=1, **args)]
    assert a != [p.text for p in file_prompts(read_prompt_file(path), 20, seed=2, **args)]
    assert sorted(a) == sorted(f"prompt number {i}" for i in range(20))  # each once


def test_conversations_need_the_chat_api_and_nothing_usable_is_an_error(tmp_path, tiny_model):
    convo = write(tmp_path, {"prompt": "ok"},
                  {"conversations": [{"from": "human", "value": "Hi"}]})
    args = dict(input_len=100, output_len=4, output_len_from="spec",
                tokenizer_json=tiny_model / "tokenizer.json", seed=0)
    with pytest.raises(PromptFileError, match="line 2 is a conversation.*set workload.api: chat"):
        file_prompts(read_prompt_file(convo), 2, api="completions", **args)
    with pytest.raises(PromptFileError, match="no usable record.*2 longer than input_len 1 "):
        file_prompts(read_prompt_file(convo), 2, api="chat", **{**args, "input_len": 1})
