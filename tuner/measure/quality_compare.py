"""A trial's greedy answers against the reference's, the way the engines' own test suites compare
two runs of a model (vLLM's `check_logprobs_close`, tests/models/utils.py): walk both answers
token by token; at the first position where they differ, each side's token must be among the
other side's top log-probabilities; nothing after that position is compared, since every later
token is conditioned on another text.

One step further than vLLM's check: a flip is a **near-tie** only when, in addition, one side
had the two tokens within `margin` nats of each other. Another reduction order (tensor
parallelism, another kernel) moves log-probabilities by thousandths of a nat and flips the
greedy token where two were that close; the other side may still prefer its own token by
tenths of a nat (a near-tie inside a MoE router sends a position to another expert: measured
on the tiny gpt-oss at TP2, bench/quality_near_ties.py). A fault (a KV cache that rounds too
coarsely, another RoPE base) also flips tokens where neither side saw a tie, and so soon that
many answers diverge. Every answer is one of:
identical, near-tie, diverging, or failed (the request failed).

A greedy answer's every token is the top of the log-probabilities its engine reports (vLLM
reports the model's raw ones by default). Where the reference's answers keep to that, a trial
answer that differs and picks a token its own log-probabilities rank lower diverges, whatever
the gap at its flip: its decoding changed (a repetition penalty, a logit bias), not its numerics.

Where the engine returned no log-probabilities a flip cannot be told from a wrong answer: each
difference counts as diverging and the gate falls back to exact match and common prefix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from tuner.measure.quality import Answer
from tuner.spec.quality_spec import QualitySpec
from tuner.store import QualityCheck

IDENTICAL, NEAR_TIE, DIVERGING, FAILED = "identical", "near-tie", "diverging", "failed"

# The gate's rules, by name (stored with each check and shown beside its counts).
RULE_TIES = "tie-aware"
RULE_EXACT = "exact"
RULE_NO_LOGPROBS = "exact match and common prefix"

_SAMPLE_CHARS = 120
# A greedy token's log-probability against the highest its engine reports: rounding apart.
_GREEDY_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Flip:
    """Where a trial's answer first leaves the reference's: each side's token there (None where
    that answer ended) and how far each side put its own token above the other's, in nats
    (None: the other's token was not in its top log-probabilities)."""

    prompt: int
    position: int
    reference_token: str | None
    trial_token: str | None
    reference_gap: float | None  # reference: logprob(its token) - logprob(the trial's token)
    trial_gap: float | None  # trial: logprob(its token) - logprob(the reference's token)
    reference_top: dict[str, float]
    trial_top: dict[str, float]
    # The first position where the trial picked a token its own log-probabilities rank lower
    # (counted only where the reference's answers never do): its decoding changed.
    off_greedy: int | None = None

    @property
    def gap(self) -> float | None:
        """How near the tie was, in nats: the narrower of the two sides' gaps (a flip by
        numerics happens where one side had the two tokens nearly tied; the other side may have
        moved far, as when a near-tie in a MoE router sends a token to another expert); None
        when either token was not in the other side's top log-probabilities."""
        if self.reference_gap is None or self.trial_gap is None:
            return None
        return min(abs(self.reference_gap), abs(self.trial_gap))

    def line(self) -> str:
        """The flip in one line, as the gate's reason and `tuner best` print it."""
        where = f"prompt {self.prompt}, token {self.position}: reference "
        sides = f"{_token(self.reference_token)}, this trial {_token(self.trial_token)}"
        if self.reference_token is None or self.trial_token is None:
            return where + sides + " (one answer ended)"
        gap = self.gap
        if self.off_greedy is not None:
            sides += (f" (from token {self.off_greedy} it picks tokens its own log-probabilities "
                      "rank lower: its decoding changed)")
        if gap is not None:
            return where + sides + f", {gap:.3g} nats apart"
        missing = []
        if self.reference_gap is None:
            missing.append("the trial's token is not in the reference's top "
                           f"{len(self.reference_top)}")
        if self.trial_gap is None:
            missing.append("the reference's token is not in the trial's top "
                           f"{len(self.trial_top)}")
        return where + sides + " (" + "; ".join(missing) + ")"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Flip:
        return cls(**d)


@dataclass(frozen=True)
class Drift:
    """The widest log-probability difference where both answers saw the same text."""

    prompt: int
    position: int
    nats: float


@dataclass(frozen=True)
class Comparison:
    """A trial's answers against the reference's, prompt by prompt."""

    prompts: int
    identical: int
    near_ties: int
    diverging: int
    failed: int  # requests that failed
    tie_aware: bool  # both sides gave top log-probabilities, so near-ties could be told apart
    exact_match_rate: float
    mean_common_prefix: float  # units (tokens, or characters) before the first difference
    common_prefix_share: float  # that prefix over the reference answer's length, mean
    mean_logprob_divergence: float | None  # nats, over the positions with the same context
    worst: Drift | None
    first_near_tie: Flip | None
    first_divergence: Flip | None
    differing: list[int]  # indices of the prompts whose answers differ, in order


@dataclass(frozen=True)
class Rule:
    """Which of the gate's rules judged a trial, and why that one."""

    name: str  # RULE_TIES, RULE_EXACT or RULE_NO_LOGPROBS
    why: str


def common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _top(answer: Answer, i: int) -> dict[str, float] | None:
    if answer.top_logprobs is None or i >= len(answer.top_logprobs):
        return None
    return answer.top_logprobs[i]


def _gap(answer: Answer, i: int, other: str, top: dict[str, float]) -> float | None:
    """How far `answer` put its own token at `i` above `other` (None if `other` is not in
    its top log-probabilities or its own is unknown)."""
    own = answer.logprobs[i] if answer.logprobs is not None and i < len(answer.logprobs) else None
    if own is None or other not in top:
        return None
    return own - top[other]


def can_tell_ties(ref: Answer, got: Answer) -> bool:
    """Both answers name their tokens with their top log-probabilities."""
    return all(a.tokens is not None and a.logprobs is not None and a.top_logprobs
               for a in (ref, got))


def flip_at(ref: Answer, got: Answer, prompt: int) -> Flip | None:
    """The first position where the answers differ, with each side's view of the other's
    token; None when they are identical or either lacks log-probabilities."""
    if not can_tell_ties(ref, got):
        return None
    want, have = ref.units(), got.units()
    i = common_prefix(want, have)
    if want == have:
        return None
    a = want[i] if i < len(want) else None
    b = have[i] if i < len(have) else None
    ref_top, got_top = _top(ref, i) or {}, _top(got, i) or {}
    return Flip(prompt=prompt, position=i, reference_token=a, trial_token=b,
                reference_gap=None if a is None or b is None else _gap(ref, i, b, ref_top),
                trial_gap=None if a is None or b is None else _gap(got, i, a, got_top),
                reference_top=dict(ref_top), trial_top=dict(got_top))


def off_greedy(answer: Answer) -> int | None:
    """The first position where `answer` picked a token its own top log-probabilities rank
    below another by more than rounding; None where it never did (or named none)."""
    if answer.logprobs is None or not answer.top_logprobs:
        return None
    for i, (lp, top) in enumerate(zip(answer.logprobs, answer.top_logprobs, strict=False)):
        if lp is not None and top and lp < max(top.values()) - _GREEDY_TOLERANCE:
            return i
    return None


def decodes_greedily(answers: list[Answer]) -> bool:
    """Every answer's tokens are the top of the log-probabilities it reports (the engine
    reports the distribution it decodes from)."""
    return all(off_greedy(a) is None for a in answers if a.error is None)


def verdict(ref: Answer, got: Answer, margin: float, prompt: int = 0,
            greedy: bool = True) -> tuple[str, Flip | None]:
    """One answer's verdict against the reference's, and its flip where they differ.
    `greedy`: the reference's answers keep to their log-probabilities' top (decodes_greedily),
    so a trial answer that does not has changed its decoding."""
    if got.error is not None:
        return FAILED, None
    if ref.units() == got.units():
        return IDENTICAL, None
    flip = flip_at(ref, got, prompt)
    if flip is not None and greedy:
        off = off_greedy(got)
        if off is not None:
            return DIVERGING, replace(flip, off_greedy=off)
    if flip is not None and flip.gap is not None and flip.gap <= margin:
        return NEAR_TIE, flip
    return DIVERGING, flip


def _shared_context_gaps(ref: Answer, got: Answer, prefix: int) -> list[tuple[int, float]]:
    """(position, |logprob difference|) of the reference's tokens where both answers had the
    same context: the common prefix, and the first differing position, where the reference's
    token is looked up in the trial's top log-probabilities (skipped if absent)."""
    if ref.logprobs is None or got.logprobs is None:
        return []
    out = [(i, abs(ref.logprobs[i] - got.logprobs[i])) for i in range(prefix)
           if ref.logprobs[i] is not None and got.logprobs[i] is not None]
    want = ref.units()
    top = _top(got, prefix)
    if prefix < len(want) and top:
        there = top.get(want[prefix])
        if there is not None and ref.logprobs[prefix] is not None:
            out.append((prefix, abs(ref.logprobs[prefix] - there)))
    return out


def compare(reference: list[Answer], answers: list[Answer], margin: float) -> Comparison:
    """Each answer's verdict against the reference's (near-ties within `margin` nats), the
    exact-match rate, the mean common prefix (and its share of the reference answer) and the
    mean log-probability divergence over the shared contexts, prompt for prompt."""
    if len(reference) != len(answers):
        raise ValueError(f"{len(answers)} answers to compare with {len(reference)} references")
    counts = {IDENTICAL: 0, NEAR_TIE: 0, DIVERGING: 0, FAILED: 0}
    firsts: dict[str, Flip] = {}
    prefixes, shares, gaps, differing = [], [], [], []
    worst: Drift | None = None
    tie_aware = bool(reference)
    greedy = decodes_greedily(reference)
    for i, (ref, got) in enumerate(zip(reference, answers, strict=True)):
        kind, flip = verdict(ref, got, margin, i, greedy)
        counts[kind] += 1
        if flip is not None:
            firsts.setdefault(kind, flip)
        if kind != IDENTICAL:
            differing.append(i)
        want, have = ref.units(), ([] if got.error else got.units())
        n = common_prefix(want, have)
        prefixes.append(n)
        shares.append(n / len(want) if want else float(kind == IDENTICAL))
        if got.error is None:
            tie_aware = tie_aware and can_tell_ties(ref, got)
            for position, nats in _shared_context_gaps(ref, got, n):
                gaps.append(nats)
                if worst is None or nats > worst.nats:
                    worst = Drift(i, position, nats)
    count = len(reference)
    logprobs = any(a.logprobs is not None for a in reference)
    return Comparison(
        prompts=count, identical=counts[IDENTICAL], near_ties=counts[NEAR_TIE],
        diverging=counts[DIVERGING], failed=counts[FAILED], tie_aware=tie_aware,
        exact_match_rate=counts[IDENTICAL] / count if count else 1.0,
        mean_common_prefix=sum(prefixes) / count if count else 0.0,
        common_prefix_share=sum(shares) / count if count else 1.0,
        mean_logprob_divergence=(sum(gaps) / len(gaps) if gaps else None) if logprobs
        else None,
        worst=worst if logprobs else None,
        first_near_tie=firsts.get(NEAR_TIE), first_divergence=firsts.get(DIVERGING),
        differing=differing)


def gate_rule(c: Comparison, lossless: str | None, other_numerics: str | None) -> Rule:
    """The rule a trial is judged by. A lossless feature (`lossless`, e.g.
    `speculative_method=ngram`) at the reference's numerics must leave every answer identical;
    with other numerics (`other_numerics`, e.g. `tensor_parallel_size=2`) a near-tie may flip,
    so it is judged by the tie-aware rule like any configuration; without log-probabilities
    near-ties cannot be told apart and exact match and common prefix judge."""
    if lossless is not None and other_numerics is None:
        return Rule(RULE_EXACT, f"{lossless} is lossless under greedy decoding at the "
                    "reference's numerics")
    if not c.tie_aware:
        return Rule(RULE_NO_LOGPROBS, "the engine returned no log-probabilities, so a "
                    "near-tie cannot be told from a wrong answer")
    if lossless is not None:
        return Rule(RULE_TIES, f"{lossless}, but {other_numerics} differs from the reference: "
                    "other numerics flip near-ties the feature did not")
    return Rule(RULE_TIES, "answers compared as vLLM's check_logprobs_close does, near-ties "
                "apart")


def shortfalls(c: Comparison, q: QualitySpec, rule: Rule) -> list[str]:
    """Why these figures fail the gate under `rule` (empty: they pass). Near-ties alone never
    fail a configuration under the tie-aware rule."""
    out = []
    if c.failed:
        out.append(f"{c.failed} of {c.prompts} requests failed")
    if rule.name == RULE_EXACT:
        needed = q.lossless.min_exact_match
        if c.exact_match_rate < needed:
            out.append(f"{rule.why}, yet {c.prompts - c.identical} of {c.prompts} answers "
                       f"differ from the reference ({c.near_ties} near-ties, {c.diverging} "
                       f"diverging; exact match {c.exact_match_rate:.0%}, needs {needed:.0%})")
    elif rule.name == RULE_NO_LOGPROBS:
        if c.exact_match_rate < q.min_exact_match:
            out.append(f"exact match {c.exact_match_rate:.0%} (needs {q.min_exact_match:.0%}; "
                       "no log-probabilities to tell near-ties)")
        if c.common_prefix_share < q.min_common_prefix:
            out.append(f"common prefix {c.common_prefix_share:.0%} of the reference answers "
                       f"(needs {q.min_common_prefix:.0%})")
    elif c.prompts and c.diverging / c.prompts > q.max_diverging:
        out.append(f"{c.diverging} of {c.prompts} answers diverge (at most "
                   f"{q.max_diverging:.0%}; a flip is a near-tie only when each token is in the "
                   f"other side's top log-probabilities and one side had them within "
                   f"{q.near_tie_margin:g} nats)")
    d = c.mean_logprob_divergence
    if d is not None and d > q.max_logprob_divergence:
        out.append(f"logprob divergence {d:.3g} nats (at most {q.max_logprob_divergence:g})")
    return out


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SAMPLE_CHARS else text[: _SAMPLE_CHARS - 1] + "…"


def _token(token: str | None) -> str:
    return "(end)" if token is None else repr(token)


def first_difference(reference: list[Answer], answers: list[Answer], c: Comparison) -> str | None:
    """The first diverging answer (else the first near-tie, else the first that differs) beside
    the reference's, in one line; None when all match."""
    if not c.differing:
        return None
    flip = c.first_divergence or c.first_near_tie
    i = flip.prompt if flip is not None else c.differing[0]
    ref, got = reference[i], answers[i]
    if got.error:
        return f"prompt {i}: the request failed ({got.error})"
    if flip is not None:
        return f"{flip.line()}; reference {_clip(ref.text)!r}, this trial {_clip(got.text)!r}"
    at = common_prefix(ref.units(), got.units())
    unit = "token" if ref.tokens is not None else "character"
    return (f"prompt {i}, from {unit} {at}: reference {_clip(ref.text)!r}, this trial "
            f"{_clip(got.text)!r}")


def quality_figures(q: QualityCheck) -> str:
    """A stored check's figures in one phrase, as the study's line, every table and `tuner
    best` print them: the answers by verdict (a check stored before the tie-aware gate: its
    exact-match rate and common prefix), the logprob divergence, the rule where it is not the
    tie-aware one, and the task accuracy."""
    d = q.mean_logprob_divergence
    if q.identical is None:
        text = f"exact {q.exact_match_rate:.0%}, prefix {q.common_prefix_share:.0%}"
    else:
        text = (f"{q.identical} identical, {q.near_ties} near-ties, {q.diverging} diverging "
                f"of {q.prompts}" + (f", {q.failed} failed" if q.failed else ""))
    if d is not None:
        text += f", logprob Δ {d:.2g} nats"
    rule = (q.rule or "").partition(":")[0]
    if rule == RULE_EXACT or (q.rule is None and q.lossless):
        text += f", {q.lossless} held to exact match"
    elif rule == RULE_NO_LOGPROBS:
        text += (f", no logprobs: exact {q.exact_match_rate:.0%}, prefix "
                 f"{q.common_prefix_share:.0%}")
    if q.task_accuracy is not None:
        text += f", tasks {q.task_accuracy:.0%} right"
    return text
