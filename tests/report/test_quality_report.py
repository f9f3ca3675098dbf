"""Each trial's quality figures beside its speed: the tables' cell, the best card, and the trial
page's answers that differ from the reference, side by side."""

from __future__ import annotations

from tests.report.test_dashboard_data import BASE, HW, SPACE, SPEC
from tuner.report import dashboard_data as dd
from tuner.report.tables import QUALITY, quality_text, trials_frame
from tuner.store import QualityCheck, Store


def answer(text: str, tokens: list[str]) -> dict:
    return {"prompt": "the prompt", "text": text, "tokens": tokens,
            "logprobs": [-0.1] * len(tokens), "top_logprobs": None, "error": None}


REFERENCE = [answer(" a b", [" a", " b"]), answer(" c d", [" c", " d"])]
DIFFERS = QualityCheck(
    passed=False, prompts=2, exact_match_rate=0.5, mean_common_prefix=1.5,
    common_prefix_share=0.75, mean_logprob_divergence=0.03, gate_s=1.25,
    answers=[answer(" a b", [" a", " b"]), answer(" c x", [" c", " x"])], reason="differs")


def failed_trial(tmp_path, quality: QualityCheck) -> Store:
    """A store with study `s` and one trial that failed the gate with `quality`."""
    store = Store.open(f"sqlite:///{tmp_path}/tuner.db")
    store.ensure_study("s", engine="vllm", model="m", gpu_type="cpu", spec=SPEC, space=SPACE,
                       tuner_version="t")
    tid = store.start_trial("s", 0, {"max_batch_size": 4}, worker_host="h", worker_pid=1,
                            hardware=HW, gpus=1)
    store.finish_trial(tid, state="failed", failure_kind="quality", failure_reason="differs",
                       objective=400.0, meets_sla=True, measurements=[BASE], quality=quality)
    return store


def study(tmp_path) -> dd.StudyData:
    store = failed_trial(tmp_path, DIFFERS)
    store.claim_reference("s", claimant="h 1:1", params={}, settings={})
    store.save_reference("s", claimant="h 1:1", answers=REFERENCE, answer_s=1.0,
                         engine_version="0.32.0")
    data = dd.read_study(store, "s")
    store.close()
    return data


def test_every_trials_table_shows_the_quality_figures_in_one_cell(tmp_path):
    data = study(tmp_path)
    text = "FAILED: exact 50%, prefix 75%, logprob Δ 0.03 nats, gate 1.2 s"
    assert quality_text(DIFFERS) == text and quality_text(None) is None
    assert trials_frame(data.trials)[QUALITY].tolist() == [text]
    assert dd.trials_frame(data)[QUALITY].tolist() == [text]


def test_the_trial_page_sets_each_differing_answer_beside_the_reference(tmp_path):
    data = study(tmp_path)
    differ = dd.quality_answers(data, data.trials[0])
    assert differ.to_dict("records") == [{"prompt": 1, "asked": "the prompt",
                                          "reference": " c d", "this trial": " c x",
                                          "same up to": 1}]
    assert dd.quality_answers(dd.StudyData(data.study, data.trials), data.trials[0]).empty


NEAR_TIE = {"prompt": 0, "position": 1, "reference_token": " b", "trial_token": " z",
            "reference_gap": 0.004, "trial_gap": 0.002,
            "reference_top": {" b": -5.600, " z": -5.604, " q": -5.7},
            "trial_top": {" z": -5.601, " b": -5.603, " r": -5.8}}
DIVERGENCE = {"prompt": 1, "position": 0, "reference_token": " c", "trial_token": " y",
              "reference_gap": None, "trial_gap": None, "reference_top": {" c": -0.1},
              "trial_top": {" y": -0.2}, "off_greedy": None}
TIE_AWARE = QualityCheck(
    passed=False, prompts=2, exact_match_rate=0.0, mean_common_prefix=0.5,
    common_prefix_share=0.25, mean_logprob_divergence=0.002, gate_s=1.0, answers=[],
    reason="1 of 2 answers diverge", identical=0, near_ties=1, diverging=1, failed=0,
    rule="tie-aware: why", flips={"first_near_tie": NEAR_TIE, "first_divergence": DIVERGENCE,
                                  "worst": {"prompt": 0, "position": 0, "nats": 0.003}})


def test_the_counts_and_the_first_near_tie_and_divergence_are_stored_and_set_side_by_side(
        tmp_path):
    store = failed_trial(tmp_path, TIE_AWARE)
    (trial,) = store.trials("s")
    store.close()
    q = trial.quality
    assert (q.identical, q.near_ties, q.diverging, q.failed) == (0, 1, 1, 0)
    assert q.rule == "tie-aware: why" and q.flips["worst"]["nats"] == 0.003
    assert quality_text(q) == ("FAILED: 0 identical, 1 near-ties, 1 diverging of 2, logprob Δ "
                               "0.002 nats, gate 1.0 s")
    near, diverging = dd.quality_flips(trial)
    assert (near.title, diverging.title) == ("First near-tie", "First divergence")
    assert near.line == "prompt 0, token 1: reference ' b', this trial ' z', 0.002 nats apart"
    # Both sides' top log-probabilities in one table, the picked tokens marked.
    rows = near.frame.to_dict("records")
    assert [r["token"] for r in rows] == ["' b'", "' z'", "' q'", "' r'"]
    assert rows[0]["picked by"] == "reference" and rows[1]["picked by"] == "this trial"
    assert rows[1]["reference logprob"] == "-5.6040" and rows[1]["this trial's logprob"] == \
        "-5.6010"
    assert rows[3]["reference logprob"] == "–"  # the reference did not list it
    assert "not in the reference's top 1" in diverging.line
