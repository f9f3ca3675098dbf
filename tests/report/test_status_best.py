"""`tuner status` and `tuner best` name the same winner: one rule (`rules.winner`)."""

from __future__ import annotations

from tests.conftest import call_tuner
from tests.report.test_export import LEVEL, add_trial, study_store
from tuner.report.tables import studies_frame


def test_status_shows_the_confirmed_winner_that_tuner_best_shows(tmp_path):
    store = study_store(tmp_path)
    add_trial(store, 0, {"max_batch_size": 4}, 900.0, True, gpus=1)   # fast once, then failed
    add_trial(store, 1, {"max_batch_size": 16}, 800.0, True, gpus=1)  # confirmed
    store.record_confirmation("s", 0, state="failed", objective=None, meets_sla=None,
                              reason="crash")
    store.record_confirmation("s", 1, state="confirmed", objective=790.0, meets_sla=True,
                              reason=None, measurements=[LEVEL])

    row = studies_frame([store.get_study("s")], store.trials).iloc[0]
    # Its one figure: the confirmation that decided it, everywhere (`rules.figure`).
    assert (row["best trial"], row["best tok/s/GPU"]) == (1, 790.0)

    status = call_tuner("status", cwd=tmp_path)
    best = call_tuner("best", cwd=tmp_path)
    assert status.code == best.code == 0, status.stderr + best.stderr
    assert "best of study s: trial 1" in best.stdout
    # A CPU study says its figures per core, never per GPU.
    assert "790 output tok/s per core (SLA met), from its confirmation; first run 800: " \
        "confirmed" in best.stdout
    header, first = status.stdout.splitlines()[:2]
    assert "best trial" in header and "best tok/s/core" in header
    assert "GPU" not in status.stdout + best.stdout
    assert "790" in first and "900" not in first


def test_status_shows_no_best_when_no_trial_met_the_sla(tmp_path):
    store = study_store(tmp_path)
    add_trial(store, 0, {"max_batch_size": 4}, 900.0, False, gpus=1)
    row = studies_frame([store.get_study("s")], store.trials).iloc[0]
    assert row["best trial"] is None and row["best tok/s/GPU"] is None


def test_status_and_best_show_usd_per_million_tokens_and_the_price_they_rest_on(tmp_path):
    store = study_store(tmp_path)  # a cpu study: priced per core-hour
    add_trial(store, 0, {"max_batch_size": 4}, 900.0, True, gpus=1)
    # By hand: the table's example core-hour (0.0408 USD) over 512 tok/s x 3,600 s.
    cost = f"{0.0408 / (LEVEL.output_tok_s * 3600) * 1e6:,.4g}"
    status = call_tuner("status", "--study", "s", cwd=tmp_path)
    best = call_tuner("best", cwd=tmp_path)
    assert status.code == best.code == 0, status.stderr + best.stderr
    lines = status.stdout.splitlines()
    assert "best USD/Mtok" in lines[0] and cost in lines[1]
    trials_header = next(line for line in lines[2:] if line.strip().startswith("trial"))
    assert "USD/Mtok" in trials_header
    assert (f"{cost} USD per million output tokens at 0.0408 USD per core-hour x 1 (EXAMPLE "
            "price from tuner/data/gpu_prices.csv") in best.stdout
    assert "usd_per_mtok" in best.stdout and cost in best.stdout


def test_a_study_says_its_figures_in_its_own_unit():
    import pandas as pd

    from tuner.report.units import frame_in_units, in_units

    line = "-> trial 5: 2,784 tok/s/GPU, meets SLA; 0.004 USD per GPU-hour; output tok/s per GPU"
    assert in_units(line, "cpu") == ("-> trial 5: 2,784 tok/s/core, meets SLA; 0.004 USD per "
                                     "core-hour; output tok/s per core")
    assert in_units(line, "H200") == line
    frame = pd.DataFrame(columns=["trial", "tok/s/GPU", "gpus", "best tok/s/GPU"])
    assert list(frame_in_units(frame, "cpu").columns) == ["trial", "tok/s/core", "cores",
                                                         "best tok/s/core"]
