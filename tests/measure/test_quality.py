"""The quality gate's measurements: the requests, the OpenAI response shapes read, the answers of
a live (fake) server, and task checks (tests/measure/test_quality_compare.py: comparing)."""

from __future__ import annotations

import pytest

from tuner.measure.quality import Answer, answer_all, parse_answer, request
from tuner.measure.quality_compare import compare
from tuner.spec.quality_spec import QualitySpec
from tuner.testing.fake_openai_server import FakeOpenAIServer, Script, answer, serve_in_thread


def test_requests_are_greedy_seeded_unstreamed_and_ask_the_top_logprobs():
    q = QualitySpec(max_tokens=7, seed=3, top_logprobs=4)
    body = request("completions", "m", [1, 2, 3], q)
    assert body == {"model": "m", "temperature": 0, "seed": 3, "stream": False,
                    "prompt": [1, 2, 3], "max_tokens": 7, "logprobs": 4}
    from tuner.measure.client import Prompt

    chat = request("chat", "m", Prompt(text="hi"), q)
    assert chat["messages"] == [{"role": "user", "content": "hi"}]
    assert chat["max_completion_tokens"] == 7 and chat["logprobs"] is True
    assert chat["top_logprobs"] == 4
    assert "logprobs" not in request("completions", "m", [1], QualitySpec(top_logprobs=0))


@pytest.mark.parametrize("chat", [False, True])
def test_both_response_shapes_give_the_tokens_and_their_logprobs(chat):
    body = ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2} if chat
            else {"prompt": [5, 6], "logprobs": 2})
    a = parse_answer("chat" if chat else "completions", "hi", answer(body, chat, 3))
    assert len(a.tokens) == len(a.logprobs) == len(a.top_logprobs) == 3
    assert a.text == "".join(a.tokens)
    assert a.top_logprobs[0][a.tokens[0]] == a.logprobs[0]


def test_a_correct_server_repeats_the_reference_and_a_wrong_one_does_not():
    q = QualitySpec(prompts=6, max_tokens=5, concurrency=3)
    prompts = [[i, i + 1, i + 2] for i in range(6)]
    with serve_in_thread(FakeOpenAIServer()) as url:
        reference, _ = answer_all(url, "completions", "m", prompts, q, timeout_s=10)
        again, seconds = answer_all(url, "completions", "m", prompts, q, timeout_s=10)
    with serve_in_thread(FakeOpenAIServer(Script(wrong=True))) as url:
        wrong, _ = answer_all(url, "completions", "m", prompts, q, timeout_s=10)
    assert [a.prompt for a in reference] == prompts and seconds > 0
    assert all(a.error is None and len(a.tokens) == 5 for a in reference)
    assert compare(reference, again, 0.01).identical == 6
    wrong_ones = compare(reference, wrong, 0.01)
    assert (wrong_ones.identical, wrong_ones.diverging) == (0, 6)


# ---------------------------------------------------------------- task checks


def test_tasks_are_scored_by_exact_answer_or_by_a_pattern(tmp_path):
    from tuner.measure.quality_tasks import accuracy, read_tasks, task_prompts

    f = tmp_path / "tasks.jsonl"
    f.write_text('{"prompt": "2 + 2 =", "answer": "4"}\n\n'
                 '{"messages": [{"role": "user", "content": "Capital?"}], "answer": "Paris"}\n')
    tasks = read_tasks(f)
    assert [t.answer for t in tasks] == ["4", "Paris"]
    assert task_prompts(tasks, "chat")[1].messages == [{"role": "user", "content": "Capital?"}]
    answers = [Answer("2 + 2 =", " 4 "), Answer("Capital?", "It is Paris.")]
    assert accuracy(tasks, answers, "exact") == 0.5
    assert accuracy(tasks, answers, "regex") == 1.0
    assert accuracy(tasks, [Answer("x", error="boom"), answers[1]], "regex") == 0.5


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "2 + 2 ="}', 'line 1: no "answer" text: add the expected answer'),
    ('{"prompt": "x", "answer": "(["}', "line 1: the answer is not a regular expression"),
    ('{"answer": "4"}', 'line 1: no "prompt", "conversations" or "messages" field'),
])
def test_a_bad_task_file_is_one_line_naming_its_line(tmp_path, line, message):
    from tuner.measure.prompt_file import PromptFileError
    from tuner.measure.quality_tasks import read_tasks

    f = tmp_path / "tasks.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(PromptFileError) as e:
        read_tasks(f, "regex")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_gate_asks_a_conversation_workload_each_conversations_last_turn(tiny_model):
    """The whole history, shared system prompt included: one request each, as JSON."""
    import json

    from tuner.measure.quality import quality_prompts
    from tuner.spec.study_spec import WorkloadSpec

    w = WorkloadSpec(prompt_source="synthetic", input_len=8, output_len=4, concurrency=[2],
                     requests_per_level=8,
                     conversation={"turns": 3, "system_prompt_len": 16})
    q = QualitySpec(prompts=6)
    prompts = quality_prompts(w, q, tiny_model, vocab_size=1000)
    assert len(prompts) == q.prompts  # as many as the gate says it asks
    for p in prompts:
        # system prompt + 3 user messages of the gate's input length + 2 replies
        assert len(p) == 16 + 3 * q.input_len + 2 * q.max_tokens
        json.dumps(request("completions", "m", p, q))
    assert len({tuple(p[:16]) for p in prompts}) == 1  # the shared system prompt
