"""An analytical (roofline) model of serving a Mixture-of-Experts transformer on a GPU type.

Pure computation over data files: model shapes (data/models.yaml), GPU specs (data/gpus.csv),
engine facts and the priors of the free factors (data/perfmodel.yaml), and the fitted factors
(data/perfmodel_calibration.json). It reads those files and writes nothing: the caller stores
predictions, tagged as predictions.

Memory per GPU: MXFP4 experts (4.25 bits/param) split over every rank (by TP or EP), BF16
attention and embeddings split by the attention-TP degree, activations for max_num_tokens, a
fixed reserve. KV per token and layer = 2 x kv_heads x head_dim x bytes / min(attention TP,
kv_heads); full-attention layers hold every token, sliding-window layers only the window. The KV
budget is fraction x memory - the rest (vLLM, SGLang) or fraction x what the rest leaves
(TensorRT-LLM). A configuration fits when one ISL + OSL sequence fits; a level fits when its
sequences do.

One engine step, per GPU (ranks step in lock-step: the MoE layers exchange tokens), with b
sequences on the busiest rank, each putting k + 1 tokens through the target (k = draft length),
and p prompt tokens of chunked prefill in the same step:

    t_step = sum over operators of max(bytes / (HBM x bw_eff), flops / (peak x eff))
             + TP all-reduces and EP all-to-alls over NVLink
             + layers x layer_overhead + step_overhead (per engine)

Operators: attention projections and router, attention over the KV cache (read at kv_bw_eff of
HBM: paged blocks), the MoE experts, the LM head, and k draft steps. Kernels run one after
another, so each has its own roofline and the bounds add. MoE: bytes of the experts the step's T
tokens touch, E (1 - (1 - top_k / E)^T), streamed at HBM or, on Hopper, at the rate its kernels
dequantize MXFP4 to BF16 (moe_dequant_tb_s); compute at the kernel family's precision (BF16 on
Hopper, MXFP8 on Blackwell) x moe_eff[arch] x moe_kernel[family] x tile fill (m + s) / (m + s +
m0), m = tokens per touched expert. Speculation yields e = (1 - a^(k+1)) / (1 - a) tokens per
step at a per-token acceptance a, or 1 + R k where the acceptance rate R (accepted / proposed)
is measured or given.

In steady state each rank replaces its b e / OSL finishing sequences per step: their prompts
are chunks of at most the step's token budget (max_num_tokens less the decodes), each making one
step slower, and in lock-step any rank's chunk holds every rank. The mean step t carries that
share of chunk steps; a user sees the others' chunks only. A slot cycles through its prompt's
prefill, OSL - 1 decode steps and, closed loop, its request's waits; tok/s per GPU = sequences x
OSL / cycle / GPUs, per user = e / t_user. TTFT at quantile q (median, p90, p99) = the request's
overhead outside the steps (HTTP, tokenizing, streaming the first token: per engine) + the wait
for the step that starts its prefill (admit_steps - 0.5 + q steps: the running step, and one
scheduled ahead under asynchronous scheduling) + under attention DP, the wait for the other
ranks' prompts (TensorRT-LLM's balance) + an M/D/1-like wait for room in the budget + its own
chunks, + a closed-loop queue (Little's law) when the concurrency exceeds what the server holds.
Figures timed from every client's simultaneous start (a harness's closed loop of
prompts_per_client prompts each, tuner/data/perfmodel.yaml `harnesses`) also hold the start
burst: all prompts arrive at once, and the request at quantile q of the burst (which holds 1 /
prompts_per_client of the requests, so it sets p99) waits for those ahead at the budget's
tokens per step; and the run's last wave drains (drain_cycles). A workload's length spread
(range_ratio) sets the longest sequence the KV cache must hold and each quantile's prompt.
Every prediction has an 80% band from the calibration's leave-one-configuration-out errors
(_band). Disaggregated serving and KV-aware routing are not modelled: published figures of them
are skipped with the reason (tuner/data/perfmodel.yaml `unmodelled`).
"""

from tuner.plan.perfmodel._band import BAND_Z, Band, band, sigma
from tuner.plan.perfmodel._facts import (
    CALIBRATION_FILE,
    GENERATED_SHAPES,
    PUBLISHED_FILE,
    Calibration,
    EngineFacts,
    Facts,
    Harness,
    ModelFacts,
    device,
    facts,
    gpu_for_model,
    load_calibration,
    model_facts,
    prior_calibration,
)
from tuner.plan.perfmodel._figures import (
    GROUP_OF,
    GROUPS,
    METRICS,
    Figure,
    Observation,
    calibrates,
    length_range,
    observation,
    read_figures,
    split,
    usable,
)
from tuner.plan.perfmodel._fit import (
    band_summary,
    calibrate,
    configuration_key,
    errors,
    fit,
    leave_one_out,
    predict_observations,
    relevant_factors,
)
from tuner.plan.perfmodel._layout import Layout, layout_of, parse_parallelism
from tuner.plan.perfmodel._predict import Prediction, expected_tokens, memory_reason, predict
from tuner.plan.perfmodel._roofline import MAX, Cases, Setup, setup_of, stack

__all__ = [
    "BAND_Z", "CALIBRATION_FILE", "GENERATED_SHAPES", "GROUPS", "GROUP_OF", "MAX", "METRICS",
    "PUBLISHED_FILE", "Band", "Calibration", "Cases", "EngineFacts", "Facts", "Figure",
    "Harness", "Layout", "ModelFacts", "Observation", "Prediction", "Setup", "band",
    "band_summary", "calibrate", "calibrates", "configuration_key", "device", "errors",
    "expected_tokens", "facts", "fit", "gpu_for_model", "layout_of", "leave_one_out",
    "length_range", "load_calibration", "memory_reason", "model_facts", "observation",
    "parse_parallelism", "predict", "predict_observations", "prior_calibration", "read_figures",
    "relevant_factors", "setup_of", "sigma", "split", "stack", "usable",
]
