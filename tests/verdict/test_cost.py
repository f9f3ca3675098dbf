"""USD per million output tokens: a device-hour's price times the server's devices, over the
millions of output tokens the server serves in an hour, computed from stored levels (SYNTHETIC
ROWS written through the Store API)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.choose_studies import synthetic_level
from tests.report.test_dashboard_data import SPEC, P, StudyWriter
from tuner.report import dashboard_data as dd
from tuner.spec.gpu_prices import price_table
from tuner.verdict.cost import level_usd_per_mtok, study_price, usd_per_mtok


def stored(tmp_path, gpu_type: str, hardware: dict | None = None):
    """A study with one TP2 trial whose one level put out 3,000 tok/s on its 2 devices, read
    back from the database."""
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    spec = None if hardware is None else {"hardware": {"gpu_type": gpu_type, **hardware}}
    w = StudyWriter(url, "s", gpu_type=gpu_type, spec=spec)
    w.complete(0, P(2), [synthetic_level(8, 1500.0, 200.0, 2)])
    data = w.data()
    return data.study, data.trials[0]


def test_usd_per_million_tokens_of_a_stored_level_is_the_hand_computation(tmp_path):
    study, trial = stored(tmp_path, "H200")
    level = trial.measurements[0]
    assert (trial.gpus, level.output_tok_s) == (2, 3000.0)
    # By hand: an H200 GPU-hour is 1.60 USD in the example table; the server runs on 2 GPUs, so
    # an hour costs 3.20 USD and serves 3,000 x 3,600 = 10.8 million output tokens.
    assert level_usd_per_mtok(study, trial, level) == pytest.approx(3.20 / 10.8)


def test_the_specs_price_overrides_the_table_and_a_cpu_device_is_a_core(tmp_path):
    study, trial = stored(tmp_path, "cpu", {"gpu_hour_usd": 0.05, "cores_per_rank": 1})
    price = study_price(study)
    assert (price.usd_per_hour, price.example, price.source) == (0.05, False,
                                                               "hardware.gpu_hour_usd")
    # Two ranks of one core each: 2 cores at 0.05 USD per core-hour, 10.8 Mtok an hour.
    assert level_usd_per_mtok(study, trial, trial.measurements[0]) == pytest.approx(0.10 / 10.8)


def test_the_dashboards_frame_computes_the_same_figure_column_wise(tmp_path):
    study, trial = stored(tmp_path, "B200")
    points = dd.measured_points(dd.StudyData(study, [trial]))
    assert points[dd.USD_MTOK].tolist() == [pytest.approx(
        level_usd_per_mtok(study, trial, trial.measurements[0]))]
    assert points[dd.USD_MTOK].tolist() == [pytest.approx(2.90 * 2 / 10.8)]


def test_no_throughput_or_no_price_has_no_cost():
    assert usd_per_mtok(3.2, 0.0) is None and usd_per_mtok(None, 100.0) is None
    column = usd_per_mtok(3.2, pd.Series([3000.0, 0.0]))
    assert column.iloc[0] == pytest.approx(3.2 / 10.8) and pd.isna(column.iloc[1])


def test_every_example_price_names_a_known_gpu_type_with_its_source_and_date():
    from tuner.spec.gpu_types import gpu_types

    table = price_table()
    assert set(table) == set(gpu_types())  # every GPU type tuner knows, and cpu, is priced
    for name, price in table.items():
        assert price.usd_per_hour > 0 and price.example, name
        assert price.source.startswith("EXAMPLE") and "20" in price.source, name


@pytest.mark.parametrize("value", [0, -1.5, "cheap", float("inf")])
def test_a_bad_price_in_the_spec_is_one_line_naming_the_field(value):
    from tuner.spec.errors import BadInput
    from tuner.spec.study_spec import StudySpec
    from tuner.spec.yamlio import load_model

    spec = {**SPEC, "search_space": "tiny-moe-cpu",
            "hardware": {"gpu_type": "H200", "gpu_hour_usd": value}}
    with pytest.raises(BadInput) as e:
        load_model(StudySpec, spec, "study.yaml")
    line = str(e.value)
    assert line.startswith("study.yaml: hardware.gpu_hour_usd: ") and "\n" not in line
