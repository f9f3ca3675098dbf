"""Tiny MoE models with random weights and a locally trained tokenizer: no hub access.

tiny gpt-oss: same architecture family as gpt-oss-120b (MoE experts, alternating sliding-window
and full attention), about a million parameters, so vLLM's CPU build serves it in seconds.
vLLM renders chat for gpt-oss with OpenAI's Harmony format, whose token ids belong to gpt-oss's
200k vocabulary, not to a tiny tokenizer: the tiny gpt-oss serves /v1/completions only.
tiny Qwen3-MoE: a MoE model of the same size whose chat vLLM renders with the tokenizer's own
chat template (written here), so /v1/chat/completions can be measured on CPU.
Deterministic: the same seed gives byte-identical weights and tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

# Training text for the byte-level BPE tokenizer. Plain English about the field, so prompts built
# from it tokenize into ordinary merges.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog while the server streams tokens to every user.",
    "Tensor parallelism splits each layer across devices; expert parallelism spreads the experts.",
    "A mixture of experts routes every token to a few experts chosen by a small router network.",
    "Throughput per GPU and tokens per second per user pull against each other under load.",
    "Speculative decoding drafts several tokens and the target model verifies them in one step.",
    "The key value cache grows with the context length and the number of concurrent requests.",
    "Time to first token measures prefill; inter token latency measures each decoding step.",
    "Batching more sequences raises throughput until memory or compute becomes the limit.",
    "Once upon a time there was a small model that answered questions about large models.",
    "Numbers like 1, 2, 4, 8, 16, 32, 64, 128 and 256 are common batch sizes and degrees.",
]

TINY_GPT_OSS = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 4096,
}
TINY_QWEN3_MOE = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 128,
    "moe_intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 4096,
}
VOCAB_SIZE = 512
# ChatML, as Qwen's own template writes turns; rendered by the server for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _train_tokenizer(out: Path, chat: bool = False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>", "<|pad|>"] + (["<|im_start|>", "<|im_end|>"] if chat
                                                         else []),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def generate_tiny_gpt_oss(out: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight gpt-oss model (bf16 safetensors + tokenizer) into `out`."""
    from transformers import GptOssConfig, GptOssForCausalLM

    return _write_model(out, seed, GptOssConfig, GptOssForCausalLM, TINY_GPT_OSS,
                        "tuner tiny gpt-oss", chat=False)


def generate_tiny_qwen3_moe(out: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen3-MoE model (bf16 safetensors + a tokenizer with a chat
    template) into `out`: the tiny model for measuring the chat API."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return _write_model(out, seed, Qwen3MoeConfig, Qwen3MoeForCausalLM, TINY_QWEN3_MOE,
                        "tuner tiny qwen3-moe", chat=True)


def _write_model(out: Path, seed: int, config_cls, model_cls, shape: dict, generator: str, *,
                 chat: bool) -> Path:
    import torch

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(out, chat=chat)
    torch.manual_seed(seed)
    config = config_cls(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        **shape,
    )
    model = model_cls(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # Record how it was made, so a study's provenance can name its model exactly.
    (out / "tuner_model.json").write_text(
        json.dumps({"generator": generator, "seed": seed, **shape}, indent=2)
    )
    return out


GENERATORS = {"tiny-gpt-oss": generate_tiny_gpt_oss, "tiny-qwen3-moe": generate_tiny_qwen3_moe}
