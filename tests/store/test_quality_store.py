"""What revision 0008 stores: a study's quality reference, claimed once by one worker, and each
trial's quality check with its measurements."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store.test_store import STUDY, _url, schema_at
from tuner.store import QualityCheck, Store, StoreError

ANSWERS = [{"prompt": [1, 2], "text": " a b", "tokens": [" a", " b"], "logprobs": [-0.1, -0.2],
            "top_logprobs": [{" a": -0.1}, {" b": -0.2}], "error": None}]
CHECK = QualityCheck(passed=False, prompts=1, exact_match_rate=0.0, mean_common_prefix=1.0,
                     common_prefix_share=0.5, mean_logprob_divergence=0.25, gate_s=1.5,
                     answers=ANSWERS, lossless="speculative_method=ngram", reason="differs",
                     sample="prompt 0, from token 1: ...")


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(_url(tmp_path / "tuner.db")) as store:
        store.ensure_study("s", **STUDY)
        yield store


def test_the_first_claim_wins_and_the_others_see_it_computing(store):
    assert store.reference("s") is None
    assert store.claim_reference("s", claimant="a 1:1", params={}, settings={"prompts": 1})
    assert not store.claim_reference("s", claimant="b 2:2", params={}, settings={})
    ref = store.reference("s")
    assert (ref.state, ref.claimed_by, ref.answers) == ("computing", "a 1:1", [])

    store.save_reference("s", claimant="a 1:1", answers=ANSWERS, answer_s=2.5,
                         engine_version="0.32.0")
    ref = store.reference("s")
    assert (ref.state, ref.answers, ref.answer_s) == ("ready", ANSWERS, 2.5)
    assert ref.computed_at is not None and ref.settings == {"prompts": 1}


def test_a_claim_taken_over_cannot_be_saved_by_its_first_claimant(store):
    store.claim_reference("s", claimant="a 1:1", params={}, settings={})
    assert not store.claim_reference("s", claimant="b 2:2", params={}, settings={},
                                     take_over="someone else")
    assert store.claim_reference("s", claimant="b 2:2", params={}, settings={},
                                 take_over="a 1:1")
    with pytest.raises(StoreError, match="taken over by another worker"):
        store.save_reference("s", claimant="a 1:1", answers=ANSWERS, answer_s=1.0,
                             engine_version=None)
    assert store.reference("s").claimed_by == "b 2:2"


def test_a_released_claim_can_be_claimed_again_and_a_ready_one_is_never_released(store):
    store.claim_reference("s", claimant="a 1:1", params={}, settings={})
    store.release_reference("s", claimant="a 1:1")
    assert store.reference("s") is None
    assert store.claim_reference("s", claimant="b 2:2", params={}, settings={})
    store.save_reference("s", claimant="b 2:2", answers=ANSWERS, answer_s=1.0,
                         engine_version=None)
    store.release_reference("s", claimant="b 2:2")
    assert store.reference("s").state == "ready"


def test_a_trials_quality_check_is_stored_with_it_and_read_back_whole(store):
    tid = store.start_trial("s", 0, {"max_batch_size": 4}, worker_host="h", worker_pid=1)
    store.finish_trial(tid, state="failed", failure_kind="quality", failure_reason="differs",
                       objective=900.0, meets_sla=True, quality=CHECK)
    (trial,) = store.trials("s")
    assert trial.quality == CHECK and trial.objective == 900.0


def test_a_database_of_revision_0007_upgrades_and_its_trials_have_no_quality(tmp_path):
    db = tmp_path / "old.db"
    schema_at(db, "0007")
    with Store.open(_url(db)) as store:  # a writer: migrates to 0008
        store.ensure_study("s", **STUDY)
        tid = store.start_trial("s", 0, {}, worker_host="h", worker_pid=1)
        store.finish_trial(tid, state="complete", objective=1.0, meets_sla=True)
        assert store.trials("s")[0].quality is None and store.reference("s") is None
