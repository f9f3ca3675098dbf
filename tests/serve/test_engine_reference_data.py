"""The engine reference data (tuner/serve/engines/data) loads, names its release, holds the keys the
gpt-oss-120b configurations need, and its derivation script (tests/serve/derive_keys.py) works on
sample sources."""

from __future__ import annotations

import html
import json

import pytest
import yaml

from tests.conftest import REPO
from tests.serve import derive_keys

DATA = REPO / "tuner" / "serve" / "engines" / "data"
TRT = json.loads((DATA / "trtllm-1.2.1-llm_args.json").read_text())
SGL = json.loads((DATA / "sglang-0.5.23-server_args.json").read_text())
CURATED = DATA / "trtllm-1.2.1-curated"


def _trt_key_exists(path: str) -> bool:
    """``a.b.c`` is a key of a TorchLlmArgs YAML (``speculative_config.<type>.key`` per type)."""
    *parents, leaf = path.split(".")
    if not parents:
        return leaf in TRT["top_level_keys"]
    return leaf in TRT["nested"].get(".".join(parents), [])


def _yaml_paths(doc: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in doc.items():
        if isinstance(value, dict) and key != "env_overrides":
            out += _yaml_paths(value, f"{prefix}{key}.")
        else:
            out.append(prefix + key)
    return out


# ----------------------------------------------------------------------------- TensorRT-LLM


def test_trtllm_file_names_its_release_and_source():
    assert TRT["release"] == "v1.2.1"
    assert "tensorrt_llm/llmapi/llm_args.py" in TRT["source"]
    assert "376f7e1" in TRT["derived_by"]
    assert TRT["bases"][-2:] == ["BaseLlmArgs", "TorchLlmArgs"]
    assert TRT["health_path"] == "/health"
    assert len(TRT["top_level_keys"]) == len(set(TRT["top_level_keys"])) > 60


@pytest.mark.parametrize(
    "key",
    [
        "tensor_parallel_size",
        "moe_expert_parallel_size",
        "enable_attention_dp",
        "attention_dp_config.enable_balance",
        "attention_dp_config.batching_wait_iters",
        "attention_dp_config.timeout_iters",
        "moe_config.backend",
        "cuda_graph_config.enable_padding",
        "cuda_graph_config.max_batch_size",
        "cuda_graph_config.batch_sizes",
        "kv_cache_config.dtype",
        "kv_cache_config.free_gpu_memory_fraction",
        "kv_cache_config.enable_block_reuse",
        "stream_interval",
        "max_batch_size",
        "max_num_tokens",
        "max_seq_len",
        "trust_remote_code",
        "num_postprocess_workers",
        "print_iter_log",
        "env_overrides",
        "speculative_config",
        "speculative_config.Eagle.max_draft_len",
        "speculative_config.Eagle.speculative_model",
        "speculative_config.Eagle.speculative_model_dir",
        "speculative_config.Eagle.eagle3_one_model",
    ],
)
def test_trtllm_keys_tuner_needs_exist(key):
    assert _trt_key_exists(key), key


def test_trtllm_moe_backends_and_speculative_types():
    backends = TRT["enums"]["moe_config.backend"]
    assert {"CUTLASS", "TRTLLM", "TRITON"} <= set(backends)
    assert "AUTO" not in backends  # added after 1.2.x; 1.2.1 defaults to CUTLASS
    types = TRT["enums"]["speculative_config.decoding_type"]
    assert "Eagle" in types and "Eagle3" not in types  # EAGLE3 is 'Eagle' + eagle3_one_model
    assert TRT["dispatch"]["speculative_config"]["key"] == "decoding_type"


@pytest.mark.parametrize(
    "option",
    [
        "--tp_size",
        "--tensor_parallel_size",
        "--ep_size",
        "--moe_expert_parallel_size",
        "--max_batch_size",
        "--max_num_tokens",
        "--max_seq_len",
        "--kv_cache_free_gpu_memory_fraction",
        "--config",
        "--extra_llm_api_options",
        "--host",
        "--port",
        "--backend",
        "--trust_remote_code",
    ],
)
def test_trtllm_serve_cli_options(option):
    assert option in TRT["serve_cli_options"]


def test_trtllm_serve_backend_choices():
    assert TRT["serve_cli_choices"]["--backend"] == ["pytorch", "tensorrt", "_autodeploy"]


def test_curated_configs_match_the_issue_and_use_known_keys():
    latency = yaml.safe_load((CURATED / "gpt-oss-120b-latency.yaml").read_text())
    throughput = yaml.safe_load((CURATED / "gpt-oss-120b-throughput.yaml").read_text())
    assert (latency["tensor_parallel_size"], latency["moe_expert_parallel_size"]) == (8, 1)
    assert (latency["max_batch_size"], latency["max_num_tokens"]) == (64, 16384)
    assert latency["moe_config"]["backend"] == "TRTLLM" and latency["stream_interval"] == 20
    assert (throughput["tensor_parallel_size"], throughput["moe_expert_parallel_size"]) == (2, 2)
    assert throughput["enable_attention_dp"] is True
    assert throughput["attention_dp_config"]["enable_balance"] is True
    assert throughput["max_batch_size"] == 720 and throughput["moe_config"]["backend"] == "TRTLLM"
    for doc in (latency, throughput):
        unknown = [p for p in _yaml_paths(doc) if not _trt_key_exists(p)]
        # The one key the curated files carry that LlmArgs lacks is a trtllm-serve CLI option.
        assert unknown == ["kv_cache_free_gpu_memory_fraction"]
        assert "--kv_cache_free_gpu_memory_fraction" in TRT["serve_cli_options"]


@pytest.mark.parametrize(
    "name", ["database-H200-1k1k_tp8_conc64.yaml", "database-B200-1k1k_tp8_conc64.yaml"]
)
def test_database_examples_use_known_keys(name):
    doc = yaml.safe_load((CURATED / name).read_text())
    assert [p for p in _yaml_paths(doc) if not _trt_key_exists(p)] == []
    assert doc["moe_config"]["backend"] in TRT["enums"]["moe_config.backend"]


# ----------------------------------------------------------------------------- SGLang


def test_sglang_file_names_its_release():
    assert SGL["release"] == "v0.5.23"
    assert "server_args.py" in SGL["source"] and SGL["derived_by"]
    assert SGL["health_path"] == "/health"
    assert all(f.startswith("--") for f in SGL["flags"])
    assert len(SGL["flags"]) == len(set(SGL["flags"])) > 300


@pytest.mark.parametrize(
    "flag",
    [
        "--model-path",
        "--host",
        "--port",
        "--tp-size",
        "--tensor-parallel-size",
        "--ep-size",
        "--dp-size",
        "--attn-dp-size",
        "--moe-runner-backend",
        "--max-running-requests",
        "--chunked-prefill-size",
        "--mem-fraction-static",
        "--kv-cache-dtype",
        "--attention-backend",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--trust-remote-code",
    ],
)
def test_sglang_flags_tuner_needs_exist(flag):
    assert flag in SGL["flags"]


def test_sglang_choices():
    assert {"auto", "triton", "triton_kernel", "flashinfer_mxfp4", "flashinfer_trtllm"} <= set(
        SGL["choices"]["--moe-runner-backend"]
    )
    assert {"triton", "fa3", "trtllm_mha"} <= set(SGL["choices"]["--attention-backend"])
    assert "--speculative-algorithm" not in SGL["choices"]  # a free name in 0.5.23


# ----------------------------------------------------------------------------- derive_keys

SAMPLE_LLM_ARGS = """
class StrictBaseModel(BaseModel):
    class Config:
        extra = "forbid"

class MoeConfig(StrictBaseModel):
    backend: Literal["CUTLASS", "TRTLLM"] = Field(default="CUTLASS")
    max_num_tokens: Optional[int] = None

class Policy(StrEnum):
    FIRST = "FIRST"
    SECOND = "SECOND"

class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: Optional[int] = None
    speculative_model: Optional[str] = Field(
        default=None, validation_alias=AliasChoices("speculative_model", "speculative_model_dir"))
    _private: bool = PrivateAttr(True)

    @classmethod
    def from_dict(cls, data: dict):
        decoding_type = data.get("decoding_type")
        config_classes = {"Eagle": EagleDecodingConfig, "NGram": NGramDecodingConfig}

class EagleDecodingConfig(DecodingBaseConfig):
    eagle3_one_model: Optional[bool] = True
    decoding_type: ClassVar[str] = "Eagle"

class NGramDecodingConfig(DecodingBaseConfig):
    is_keep_all: bool = True

SpeculativeConfig: TypeAlias = Optional[Union[EagleDecodingConfig, NGramDecodingConfig]]

class BaseLlmArgs(StrictBaseModel):
    model: str = Field()
    policy: Policy = Field(default=Policy.FIRST)
    speculative_config: SpeculativeConfig = Field(default=None)

class TorchLlmArgs(BaseLlmArgs):
    moe_config: MoeConfig = Field(default_factory=MoeConfig)
    stream_interval: int = Field(default=1)
"""

SAMPLE_SERVE = """
@click.command("serve")
@click.argument("model", type=str)
@click.option("--host", type=str, default="localhost")
@click.option("--tensor_parallel_size", "--tp_size", type=int, default=1)
@click.option("--backend", type=ChoiceWithAlias(["pytorch", "tensorrt"], {"trt": "tensorrt"}))
@click.option("--config", "--extra_llm_api_options", "extra_llm_api_options", type=str)
def serve(model, host, tensor_parallel_size, backend, extra_llm_api_options):
    pass

@click.command("other")
@click.option("--not-this-one")
def other(not_this_one):
    pass
"""

EXPECTED_LLM_ARGS = {
    "top_level_keys": ["model", "policy", "speculative_config", "moe_config", "stream_interval"],
    "nested": {
        "speculative_config.Eagle": [
            "max_draft_len",
            "speculative_model",
            "speculative_model_dir",
            "eagle3_one_model",
        ],
        "speculative_config.NGram": [
            "max_draft_len",
            "speculative_model",
            "speculative_model_dir",
            "is_keep_all",
        ],
        "moe_config": ["backend", "max_num_tokens"],
    },
    "enums": {
        "policy": ["FIRST", "SECOND"],
        "speculative_config.decoding_type": ["Eagle", "NGram"],
        "moe_config.backend": ["CUTLASS", "TRTLLM"],
    },
    "dispatch": {"speculative_config": {"key": "decoding_type", "values": ["Eagle", "NGram"]}},
    "bases": ["StrictBaseModel", "BaseLlmArgs", "TorchLlmArgs"],
}


def test_derive_llm_args_from_sample():
    assert derive_keys.derive_llm_args(SAMPLE_LLM_ARGS) == EXPECTED_LLM_ARGS


def test_derive_reads_a_sphinx_viewcode_page(tmp_path):
    spans = "".join(
        f'<span class="n">{html.escape(line)}</span>\n' for line in SAMPLE_LLM_ARGS.splitlines()
    )
    page = tmp_path / "llm_args.html"
    page.write_text(
        '<html><div class="highlight"><pre>\n<div class="viewcode-block" id="X">\n'
        '<a class="viewcode-back" href="#">[docs]</a>\n'
        f"{spans}</div></pre></div></html>"
    )
    assert derive_keys.derive_llm_args(derive_keys.read_source(page)) == EXPECTED_LLM_ARGS


def test_derive_click_serve_options():
    got = derive_keys.derive_click_command(SAMPLE_SERVE)
    assert got["options"] == [
        "--host",
        "--tensor_parallel_size",
        "--tp_size",
        "--backend",
        "--config",
        "--extra_llm_api_options",
    ]
    assert got["option_groups"][1] == ["--tensor_parallel_size", "--tp_size"]
    assert got["choices"] == {"--backend": ["pytorch", "tensorrt"]}


SAMPLE_SGLANG_CHOICES = 'MOE_CHOICES = ["auto", "triton"]\nEXTRA = MOE_CHOICES + ["cutlass"]\n'
SAMPLE_SGLANG_FIELDS = """
class Parallel(msgspec.Struct):
    tp_size: A[int, Arg(help="TP size.", aliases=["--tensor-parallel-size"])] = 1
    moe_runner_backend: A[str, Arg(help="MoE.", choices=EXTRA)] = "auto"
    deepep_mode: A[Literal["auto", "normal"], "DeepEP mode."] = "auto"
    enable_dp_attention: A[bool, Arg(no_cli=True)] = False
    tf32: A[bool, Arg(help="x", action=argparse.BooleanOptionalAction)] = True
    host: A[str, Arg(help="Host.", cli_name="--bind-host")] = "127.0.0.1"
    internal: int = 0
"""
SAMPLE_SGLANG_SERVER_ARGS = """
def add_cli_args(parser):
    parser.add_argument("--config", type=str)
    parser.add_argument("--sampling-backend", choices=dynamic_choices())
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e4m3"])
"""


def test_derive_sglang_from_samples():
    got = derive_keys.derive_sglang(
        [SAMPLE_SGLANG_SERVER_ARGS, SAMPLE_SGLANG_FIELDS, SAMPLE_SGLANG_CHOICES]
    )
    assert got["flags"] == [
        "--config",
        "--sampling-backend",
        "--kv-cache-dtype",
        "--tp-size",
        "--tensor-parallel-size",
        "--moe-runner-backend",
        "--deepep-mode",
        "--tf32",
        "--no-tf32",
        "--bind-host",
    ]
    assert got["choices"] == {
        "--kv-cache-dtype": ["auto", "fp8_e4m3"],
        "--moe-runner-backend": ["auto", "triton", "cutlass"],
        "--deepep-mode": ["auto", "normal"],
    }
    assert got["choices_not_literal"] == ["--sampling-backend"]


def test_derive_cli_writes_json(tmp_path):
    src = tmp_path / "llm_args.py"
    src.write_text(SAMPLE_LLM_ARGS)
    serve = tmp_path / "serve.py"
    serve.write_text(SAMPLE_SERVE)
    out = tmp_path / "out.json"
    assert (
        derive_keys.main(
            [
                "trtllm",
                "--release",
                "v0.0.1",
                "--llm-args",
                str(src),
                "--serve",
                str(serve),
                "--note",
                "n",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    got = json.loads(out.read_text())
    assert got["release"] == "v0.0.1" and got["notes"] == ["n"]
    assert got["top_level_keys"] == EXPECTED_LLM_ARGS["top_level_keys"]
    assert got["serve_cli_options"][:2] == ["--host", "--tensor_parallel_size"]
    # The committed file has exactly the layout the script writes.
    assert set(TRT) == set(got)
