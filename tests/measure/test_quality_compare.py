"""Comparing a trial's greedy answers with the reference's: every answer is identical, a near-tie
(the first flip between two tokens each side ranked within the margin, both in the other's top
log-probabilities), diverging, or failed; near-ties alone never fail the tie-aware rule; a
lossless feature at the reference's numerics is held to identical answers; without
log-probabilities the gate falls back to exact match and common prefix, and says so."""

from __future__ import annotations

import pytest

from tuner.measure.quality import Answer
from tuner.measure.quality_compare import (
    DIVERGING,
    IDENTICAL,
    NEAR_TIE,
    RULE_EXACT,
    RULE_NO_LOGPROBS,
    RULE_TIES,
    compare,
    first_difference,
    gate_rule,
    quality_figures,
    shortfalls,
    verdict,
)
from tuner.spec.quality_spec import QualitySpec
from tuner.store import QualityCheck

# Strict settings, so that one answer decides: near-ties within 0.01 nats, no answer may diverge.
Q = QualitySpec(near_tie_margin=0.01, max_diverging=0)
MARGIN = Q.near_tie_margin


def said(tokens: list[str], logprobs: list[float] | None = None,
         tops: dict[int, dict[str, float]] | None = None) -> Answer:
    """An answer with its top log-probabilities: at each position its own token and two
    far-behind others, unless `tops` gives that position's list."""
    lps = logprobs if logprobs is not None else [-0.5] * len(tokens)
    top = [{t: lp, "~x": lp - 3.0, "~y": lp - 4.0} for t, lp in zip(tokens, lps, strict=True)]
    for i, given in (tops or {}).items():
        top[i] = given
    return Answer(prompt="p", text="".join(tokens), tokens=list(tokens), logprobs=lps,
                  top_logprobs=top)


def flipped(reference_gap: float, trial_gap: float) -> tuple[Answer, Answer]:
    """The reference says 'a b c', the trial 'a d e': at position 1 the reference ranked 'b'
    `reference_gap` nats above 'd', the trial 'd' `trial_gap` nats above 'b'."""
    ref = said(["a", "b", "c"], [-0.1, -0.69, -0.2],
               tops={1: {"b": -0.69, "d": -0.69 - reference_gap, "~x": -4.0}})
    got = said(["a", "d", "e"], [-0.1, -0.69, -0.3],
               tops={1: {"d": -0.69, "b": -0.69 - trial_gap, "~x": -4.0}})
    return ref, got


def judged(reference: list[Answer], answers: list[Answer], lossless: str | None = None,
           other_numerics: str | None = None, q: QualitySpec = Q):
    c = compare(reference, answers, q.near_tie_margin)
    rule = gate_rule(c, lossless, other_numerics)
    return c, rule, shortfalls(c, q, rule)


def test_identical_answers_pass_with_no_divergence():
    ref = [said(["a", "b", "c"]), said(["d", "e"])]
    c, rule, missed = judged(ref, [said(["a", "b", "c"]), said(["d", "e"])])
    assert (c.identical, c.near_ties, c.diverging, c.failed) == (2, 0, 0, 0)
    assert c.mean_logprob_divergence == 0.0 and c.differing == []
    assert rule.name == RULE_TIES and missed == []
    assert first_difference(ref, ref, c) is None


def test_a_flip_at_a_thousandth_of_a_nat_inside_both_top_k_is_a_near_tie_and_passes():
    ref, got = flipped(reference_gap=0.001, trial_gap=0.0012)
    assert verdict(ref, got, MARGIN)[0] == NEAR_TIE
    c, rule, missed = judged([ref, said(["x"])], [got, said(["x"])])
    assert (c.identical, c.near_ties, c.diverging) == (1, 1, 0)
    assert missed == [] and rule.name == RULE_TIES
    assert judged([ref, said(["x"])], [got, said(["x"])], q=QualitySpec())[2] == []  # defaults
    flip = c.first_near_tie
    assert (flip.prompt, flip.position, flip.reference_token, flip.trial_token) == (0, 1, "b",
                                                                                   "d")
    assert flip.gap == pytest.approx(0.001)  # the nearer side's
    assert c.first_divergence is None
    # Nothing after the flip is compared: 'c' against 'e' is another context, not an error.
    assert c.mean_logprob_divergence == pytest.approx((0 + 0.0012 + 0) / 3)


def test_a_token_outside_the_other_sides_top_k_diverges_and_fails():
    ref = said(["a", "b", "c"])
    got = said(["a", "z", "c"])  # 'b' is not among the trial's top 3 at position 1, nor 'z'
    assert verdict(ref, got, MARGIN)[0] == DIVERGING
    c, _, missed = judged([ref, said(["x"])], [got, said(["x"])])
    assert (c.identical, c.near_ties, c.diverging) == (1, 0, 1)
    assert missed == ["1 of 2 answers diverge (at most 0%; a flip is a near-tie only when each "
                      "token is in the other side's top log-probabilities and one side had them "
                      "within 0.01 nats)"]
    assert c.first_divergence.gap is None
    assert first_difference([ref], [got], compare([ref], [got], MARGIN)).startswith(
        "prompt 0, token 1: reference 'b', this trial 'z' (the trial's token is not in the "
        "reference's top 3; the reference's token is not in the trial's top 3)")


def test_a_flip_inside_both_top_k_but_beyond_the_margin_on_both_sides_diverges_and_fails():
    ref, got = flipped(reference_gap=0.2, trial_gap=0.15)
    assert verdict(ref, got, MARGIN)[0] == DIVERGING
    c, _, missed = judged([ref], [got])
    assert c.diverging == 1 and len(missed) == 1
    assert c.first_divergence.line() == ("prompt 0, token 1: reference 'b', this trial 'd', "
                                         "0.15 nats apart")
    # A wider margin takes it for a near-tie.
    wide = QualitySpec(near_tie_margin=0.25)
    assert judged([ref], [got], q=wide)[2] == []


def test_a_flip_that_one_side_saw_as_a_tie_is_a_near_tie_however_far_the_other_moved():
    # A near-tie in a MoE router sends the trial's position to another expert: it now prefers
    # its token by 0.3 nats, where the reference had the two 0.002 apart.
    ref, got = flipped(reference_gap=0.002, trial_gap=0.3)
    assert verdict(ref, got, MARGIN)[0] == NEAR_TIE


def test_a_trial_whose_token_is_not_its_own_top_choice_diverges():
    # A repetition penalty picks a token the model itself ranked lower: negative gap, beyond
    # the margin however small the model's own difference is across the tie.
    ref, got = flipped(reference_gap=0.001, trial_gap=-0.4)
    assert verdict(ref, got, MARGIN)[0] == DIVERGING


def test_an_answer_that_picks_below_its_own_top_diverges_unless_the_reference_does_too():
    # Within the margin either way, but the trial picked 'd' while its own log-probabilities
    # put 'b' higher: not a near-tie but another decoding (a penalty, a logit bias).
    ref, got = flipped(reference_gap=0.001, trial_gap=-0.005)
    kind, flip = verdict(ref, got, MARGIN)
    assert kind == DIVERGING and flip.off_greedy == 1
    assert "from token 1 it picks tokens its own log-probabilities rank lower" in flip.line()
    assert compare([ref], [got], MARGIN).diverging == 1
    # A reference that does the same (the study's own engine args carry a penalty, say) gives
    # no such yardstick: the flip is judged by its gaps alone.
    odd = said(["q"], [-1.0], tops={0: {"r": -0.5, "q": -1.0}})
    c = compare([ref, odd], [got, odd], MARGIN)
    assert (c.near_ties, c.diverging) == (1, 0)


def test_answers_without_logprobs_fall_back_to_exact_match_and_common_prefix_and_say_so():
    ref = [Answer("p", "hello world"), Answer("q", "same")]
    got = [Answer("p", "hello there"), Answer("q", "same")]
    c, rule, missed = judged(ref, got)
    assert not c.tie_aware and rule.name == RULE_NO_LOGPROBS
    assert "no log-probabilities" in rule.why
    assert (c.identical, c.near_ties, c.diverging) == (1, 0, 1)
    assert c.mean_logprob_divergence is None and c.worst is None
    # 50% exact (needs 50%) passes; the common prefix (6/11 + 1) / 2 = 77% passes 75%.
    assert missed == []
    wrong = judged(ref, [Answer("p", "xyz"), Answer("q", "no")])[2]
    assert wrong == ["exact match 0% (needs 50%; no log-probabilities to tell near-ties)",
                     "common prefix 0% of the reference answers (needs 75%)"]
    assert first_difference(ref, got, c).startswith("prompt 0, from character 6:")


def test_a_lossless_feature_at_the_references_numerics_is_held_to_identical_answers():
    ref, got = flipped(reference_gap=0.001, trial_gap=0.001)
    c, rule, missed = judged([ref, said(["x"])], [got, said(["x"])],
                             lossless="speculative_method=ngram")
    assert rule.name == RULE_EXACT
    assert missed == ["speculative_method=ngram is lossless under greedy decoding at the "
                      "reference's numerics, yet 1 of 2 answers differ from the reference (1 "
                      "near-ties, 0 diverging; exact match 50%, needs 100%)"]
    # On two ranks the same near-tie is numerics: the tie-aware rule judges, and says why.
    c, rule, missed = judged([ref, said(["x"])], [got, said(["x"])],
                             lossless="speculative_method=ngram",
                             other_numerics="tensor_parallel_size=2")
    assert rule.name == RULE_TIES and missed == []
    assert rule.why.startswith("speculative_method=ngram, but tensor_parallel_size=2 differs")


def test_failed_requests_and_a_wide_logprob_divergence_fail_the_gate():
    ref = [said(["a", "b"]), said(["c", "d"])]
    c, _, missed = judged(ref, [said(["a", "b"]), Answer("p", error="HTTP 500: boom")])
    assert c.failed == 1 and missed == ["1 of 2 requests failed"]
    assert first_difference(ref, [ref[0], Answer("p", error="HTTP 500: boom")], c) == \
        "prompt 1: the request failed (HTTP 500: boom)"
    drift = [said(["a", "b"], [-1.0, -1.0]), said(["c", "d"])]
    c, _, missed = judged(ref, drift, q=QualitySpec(max_logprob_divergence=0.1))
    assert missed == ["logprob divergence 0.25 nats (at most 0.1)"]
    assert (c.worst.prompt, c.worst.position, c.worst.nats) == (0, 0, pytest.approx(0.5))


def test_an_answer_that_ends_before_the_other_diverges():
    ref, got = said(["a", "b", "c"]), said(["a", "b"])
    kind, flip = verdict(ref, got, MARGIN)
    assert kind == DIVERGING and flip.trial_token is None
    assert flip.line() == "prompt 0, token 2: reference 'c', this trial (end) (one answer ended)"


def test_the_figures_read_as_counts_and_name_the_rule_where_it_is_not_the_tie_aware_one():
    check = QualityCheck(passed=True, prompts=32, exact_match_rate=0.5, mean_common_prefix=20,
                         common_prefix_share=0.7, mean_logprob_divergence=0.0012, gate_s=1.0,
                         answers=[], identical=16, near_ties=16, diverging=0, failed=0,
                         rule=f"{RULE_TIES}: why")
    assert quality_figures(check) == ("16 identical, 16 near-ties, 0 diverging of 32, "
                                      "logprob Δ 0.0012 nats")
    exact = QualityCheck(**{**check.__dict__, "rule": f"{RULE_EXACT}: why",
                            "lossless": "speculative_method=ngram"})
    assert quality_figures(exact).endswith("speculative_method=ngram held to exact match")
    # A check stored before the tie-aware gate has no counts: its old figures.
    old = QualityCheck(**{**check.__dict__, "identical": None, "near_ties": None,
                          "diverging": None, "failed": None, "rule": None})
    assert quality_figures(old) == "exact 50%, prefix 70%, logprob Δ 0.0012 nats"
    assert IDENTICAL == "identical"
