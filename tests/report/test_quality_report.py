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


def study(tmp_path) -> dd.StudyData:
    store = Store.open(f"sqlite:///{tmp_path}/tuner.db")
    store.ensure_study("s", engine="vllm", model="m", gpu_type="cpu", spec=SPEC, space=SPACE,
                       tuner_version="t")
    tid = store.start_trial("s", 0, {"max_batch_size": 4}, worker_host="h", worker_pid=1,
                            hardware=HW, gpus=1)
    store.finish_trial(tid, state="failed", failure_kind="quality", failure_reason="differs",
                       objective=400.0, meets_sla=True, measurements=[BASE], quality=DIFFERS)
    store.claim_reference("s", claimant="h 1:1", params={}, settings={})
    store.save_reference("s", claimant="h 1:1", answers=REFERENCE, answer_s=1.0,
                         engine_version="0.32.0")
    data = dd.read_study(store, "s")
    store.close()
    return data


def test_every_trials_table_shows_the_quality_figures_in_one_cell(tmp_path):
    data = study(tmp_path)
    text = "FAILED: exact 50%, prefix 75%, logprob Δ 0.03, gate 1.2 s"
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
