"""The performance model: what it assumes about weights, KV cache, steps and memory, and how well
it reproduces published figures. Pure computation: no server, no database."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO
from tuner.plan import perfmodel as pm
from tuner.serve.engines import get_adapter
from tuner.spec.gpu_types import GpuType
from tuner.spec.model_shape import known_shapes

G120 = pm.model_facts("gpt-oss-120b")
CAL = pm.load_calibration()
BASE = {"tensor_parallel_size": 1, "moe_backend": "triton", "max_batch_size": 256,
        "max_num_tokens": 8192, "kv_cache_dtype": "auto", "gpu_memory_fraction": 0.9,
        "speculative_method": "none"}


def setup(gpu="H200", engine="vllm", model=G120, isl=1024, osl=1024, **config) -> pm.Setup:
    config = {**BASE, **config}
    spread = config.pop("spread", 0.0)
    if engine == "trtllm":
        config["moe_backend"] = config["moe_backend"].upper()
    g = gpu if isinstance(gpu, GpuType) else pm.gpu_for_model(gpu)
    return pm.setup_of(config, model=model, gpu=g, engine=pm.facts().engine(engine),
                       layout=pm.layout_of(config, get_adapter(engine)), isl=isl, osl=osl,
                       spread=spread)


def run(s: pm.Setup, conc: float, cal: pm.Calibration = CAL) -> pm.Prediction:
    return pm.predict(pm.stack([s]), np.array([conc]), cal)


def gb(x) -> float:
    return float(np.asarray(x).ravel()[0]) / 1e9


# ---------------------------------------------------------------- shapes and weights


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gpt-oss-20b"])
def test_parameter_counts_from_the_shape_match_the_model_card(name):
    facts, card = pm.model_facts(name), known_shapes()[name]
    assert facts.total_params / 1e9 == pytest.approx(card["params_total_b"], rel=0.01)
    assert facts.active_params / 1e9 == pytest.approx(card["params_active_b"], rel=0.02)


def test_weights_are_mxfp4_experts_plus_bf16_rest_about_the_checkpoint_size():
    mem = pm.stack([setup()]).column()
    weights = gb(pm.predict(mem, np.array([[1.0]]), CAL).memory.weights)
    experts = G120.layers * G120.experts * G120.expert_params * 4.25 / 8 / 1e9
    assert experts == pytest.approx(60.9, abs=0.2)
    assert weights == pytest.approx(experts + 2 * (G120.total_params / 1e9 - experts / 4.25 * 8),
                                    rel=0.01)
    assert 61 <= weights <= 66  # "checkpoint about 61-63 GB", and BF16 embeddings un-tied


def test_tensor_parallel_splits_all_weights_and_attention_dp_replicates_attention():
    def weights(**config) -> float:
        return gb(run(setup(**config), 1).memory.weights)

    tp1, tp2 = weights(), weights(tensor_parallel_size=2)
    assert tp2 == pytest.approx(tp1 / 2, rel=0.001)
    # vLLM DP2 + EP: experts over both ranks, attention and embeddings whole on each.
    dep2 = weights(data_parallel_size=2, enable_expert_parallel=True)
    assert tp2 < dep2 < tp1
    dense = (G120.layers * G120.attention_params + 2 * G120.embedding_params) * 2 / 1e9
    assert dep2 - tp2 == pytest.approx(dense / 2, rel=0.001)


def test_only_full_attention_layers_grow_the_kv_cache_past_the_window():
    c = pm.stack([setup(), setup(kv_cache_dtype="fp8")])
    mem = pm.predict(c, np.array([1.0, 1.0]), CAL).memory
    per_seq = [pm._roofline.kv_per_sequence(c, mem, np.array([n, n])) for n in (2048, 2049, 64)]
    full_layers = G120.layers - G120.sliding_layers
    per_token = 2 * G120.kv_heads * G120.head_dim * 2  # K and V, BF16, per layer
    assert per_seq[1] - per_seq[0] == pytest.approx([full_layers * per_token,
                                                     full_layers * per_token / 2])
    assert per_seq[2] == pytest.approx([64 * G120.layers * per_token,
                                        64 * G120.layers * per_token / 2])


# ---------------------------------------------------------------- steps


def test_expected_tokens_per_step_of_speculative_decoding():
    k, a = np.array([0, 3, 3, 1]), np.array([0.7, 0.5, 0.0, 0.9])
    assert pm.expected_tokens(k, a) == pytest.approx([1, 1.875, 1, 1.9])


def test_one_user_is_memory_bound_and_a_full_batch_compute_bound():
    h200 = pm.gpu_for_model("H200")
    faster_memory = dataclasses.replace(h200, hbm_tb_s=h200.hbm_tb_s * 2)
    faster_math = dataclasses.replace(h200, bf16_dense_tflops=h200.bf16_dense_tflops * 2,
                                      fp8_dense_tflops=h200.fp8_dense_tflops * 2)

    def gain(gpu, conc, metric):
        return (getattr(run(setup(gpu=gpu), conc), metric)[0]
                / getattr(run(setup(gpu=h200), conc), metric)[0])

    # One user: the weights stream from HBM each step (the rest is fixed per-step overhead).
    assert gain(faster_memory, 1, "tok_s_per_user") > 1.1
    assert gain(faster_math, 1, "tok_s_per_user") < 1.02
    # A full batch: the expert GEMMs dominate.
    assert gain(faster_math, pm.MAX, "tok_s_per_gpu") > 1.3
    assert gain(faster_math, pm.MAX, "tok_s_per_gpu") > gain(faster_memory, pm.MAX,
                                                             "tok_s_per_gpu")


def test_tensor_parallel_speeds_up_one_user_at_a_cost_per_gpu():
    tp1, tp8 = run(setup(), 64), run(setup(tensor_parallel_size=8), 64)
    assert tp8.tok_s_per_user[0] > 1.5 * tp1.tok_s_per_user[0]
    assert tp8.tok_s_per_gpu[0] < tp1.tok_s_per_gpu[0]


def test_speculation_pays_only_when_drafts_are_accepted():
    def speed(acceptance: float) -> float:
        cal = pm.Calibration({**CAL.factors, "acceptance.eagle3": acceptance}, "test", {})
        s = setup(speculative_method="eagle3", num_speculative_tokens=3)
        return float(run(s, 1, cal).tok_s_per_user[0])

    plain = float(run(setup(), 1).tok_s_per_user[0])
    assert speed(0.0) < plain < speed(0.8)


def test_more_concurrency_means_more_throughput_and_slower_users_until_the_batch_limit():
    s = setup(max_batch_size=64)
    p = pm.predict(pm.stack([s]).column(), np.array([[1.0, 8, 64, 256]]), CAL)
    per_gpu, per_user = p.tok_s_per_gpu[0], p.tok_s_per_user[0]
    assert np.all(np.diff(per_gpu[:3]) > 0) and np.all(np.diff(per_user[:3]) < 0)
    assert p.batch[0, 3] == 64  # the rest wait in the queue ...
    assert p.ttft_ms[0, 3] > 10 * p.ttft_ms[0, 2]  # ... which shows in their TTFT



def test_a_known_acceptance_rate_sets_the_tokens_each_step_yields():
    k = np.array([3, 3, 0])
    assert pm.expected_tokens(k, np.array([0.5, 0.5, 0.5]), np.array([0.6, np.nan, 0.6])) \
        == pytest.approx([1 + 0.6 * 3, 1.875, 1])

    def speed(rate: float | None) -> float:
        s = setup(speculative_method="eagle3", num_speculative_tokens=3)
        return float(run(dataclasses.replace(s, acceptance_rate=rate), 1).tok_s_per_user[0])

    assert speed(0.2) < speed(0.5) < speed(0.9)
    fitted = pm.expected_tokens(np.array([3]), np.array([CAL["acceptance.eagle3"]]))[0]
    assert speed(None) == pytest.approx(speed((fitted - 1) / 3), rel=1e-9)


def test_ttft_p90_is_above_the_median_and_prefill_load_raises_both():
    long_prompts = setup(isl=8192, osl=256, max_batch_size=256)
    p = pm.predict(pm.stack([long_prompts]).column(), np.array([[1.0, 32, 128]]), CAL)
    assert np.all(p.ttft_p90_ms[0] > p.ttft_ms[0])
    # More running sequences: each prompt's chunks share steps with more decodes, and more
    # prompts compete for the steps' token budget.
    assert np.all(np.diff(p.ttft_ms[0]) > 0) and np.all(np.diff(p.ttft_p90_ms[0]) > 0)
    # The replacing sequences' prompts slow every decode step (the interference on speed).
    short = pm.predict(pm.stack([setup(isl=256, osl=256, max_batch_size=256)]).column(),
                       np.array([[128.0]]), CAL)
    assert p.tok_s_per_user[0, 2] < short.tok_s_per_user[0, 0]


def timed_from_start(s: pm.Setup) -> pm.Setup:
    """The setup as InferenceMAX measures it: lengths in [0.8 L, L], every client starting at
    once, 10 prompts each, timed from the first send to the last completion."""
    return dataclasses.replace(s, isl=s.isl * 0.9, osl=s.osl * 0.9, spread=0.1 / 0.9,
                               prompts_per_client=10.0)


def test_p99_ttft_of_a_run_timed_from_its_start_is_the_start_burst():
    s = timed_from_start(setup(gpu="B200", max_batch_size=256))
    levels = np.array([[4.0, 16, 64, 128]])
    burst = pm.predict(pm.stack([s]).column(), levels, CAL)
    steady = pm.predict(pm.stack([dataclasses.replace(s, prompts_per_client=None)]).column(),
                        levels, CAL)
    # The clients' first prompts arrive together: at p99 a request waits for 90% of them
    # (1 - 0.01 x 10 prompts per client), so p99 grows with the concurrency, the median hardly.
    ratio = burst.ttft_p99_ms[0] / burst.ttft_ms[0]
    assert np.all(np.diff(ratio) > 0) and ratio[-1] > 5
    assert burst.ttft_p99_ms[0, -1] > 5 * steady.ttft_p99_ms[0, -1]
    # The burst is 10% of the requests: the median and p90 are steady state's.
    assert burst.ttft_ms[0] == pytest.approx(steady.ttft_ms[0])
    assert burst.ttft_p90_ms[0] == pytest.approx(steady.ttft_p90_ms[0])
    # Timed to the last completion, the run's last wave drains: a little less throughput.
    assert np.all(burst.tok_s_per_gpu[0] < steady.tok_s_per_gpu[0])
    assert np.all(burst.tok_s_per_gpu[0] > 0.95 * steady.tok_s_per_gpu[0])


def test_a_prompt_waits_for_the_step_that_starts_it_and_for_the_requests_overhead():
    base = run(setup(), 64)
    step_ms = 1e3 / float(base.tok_s_per_user[0])  # about one step of the running batch

    def shifted(**factors) -> pm.Prediction:
        return run(setup(), 64, pm.Calibration({**CAL.factors, **factors}, "test", {}))

    later = shifted(**{"admit_steps.vllm": CAL["admit_steps.vllm"] + 2})
    for q in ("ttft_ms", "ttft_p90_ms", "ttft_p99_ms"):
        assert getattr(later, q)[0] - getattr(base, q)[0] == pytest.approx(2 * step_ms, rel=0.1)
    slower = shifted(request_overhead_ms=CAL["request_overhead_ms"] + 10)
    rate = CAL["request_engine.vllm"]
    assert slower.ttft_p99_ms[0] - base.ttft_p99_ms[0] == pytest.approx(10 * rate)
    assert slower.tok_s_per_user[0] == pytest.approx(base.tok_s_per_user[0])


def test_only_tensorrt_llms_attention_dp_waits_for_the_other_ranks_prompts():
    def ttft(engine: str, balance: float, **config) -> float:
        cal = pm.Calibration({**CAL.factors, "dp_balance_steps.trtllm": balance}, "test", {})
        return float(run(setup(gpu="B200", engine=engine, **config), 64, cal).ttft_ms[0])

    dp = {"tensor_parallel_size": 4, "enable_attention_dp": True}
    assert ttft("trtllm", 40, **dp) > ttft("trtllm", 10, **dp) + 20
    tp = {"tensor_parallel_size": 4}
    assert ttft("trtllm", 40, **tp) == pytest.approx(ttft("trtllm", 10, **tp))
    vllm_dp = {"tensor_parallel_size": 1, "data_parallel_size": 4}
    assert ttft("vllm", 40, **vllm_dp) == pytest.approx(ttft("vllm", 10, **vllm_dp))


def test_hopper_streams_its_mxfp4_experts_at_its_dequantization_rate():
    slow = pm.Calibration({**CAL.factors, "moe_dequant_tb_s.hopper": 0.5}, "test", {})
    assert run(setup(gpu="H200"), 8, slow).tok_s_per_user[0] \
        < 0.8 * run(setup(gpu="H200"), 8).tok_s_per_user[0]
    # Blackwell's tensor cores take MXFP4 as it is: no such roof.
    assert run(setup(gpu="B200"), 8, slow).tok_s_per_user[0] == pytest.approx(
        run(setup(gpu="B200"), 8).tok_s_per_user[0])


def test_a_length_spread_must_fit_its_longest_sequence_and_lengthens_the_p90_prompt():
    exact, spread = setup(isl=4096, osl=1024), setup(isl=4096, osl=1024, spread=0.5)
    pe, ps = run(exact, 16), run(spread, 16)
    assert ps.ttft_p90_ms[0] > pe.ttft_p90_ms[0]
    assert ps.tok_s_per_gpu[0] == pytest.approx(pe.tok_s_per_gpu[0])  # same mean lengths
    # Lengths whose mean sequence fits one GPU's KV budget but whose longest (x 1.5) does not.
    c0, m0 = pm.stack([setup()]), run(setup(), 1).memory
    kv = pm._roofline.kv_per_sequence
    per_token = float(kv(c0, m0, np.array([2001.0]))[0] - kv(c0, m0, np.array([2000.0]))[0])
    total = int(float(m0.kv_budget[0]) / per_token / 1.25)
    fits = setup(isl=total - 1024, osl=1024)
    assert run(fits, 1).config_fits[0]
    c = pm.stack([dataclasses.replace(fits, spread=0.5)])
    p = pm.predict(c, np.array([1.0]), CAL)
    assert not p.config_fits[0]
    assert f"{total * 1.5:,.0f}-token sequence" in pm.memory_reason(c, p, 0, level=False)


def test_bands_come_from_the_calibrations_leave_one_out_errors_or_a_stated_prior():
    p = run(setup(), 16)
    with_rows = pm.Calibration(CAL.factors, "test", {"bands": {
        "tok_s_per_gpu": {"rows": 5, "rms_log_error": 0.1},
        "tok_s_per_user": {"rows": 2, "rms_log_error": 0.01}}})
    b = pm.band(p, with_rows)
    lo, hi = b.tok_s_per_gpu
    assert hi[0] / p.tok_s_per_gpu[0] == pytest.approx(np.exp(pm.BAND_Z * 0.1))
    assert lo[0] < p.tok_s_per_gpu[0] < hi[0]
    prior = pm.facts().band_sigma
    assert b.tok_s_per_user[1][0] / p.tok_s_per_user[0] == pytest.approx(
        np.exp(pm.BAND_Z * prior["tok_s_per_user"]))  # 2 rows are too few
    assert "prior" in b.sources["ttft"] and "5 leave-one-out rows" in b.sources["tok_s_per_gpu"]
    assert b.ttft_p90_ms[0][0] < p.ttft_p90_ms[0] < b.ttft_p90_ms[1][0]
    # Recorded, the half-width that held 80% of the leave-one-out log errors is the band.
    measured = pm.Calibration(CAL.factors, "test", {"bands": {
        "ttft_p99": {"rows": 121, "rms_log_error": 0.4, "log_halfwidth_80": 0.3}}})
    hi = pm.band(p, measured).ttft_p99_ms[1]
    assert hi[0] / p.ttft_p99_ms[0] == pytest.approx(np.exp(0.3))


def test_a_cpu_rank_of_the_tiny_generated_model_is_predicted_from_its_own_figures():
    tiny = pm.model_facts("tiny-gpt-oss")
    assert (tiny.layers, tiny.hidden, tiny.experts, tiny.sliding_layers) == (2, 128, 8, 1)
    cpu = pm.gpu_for_model("cpu")
    assert cpu.arch == "cpu" and cpu.hbm_tb_s and cpu.bf16_dense_tflops
    p = run(setup(gpu=cpu, model=tiny, isl=64, osl=64, max_num_tokens=512), 4)
    assert p.config_fits[0] and p.tok_s_per_user[0] > 0
    # The CPU build's overheads are its own factor, so a CPU study's refit moves only them.
    slower = pm.Calibration({**CAL.factors, "step_device.cpu": 40.0}, "test", {})
    assert run(setup(gpu=cpu, model=tiny, isl=64, osl=64), 4, slower).tok_s_per_user[0] \
        < p.tok_s_per_user[0]
    assert run(setup(), 4, slower).tok_s_per_user[0] == pytest.approx(
        run(setup(), 4).tok_s_per_user[0])


# ---------------------------------------------------------------- memory fit


def test_tp1_on_an_80gb_h100_cannot_hold_the_kv_cache_of_high_concurrency():
    c = pm.stack([setup(gpu="H100-SXM")]).column()
    p = pm.predict(c, np.array([[1.0, 8, 256]]), CAL)
    assert p.level_fits[0].tolist() == [True, True, False]
    reason = pm.memory_reason(c, p, (0, 2), level=True)
    assert "KV cache for 256 sequences of 2,048 tokens" in reason
    assert "weights 65.2 GB" in reason and "of 80 GB" in reason
    assert pm.predict(pm.stack([setup(gpu="H200")]), np.array([256.0]), CAL).level_fits[0]


def test_weights_larger_than_the_memory_fraction_cannot_launch_at_all():
    c = pm.stack([setup(gpu="H100-SXM", gpu_memory_fraction=0.5)])
    p = run(c_setup := setup(gpu="H100-SXM", gpu_memory_fraction=0.5), 1)
    assert not p.config_fits[0]
    assert "exceed the memory fraction 0.5 of 80 GB" in pm.memory_reason(c, p, 0, level=False)
    assert run(dataclasses.replace(c_setup, memory_fraction=0.9), 1).config_fits[0]


def test_vllm_fraction_bounds_everything_while_trtllm_takes_a_share_of_what_is_free():
    vllm = run(setup(engine="vllm"), 1).memory
    trt = run(setup(engine="trtllm"), 1).memory
    used = gb(vllm.weights) + gb(vllm.activations) + vllm.reserved / 1e9
    assert gb(vllm.kv_budget) == pytest.approx(0.9 * 141 - used, rel=1e-6)
    assert gb(trt.kv_budget) == pytest.approx(0.9 * (141 - used), rel=1e-6)


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize("text, layout", [
    ("TP8", pm.Layout(8, 8, 1, 1)), ("TP8 EP1", pm.Layout(8, 8, 1, 1)),
    ("DEP4", pm.Layout(4, 1, 4, 4)), ("TP2 EP2", pm.Layout(2, 2, 1, 2)),
    ("TP4 DP2", pm.Layout(8, 4, 2, 1)), ("tp1", pm.Layout(1, 1, 1, 1)),
    ("DEP2", pm.Layout(2, 1, 2, 2)), ("TP4EP4", pm.Layout(4, 4, 1, 4)),
    ("DP4EP4", pm.Layout(4, 1, 4, 4)), ("TEP8", pm.Layout(8, 8, 1, 8)),
])
def test_published_parallelism_reads_as_a_layout(text, layout):
    assert pm.parse_parallelism(text) == layout


@pytest.mark.parametrize("text", ["PP2", "TP3 EP2", "TP", "TP4XP2", "TP4 PP2", ""])
def test_unreadable_parallelism_is_refused(text):
    with pytest.raises(ValueError):
        pm.parse_parallelism(text)


def test_engine_configurations_map_to_layouts_through_the_adapters():
    vllm, trt = get_adapter("vllm"), get_adapter("trtllm")
    assert pm.layout_of({"tensor_parallel_size": 2, "data_parallel_size": 2,
                         "enable_expert_parallel": True}, vllm) == pm.Layout(4, 2, 2, 4)
    assert pm.layout_of({"tensor_parallel_size": 4, "data_parallel_size": 2}, vllm) \
        == pm.Layout(8, 4, 2, 1)
    assert pm.layout_of({"tensor_parallel_size": 4, "expert_parallel_size": 2,
                         "enable_attention_dp": True}, trt) == pm.Layout(4, 1, 4, 2)


# ---------------------------------------------------------------- published figures and fits


def published() -> tuple[list[pm.Observation], list[pm.Observation]]:
    calibration, held_out = pm.split(pm.read_figures(pm.PUBLISHED_FILE))
    return pm.usable(calibration)[0], pm.usable(held_out)[0]


def test_only_figures_published_at_1024_1024_calibrate_and_every_row_names_its_source():
    figures = pm.read_figures(pm.PUBLISHED_FILE)
    calibration, held_out = pm.split(figures)
    assert calibration and held_out and len(calibration) + len(held_out) == len(figures)
    assert all((f.isl, f.osl) == ("1024", "1024") for f in calibration)
    assert not any((f.isl, f.osl) == ("1024", "1024") for f in held_out)
    assert all(len(f.source) > 20 for f in figures)


def test_disaggregated_figures_are_skipped_with_the_reason_not_mispredicted():
    _, skipped = pm.usable(pm.read_figures(pm.PUBLISHED_FILE))
    assert skipped
    assert all(f.serving == "disaggregated" for f, _ in skipped)
    assert all("disaggregated serving" in reason and "not modelled" in reason
               for _, reason in skipped)


@pytest.fixture(scope="module")
def refitted() -> pm.Calibration:
    """The factors fitted anew on the calibration rows (one fit: seconds). The full leave-one-
    configuration-out, one fit per configuration, is the accuracy bench's (minutes)."""
    return pm.fit(published()[0], pm.prior_calibration(), source="test")


def test_the_shipped_calibration_is_what_fitting_the_calibration_rows_gives(refitted):
    for name, value in refitted.factors.items():
        assert CAL[name] == pytest.approx(value, rel=1e-3), name


def test_the_shipped_leave_one_out_errors_are_within_the_accuracy_bars():
    """InferenceMAX's 121 configurations of gpt-oss-120b at 1024/1024 (vLLM on H100, H200 and
    B200, TensorRT-LLM on B200), each predicted by factors fitted without it, as the shipped
    calibration records them: median error at most 10% on tok/s per GPU and per user, 25% on
    median TTFT, 35% on p99 TTFT."""
    bands = CAL.summary["bands"]
    assert bands["tok_s_per_gpu"]["rows"] >= 121 and bands["ttft_p99"]["rows"] == 121
    assert bands["tok_s_per_gpu"]["median_abs_error"] <= 0.10
    assert bands["tok_s_per_user"]["median_abs_error"] <= 0.10
    assert bands["ttft"]["median_abs_error"] <= 0.25
    assert bands["ttft_p99"]["median_abs_error"] <= 0.35


def test_configurations_held_out_now_err_no_more_than_the_shipped_record_says(refitted):
    # A sample of the leave-one-out, recomputed: every figure of 5 configurations spread over
    # the rows, fitted without them, errs within the worst the shipped calibration records.
    obs = published()[0]
    keys = sorted({pm.configuration_key(o) for o in obs}, key=str)
    worst = CAL.summary["leave_one_out_worst_abs_error"]
    for key in keys[:: max(1, len(keys) // 5)][:5]:
        held = [o for o in obs if pm.configuration_key(o) == key]
        without = pm.fit([o for o in obs if pm.configuration_key(o) != key], refitted,
                         source="held out")
        assert np.max(np.abs(pm.errors(held, without))) <= worst + 1e-6, key


def test_held_out_max_throughput_figures_stay_within_10_percent_median():
    _, held_out = published()
    at_max = [o for o in held_out if o.concurrency == pm.MAX]
    assert len(at_max) >= 30
    assert np.median(np.abs(pm.errors(at_max, CAL))) <= 0.10


def test_fitting_recovers_factors_that_generated_the_observations():
    truth = pm.Calibration({**CAL.factors, "bw_eff": 0.5, "moe_eff.blackwell": 0.25,
                            "step_overhead_ms": 0.6}, "truth", {})
    # On Blackwell the experts stream at HBM speed (on Hopper at its dequantization rate).
    setups = [setup(gpu="B200", tensor_parallel_size=tp, kv_cache_dtype=kv)
              for tp in (1, 2, 4, 8) for kv in ("auto", "fp8")]
    obs = []
    for s in setups:
        for conc in (1.0, 16.0, 128.0):
            p = run(s, conc, truth)
            obs.append(pm.Observation(s, conc, "output_tok_s_per_gpu", float(p.tok_s_per_gpu[0])))
            obs.append(pm.Observation(s, conc, "output_tok_s_per_user",
                                      float(p.tok_s_per_user[0])))
    before = np.median(np.abs(pm.errors(obs, CAL)))
    fitted = pm.fit(obs, CAL, source="test", prior=CAL, data_sigma=0.02)
    after = np.abs(pm.errors(obs, fitted))
    assert before > 0.1 and np.median(after) < 0.02 and np.max(after) < 0.05
    assert fitted["bw_eff"] == pytest.approx(0.5, rel=0.15)


def test_a_batch_of_setups_predicts_what_each_predicts_alone():
    setups = [setup(gpu=g, tensor_parallel_size=tp) for g in ("H100-SXM", "B200")
              for tp in (1, 4)] + [setup(engine="trtllm", speculative_method="eagle3",
                                         num_speculative_tokens=2)]
    conc = np.array([1.0, 64, 8, pm.MAX, 32])
    batch = pm.predict(pm.stack(setups), conc, CAL)
    for i, s in enumerate(setups):
        alone = run(s, conc[i])
        assert batch.tok_s_per_gpu[i] == pytest.approx(alone.tok_s_per_gpu[0])
        assert batch.ttft_ms[i] == pytest.approx(alone.ttft_ms[0])
        assert batch.ttft_p90_ms[i] == pytest.approx(alone.ttft_p90_ms[0])


@pytest.mark.parametrize("change, reason", [
    ({"gpu": "A100"}, "not in tuner/data/gpus.csv"),
    ({"model": "llama-3-70b"}, "has no shape"),
    ({"metric": "joules_per_token"}, "is not one the model predicts"),
    ({"speculative": "medusa"}, "has no draft facts"),
    ({"engine": "tgi"}, "has no facts"),
    ({"parallelism": "PP2"}, "cannot read"),
    ({"concurrency": "many"}, "neither a number nor 'max'"),
    ({"length_range": "1.2..0.8"}, "is not 'a..b'"),
    ({"serving": "kv-routing"}, "KV-aware routing over replicas"),
    ({"serving": "speculative-cluster"}, "is not a mode the model knows"),
])
def test_figures_the_model_cannot_predict_say_why(change, reason):
    fig = dataclasses.replace(pm.read_figures(pm.PUBLISHED_FILE)[0], **change)
    with pytest.raises(ValueError, match=reason):
        pm.observation(fig)


def inferencemax_figure(engine: str = "trtllm") -> pm.Figure:
    return next(f for f in pm.read_figures(pm.PUBLISHED_FILE)
                if "InferenceMAX" in f.source and f.engine == engine)


def test_a_harnesss_figures_take_the_settings_it_leaves_unsaid():
    o = pm.observation(inferencemax_figure())
    # InferenceMAX: lengths in [0.8 L, L], 10 prompts per client from a common start, and its
    # TensorRT-LLM servers' token budget.
    assert (o.setup.isl, o.setup.spread) == pytest.approx((0.9 * 1024, 0.1 / 0.9))
    assert o.setup.prompts_per_client == 10 and o.setup.max_num_tokens == 20000
    assert pm.observation(inferencemax_figure("vllm")).setup.max_num_tokens == \
        pm.facts().engine("vllm").max_num_tokens
    own = pm.observation(dataclasses.replace(inferencemax_figure(), length_range="1..1"))
    assert (own.setup.isl, own.setup.spread) == (1024, 0)  # a figure's own column wins
    other = pm.observation(dataclasses.replace(inferencemax_figure(), source="a lab's run"))
    assert other.setup.prompts_per_client is None and other.setup.isl == 1024


def test_p99_ttft_figures_under_either_name_are_predicted_as_p99():
    fig = dataclasses.replace(inferencemax_figure(), metric="ttft_ms_p99")
    p99 = pm.predict_observations([pm.observation(fig)], CAL)[0]
    alias = pm.observation(dataclasses.replace(fig, metric="ttft_p99_ms"))
    assert pm.predict_observations([alias], CAL)[0] == p99
    s = pm.observation(fig)
    p = pm.predict(pm.stack([s.setup]), np.array([s.concurrency]), CAL)
    assert p99 == pytest.approx(float(p.ttft_p99_ms[0])) and p99 > float(p.ttft_p90_ms[0])
    assert pm.GROUP_OF["ttft_ms_p99"] == "ttft_p99"


def test_leave_one_out_holds_out_every_metric_of_a_configuration_together(monkeypatch):
    a, b = setup(), setup(tensor_parallel_size=2)
    obs = [pm.Observation(s, c, m, 100.0) for s in (a, b) for c in (8.0, 64.0)
           for m in ("output_tok_s_per_gpu", "ttft_ms")]
    held: list[set[tuple]] = []

    def spy(rest, start, **kwargs):
        held.append({(o.setup.layout.world, o.concurrency) for o in obs if o not in rest})
        return start

    monkeypatch.setattr(pm._fit, "fit", spy)
    errors = pm.leave_one_out(obs, CAL)
    assert sorted(map(sorted, held)) == [[(1, 8.0)], [(1, 64.0)], [(2, 8.0)], [(2, 64.0)]]
    assert errors == pytest.approx(pm.errors(obs, CAL))


def test_a_published_length_range_gives_the_mean_lengths_and_their_spread():
    assert pm.length_range("") == (1.0, 0.0)
    assert pm.length_range("0.8..1") == pytest.approx((0.9, 0.1 / 0.9))  # InferenceX's 0.8
    assert pm.length_range("0.8..1.2") == pytest.approx((1.0, 0.2))  # vLLM's and tuner's 0.2
    fig = dataclasses.replace(pm.read_figures(pm.PUBLISHED_FILE)[1], length_range="0..1")
    o = pm.observation(fig)
    assert (o.setup.isl, o.setup.osl, o.setup.spread) == (512, 512, 1.0)


def test_accuracy_bench_reports_held_out_errors_and_band_coverage_per_metric(tmp_path: Path):
    rows = (REPO / "tuner" / "data" / "published.csv").read_text().splitlines()
    # The published figures before InferenceMAX's, and two of its configurations (4 metrics
    # each, TTFT p99 among them), so the leave-one-configuration-out refits take seconds.
    first = next(i for i, r in enumerate(rows) if "InferenceMAX" in r)
    picked = rows[:first] + rows[first:first + 8]
    extra = ["gpt-oss-120b,vllm,B200,1,TP1,1024,1024,,64,none,,output_tok_s_per_gpu,9000,test",
             "gpt-oss-120b,sglang,H200,8,TP8,2048,1024,,1,none,,output_tok_s_per_user,200,test",
             "gpt-oss-120b,vllm,A100,1,TP1,1024,1024,,1,none,,output_tok_s_per_user,100,test"]
    csv_path = tmp_path / "figures.csv"
    csv_path.write_text("\n".join(picked + extra) + "\n")
    out = subprocess.run([sys.executable, "-m", "bench.perfmodel_accuracy", str(csv_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=600,
                         check=True).stdout
    skipped = 6 + 1  # the disaggregated rows, and the A100
    assert f"modelled {len(picked) - 1 + len(extra) - skipped} (" in out
    assert "skipped: GPU type 'A100' is not in tuner/data/gpus.csv" in out
    assert out.count("skipped: disaggregated serving") == 6
    assert "in 80% band" in out
    for metric in ("tok_s_per_gpu", "tok_s_per_user", "ttft", "ttft_p99", "max throughput"):
        assert f"{metric:16} calibration" in out and f"{metric:16} held out" in out
    assert "ttft_ms_p99" in out and "calibration (LOO)" in out and "held out" in out
    # The fitted factors, each with what it explains.
    assert "admit_steps.vllm" in out and "steps a new request waits" in out
