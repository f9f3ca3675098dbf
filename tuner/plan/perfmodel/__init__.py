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
and prompt tokens of chunked prefill b x e x ISL / OSL per step:

    t_step = sum over operators of max(bytes / (HBM x bw_eff), flops / (peak x eff))
             + TP all-reduces and EP all-to-alls over NVLink
             + layers x layer_overhead + step_overhead (per engine)

Operators: attention projections and router, attention over the KV cache, the MoE experts, the LM
head, and k draft steps. Kernels run one after another, so each has its own roofline and the bounds
add. MoE: bytes of the experts the step's T tokens touch, E (1 - (1 - top_k / E)^T); compute at
the kernel family's precision (BF16 on Hopper, MXFP8 on Blackwell) x moe_eff[arch] x
moe_kernel[family] x tile fill (m + s) / (m + s + m0), m = tokens per touched expert. Speculation
yields e = (1 - a^(k+1)) / (1 - a) tokens per step at a per-token acceptance a, or 1 + R k where
the acceptance rate R (accepted / proposed) is measured or given. Throughput per GPU =
sequences x e / t_step / GPUs; per user = e / t_step. In steady state each step also prefills
the prompts of the sequences replacing finished ones (chunked prefill), which slows decode.
TTFT (median, p90) = the wait for a step boundary + an M/D/1-like wait for room in the steps'
token budget (what the running batch's decodes leave) + the prompt's own chunks, each a step
carrying the batch's decodes, + a closed-loop queue (Little's law) when the concurrency exceeds
what the server holds. A workload's length spread (range_ratio) sets the longest sequence the
KV cache must hold and the p90 prompt. Every prediction has an 80% band from the calibration's
leave-one-out errors (_band). Disaggregated serving and KV-aware routing are not modelled:
published figures of them are skipped with the reason (tuner/data/perfmodel.yaml `unmodelled`).
"""

from tuner.plan.perfmodel._band import BAND_Z, Band, band, sigma
from tuner.plan.perfmodel._facts import (
    CALIBRATION_FILE,
    GENERATED_SHAPES,
    PUBLISHED_FILE,
    Calibration,
    EngineFacts,
    Facts,
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
    "PUBLISHED_FILE", "Band", "Calibration", "Cases", "EngineFacts", "Facts", "Figure", "Layout",
    "ModelFacts", "Observation", "Prediction", "Setup", "band", "band_summary", "calibrate",
    "calibrates", "device", "errors", "expected_tokens", "facts", "fit", "gpu_for_model",
    "layout_of", "leave_one_out", "length_range", "load_calibration", "memory_reason",
    "model_facts", "observation", "parse_parallelism", "predict", "predict_observations",
    "prior_calibration", "read_figures", "relevant_factors", "setup_of", "sigma", "split",
    "stack", "usable",
]
