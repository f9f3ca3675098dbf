"""The quality gate's measurements: the figures of a trial's answers against the reference's,
what fails the gate, the OpenAI response shapes read, and the answers of a live (fake) server."""

from __future__ import annotations

import pytest
from fake_openai_server import FakeOpenAIServer, Script, answer, serve_in_thread

from tuner.measure.quality import (
    Answer,
    answer_all,
    compare,
    first_difference,
    parse_answer,
    request,
    shortfalls,
)
from tuner.spec.quality_spec import QualitySpec


def said(*tokens: str, logprobs: list[float] | None = None) -> Answer:
    lps = logprobs if logprobs is not None else [-0.5] * len(tokens)
    return Answer(prompt="p", text="".join(tokens), tokens=list(tokens), logprobs=lps,
                  top_logprobs=[{t: lp} for t, lp in zip(tokens, lps, strict=True)])


def test_identical_answers_match_exactly_with_no_divergence():
    ref = [said("a", "b", "c"), said("d", "e")]
    c = compare(ref, [said("a", "b", "c"), said("d", "e")])
    assert c.exact_match_rate == 1.0 and c.common_prefix_share == 1.0
    assert c.mean_common_prefix == 2.5 and c.mean_logprob_divergence == 0.0
    assert c.differing == [] and first_difference(ref, ref, c) is None


def test_a_diverging_answer_counts_its_prefix_and_its_logprob_gaps_where_contexts_agree():
    ref = [said("a", "b", "c", "d", logprobs=[-0.1, -0.2, -0.3, -0.4]), said("x", "y")]
    trial = [said("a", "b", "z", "z", logprobs=[-0.1, -0.4, -0.1, -0.1]), said("x", "y")]
    trial[0].top_logprobs[2]["c"] = -0.9  # the reference's token, ranked lower here
    c = compare(ref, trial)
    assert c.exact_match_rate == 0.5 and c.differing == [0]
    assert c.mean_common_prefix == (2 + 2) / 2
    assert c.common_prefix_share == pytest.approx((2 / 4 + 1) / 2)
    # Positions 0-1 (same tokens) and 2 (same context, the reference's token looked up): of the
    # first answer 0, 0.2 and 0.6; of the second 0 and 0.
    assert c.mean_logprob_divergence == pytest.approx((0 + 0.2 + 0.6 + 0 + 0) / 5)
    assert first_difference(ref, trial, c) == "prompt 0, from token 2: reference 'abcd', this " \
                                              "trial 'abzz'"


def test_without_logprobs_answers_are_compared_by_character_and_a_failed_request_matches_nothing():
    ref = [Answer("p", "hello world"), Answer("q", "same")]
    got = [Answer("p", "hello there"), Answer("q", error="HTTP 500: boom")]
    c = compare(ref, got)
    assert c.exact_match_rate == 0.0 and c.mean_logprob_divergence is None
    assert c.mean_common_prefix == (6 + 0) / 2
    assert first_difference(ref, got, c).startswith("prompt 0, from character 6:")
    failed = compare(ref[1:], got[1:])
    assert first_difference(ref[1:], got[1:], failed) == ("prompt 0: the request failed "
                                                          "(HTTP 500: boom)")


def test_the_gate_fails_on_each_threshold_and_names_a_lossless_feature():
    q = QualitySpec(min_exact_match=0.5, min_common_prefix=0.75, max_logprob_divergence=0.1)
    ref = [said("a", "b"), said("c", "d")]
    assert shortfalls(compare(ref, ref), q, None) == []
    half = compare(ref, [said("a", "b"), said("c", "x")])  # 50% exact, 75% prefix
    assert shortfalls(half, q, None) == []
    why = shortfalls(half, q, "speculative_method=ngram")
    assert why == ["speculative_method=ngram is lossless under greedy decoding, yet 1 of 2 "
                   "answers differ from the reference (exact match 50%, needs 100%)"]
    wrong = compare(ref, [said("x", "y"), said("z", "w")])
    assert shortfalls(wrong, q, None) == ["exact match 0% (needs 50%)",
                                          "common prefix 0% of the reference answers (needs 75%)"]
    drift = compare(ref, [said("a", "b", logprobs=[-1.0, -1.0]), said("c", "d")])
    assert shortfalls(drift, q, None) == ["logprob divergence 0.25 nats (at most 0.1)"]


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
    assert compare(reference, again).exact_match_rate == 1.0
    assert compare(reference, wrong).exact_match_rate == 0.0


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
