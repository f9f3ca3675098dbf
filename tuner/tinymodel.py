"""A tiny gpt-oss model with random weights and a locally trained tokenizer: no hub access.

Same architecture family as gpt-oss-120b (MoE experts, alternating sliding-window and full
attention), about a million parameters, so vLLM's CPU build serves it in seconds. Deterministic:
the same seed gives byte-identical weights and tokenizer.
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
VOCAB_SIZE = 512


def _train_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    fast.save_pretrained(out)
    return fast


def generate_tiny_gpt_oss(out: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight gpt-oss model (bf16 safetensors + tokenizer) into `out`."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(out)
    torch.manual_seed(seed)
    config = GptOssConfig(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        **TINY_GPT_OSS,
    )
    model = GptOssForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # Record how it was made, so a study's provenance can name its model exactly.
    (out / "tuner_model.json").write_text(
        json.dumps({"generator": "tuner tiny gpt-oss", "seed": seed, **TINY_GPT_OSS}, indent=2)
    )
    return out
