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
yields e = (1 - a^(k+1)) / (1 - a) tokens per step at acceptance a. Throughput per GPU =
sequences x e / t_step / GPUs; per user = e / t_step; TTFT = prompt chunks x step + a queue
(Little's law) when the concurrency exceeds what the server holds.
"""

from tuner.plan.perfmodel._facts import (
    CALIBRATION_FILE,
    PUBLISHED_FILE,
    Calibration,
    EngineFacts,
    Facts,
    ModelFacts,
    facts,
    gpu_for_model,
    load_calibration,
    model_facts,
    prior_calibration,
)
from tuner.plan.perfmodel._fit import (
    METRICS,
    Figure,
    Observation,
    calibrate,
    errors,
    fit,
    leave_one_out,
    observation,
    predict_observations,
    read_figures,
    relevant_factors,
    usable,
)
from tuner.plan.perfmodel._roofline import (
    MAX,
    Cases,
    Layout,
    Prediction,
    Setup,
    expected_tokens,
    layout_of,
    memory_reason,
    parse_parallelism,
    predict,
    setup_of,
    stack,
)

__all__ = [
    "CALIBRATION_FILE", "MAX", "METRICS", "PUBLISHED_FILE", "Calibration", "Cases", "EngineFacts",
    "Facts", "Figure", "Layout", "ModelFacts", "Observation", "Prediction", "Setup", "calibrate",
    "errors", "leave_one_out", "usable",
    "expected_tokens", "facts", "fit", "gpu_for_model", "layout_of", "load_calibration",
    "memory_reason", "model_facts", "observation", "parse_parallelism", "predict",
    "predict_observations", "prior_calibration", "read_figures", "relevant_factors", "setup_of",
    "stack",
]
