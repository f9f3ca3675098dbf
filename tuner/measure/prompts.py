"""Prompt sources for the load generator.

Token ids (not text) make the prompt length exact whatever the tokenizer, so completions get
lists of ids: random ones (synthetic) or windows of natural text that ships with tuner (corpus),
cut by the served model's own tokenizer. The chat API takes text, so it gets the corpus windows
decoded, or a user's own prompt file (tuner.measure.prompt_file), counted with the same tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from pathlib import Path

from tuner import DATA_DIR
from tuner.measure.client import Conversation, Prompt
from tuner.measure.prompt_file import FilePrompt, PromptFileError, read_prompt_file
from tuner.spec.errors import BadInput
from tuner.spec.study_spec import WorkloadSpec


def synthetic_token_prompts(
    n: int, input_len: int, vocab_size: int, seed: int, avoid_ids: Iterable[int] = ()
) -> list[list[int]]:
    """`n` prompts of exactly `input_len` token ids drawn uniformly from [0, vocab_size).

    `avoid_ids` (special tokens: BOS, EOS, chat markers) are never drawn, so a prompt cannot end
    early or change the chat format. The same arguments give the same prompts on every run.
    Random ids also keep distinct prompts from sharing prefixes, so the server's prefix cache does
    not shorten prefill, as long as no prompt is sent twice.
    """
    if n < 0 or input_len < 1 or vocab_size < 1:
        raise ValueError(
            f"need n >= 0, input_len >= 1, vocab_size >= 1: {n}, {input_len}, {vocab_size}")
    import numpy as np

    allowed = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), list(avoid_ids))
    if not allowed.size:
        raise ValueError(f"avoid_ids exclude every id of a vocabulary of {vocab_size}")
    # numpy, in blocks of rows: a GPU study's sweep draws tens of millions of ids (the
    # gpt-oss-120b example: 49,216 prompts of 1,536), a minute one by one in Python.
    rng = np.random.default_rng(seed)
    prompts: list[list[int]] = []
    block = max(1, 2**22 // input_len)
    for start in range(0, n, block):
        rows = min(block, n - start)
        prompts += allowed[rng.integers(0, allowed.size, size=(rows, input_len))].tolist()
    return prompts


CORPUS = DATA_DIR / "corpus.txt"


def corpus_token_prompts(n: int, input_len: int, tokenizer_json: Path, seed: int,
                         corpus: Path = CORPUS) -> list[list[int]]:
    """n prompts of exactly input_len tokens cut from natural text that ships with tuner,
    tokenized by the served model's own tokenizer (its tokenizer.json), at seeded offsets.

    Natural text repeats phrases, as real traffic does; random token ids never do, which makes
    n-gram and draft-model speculation look useless (their acceptance collapses)."""
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tokenizer_json)).encode(corpus.read_text()).ids
    if len(ids) < input_len:
        raise ValueError(f"the corpus has {len(ids)} tokens, fewer than input_len {input_len}")
    rng = random.Random(seed)
    doubled = ids + ids  # windows may wrap around the end of the text
    return [doubled[(start := rng.randrange(len(ids))):start + input_len] for _ in range(n)]


def corpus_text_prompts(n: int, input_len: int, tokenizer_json: Path, seed: int,
                        corpus: Path = CORPUS) -> list[Prompt]:
    """The corpus windows of `corpus_token_prompts` as text, for the chat API (which takes text):
    the same windows decoded, so their length is input_len tokens before the chat template
    (which the server adds, and counts in its usage)."""
    windows = corpus_token_prompts(n, input_len, tokenizer_json, seed, corpus)
    return as_text([Prompt(tokens=w) for w in windows], tokenizer_json)


def as_text(prompts: list[Prompt], tokenizer_json: Path) -> list[Prompt]:
    """Token-id prompts decoded to text with the model's tokenizer, their output lengths kept."""
    from tokenizers import Tokenizer

    decode = Tokenizer.from_file(str(tokenizer_json)).decode
    return [Prompt(text=decode(p.tokens), output_len=p.output_len) for p in prompts]


def spread_lengths(n: int, length: int, ratio: float, rng: random.Random) -> list[int]:
    """`n` lengths drawn uniformly from the integers in [length * (1 - ratio), length *
    (1 + ratio)], at least 1: the range ratio of `vllm bench serve`'s random dataset, so the mean
    stays `length`. Ratio 0 gives exactly `length` every time."""
    if not 0 <= ratio < 1:
        raise ValueError(f"range ratio must be in [0, 1), got {ratio}")
    lo, hi = max(1, round(length * (1 - ratio))), max(1, round(length * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def spread_prompts(windows: list[list[int]], input_len: int, output_len: int, ratio: float,
                   seed: int) -> list[Prompt]:
    """Cut each window (at least the longest drawn length) to its own input length and give it
    its own output length, both spread by `ratio` around the spec's lengths, seeded."""
    rng = random.Random(f"lengths {seed}")  # apart from the stream that drew the token ids
    inputs = spread_lengths(len(windows), input_len, ratio, rng)
    outputs = spread_lengths(len(windows), output_len, ratio, rng)
    if windows and max(inputs) > min(len(w) for w in windows):
        raise ValueError(f"windows of {min(len(w) for w in windows)} tokens cannot give "
                         f"prompts of {max(inputs)}")
    return [Prompt(tokens=w[:i], output_len=o)
            for w, i, o in zip(windows, inputs, outputs, strict=True)]


def longest(length: int, ratio: float) -> int:
    """The longest length `spread_lengths` can draw."""
    return max(1, round(length * (1 + ratio)))


def file_prompts(records: list[FilePrompt], n: int, *, api: str, input_len: int,
                 output_len: int, output_len_from: str, tokenizer_json: Path,
                 seed: int) -> list[Prompt]:
    """`n` requests from a prompt file, in a seeded shuffle, cycled when the file is shorter.

    Records whose prompt is longer than `input_len` tokens of the model's tokenizer are skipped
    (a conversation counts its turns' text; the chat template the server adds is not counted
    here, the server's usage counts it). With output_len_from "dataset", each request generates
    its reply's token length, capped at `output_len`, and records without a reply are skipped;
    otherwise every request generates `output_len`. Raises PromptFileError naming the problem.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    chosen: list[Prompt] = []
    too_long = no_reply = 0
    for r in records:
        if api != "chat" and r.is_chat:
            raise PromptFileError(f"prompt file line {r.line} is a conversation, which only the "
                                  "chat API takes: set workload.api: chat")
        if sum(count(t) for t in r.prompt_texts()) > input_len:
            too_long += 1
            continue
        out = output_len
        if output_len_from == "dataset":
            reply = count(r.reply) if r.reply else 0
            if reply == 0:
                no_reply += 1
                continue
            out = min(reply, output_len)
        chosen.append(Prompt(text=r.text, messages=r.message_dicts() if api == "chat" else None,
                             output_len=out))
    if not chosen:
        raise PromptFileError(
            f"no usable record in the prompt file: {too_long} longer than input_len "
            f"{input_len} tokens, {no_reply} without a reply (output_len_from dataset): raise "
            "workload.input_len or add shorter prompts")
    random.Random(seed).shuffle(chosen)
    return [chosen[i % len(chosen)] for i in range(n)]


def conversations(n: int, turns: int, input_len: int, output_len: int, system_len: int,
                  draw: Callable[[int, int, int], list[list[int]]]) -> list[Conversation]:
    """`n` conversations of `turns` turns: turn k's prompt is the shared system prompt, the
    first k user messages each followed by its reply, and the (k+1)th user message. The replies
    are scripted (drawn like the messages), not the served model's: every configuration then
    gets the same prompts, and a turn's prefix is the previous turn's prompt whatever was
    generated. `draw(count, length, seed)` gives token-id pieces (synthetic or corpus)."""
    system = draw(1, system_len, 1)[0] if system_len else []
    users = draw(n * turns, input_len, 2)
    replies = draw(n * turns, output_len, 3)
    out = []
    for c in range(n):
        history, prompts = list(system), []
        for k in range(turns):
            history += users[c * turns + k]
            prompts.append(list(history))
            history += replies[c * turns + k]
        out.append(Conversation(tuple(prompts)))
    return out


def _conversation_prompts(w: WorkloadSpec, model_dir: Path, vocab_size: int,
                          n: int) -> list[Conversation]:
    """Enough conversations for `n` requests: each level leaves up to one unfinished per
    request in flight, and a cycled conversation would be served from the prefix cache."""
    conv = w.conversation
    count = n if w.auto else -(-n // conv.turns) + w.level_count * max(w.concurrency)

    def draw(k: int, length: int, salt: int) -> list[list[int]]:
        if w.prompt_source == "corpus":
            return corpus_token_prompts(k, length, _tokenizer_json(w, model_dir),
                                        w.seed * 7 + salt)
        return synthetic_token_prompts(k, length, vocab_size, w.seed * 7 + salt)

    convs = conversations(count, conv.turns, w.input_len, w.output_len, conv.system_prompt_len,
                          draw)
    if w.api != "chat":
        return convs
    # The chat API takes text: each turn decoded whole (one user message holding the history),
    # every turn of every conversation with one load of the tokenizer.
    texts = iter(as_text([Prompt(tokens=t) for c in convs for t in c.turns],
                         _tokenizer_json(w, model_dir)))
    return [Conversation(tuple(next(texts) for _ in c.turns)) for c in convs]


# ---------------------------------------------------------------- the prompts of a whole sweep


def _tokenizer_json(w: WorkloadSpec, model_dir: Path) -> Path:
    tokenizer = model_dir / "tokenizer.json"
    if not tokenizer.is_file():
        fix = ("use prompt_source synthetic" if w.api == "completions"
               else "serve a model directory that has one")
        raise BadInput(f"workload.prompt_source {w.prompt_source} needs the model's "
                       f"tokenizer.json ({tokenizer} is missing): {fix}")
    return tokenizer


def sweep_prompts(w: WorkloadSpec, model_dir: Path, vocab_size: int,
                  n: int | None = None) -> list[list[int] | Prompt]:
    """One prompt per request of the whole sweep (every round of every level, warm-up included):
    fresh ones, so none is served from a prefix cache, except that a prompt file shorter than
    the sweep is cycled. `n`: how many (default `w.prompts_needed()`; a load search sizes its
    own)."""
    n = w.prompts_needed() if n is None else n
    if w.conversation is not None:
        return _conversation_prompts(w, model_dir, vocab_size, n)
    if w.prompt_source == "file":
        try:
            records = read_prompt_file(Path(w.prompt_file))
            return file_prompts(records, n, api=w.api, input_len=w.input_len,
                                output_len=w.output_len, output_len_from=w.output_len_from,
                                tokenizer_json=_tokenizer_json(w, model_dir), seed=w.seed)
        except PromptFileError as e:
            raise BadInput(str(e)) from e
    if w.range_ratio:
        # Windows as long as the longest draw, each cut to its own length.
        longest_in = longest(w.input_len, w.range_ratio)
        windows = (corpus_token_prompts(n, longest_in, _tokenizer_json(w, model_dir), w.seed)
                   if w.prompt_source == "corpus" else
                   synthetic_token_prompts(n=n, input_len=longest_in,
                                           vocab_size=vocab_size, seed=w.seed))
        spread = spread_prompts(windows, w.input_len, w.output_len, w.range_ratio, w.seed)
        return as_text(spread, _tokenizer_json(w, model_dir)) if w.api == "chat" else spread
    if w.prompt_source == "corpus":
        if w.api == "chat":
            return corpus_text_prompts(n, w.input_len, _tokenizer_json(w, model_dir), w.seed)
        return corpus_token_prompts(n, w.input_len, _tokenizer_json(w, model_dir), w.seed)
    return synthetic_token_prompts(n=n, input_len=w.input_len,
                                   vocab_size=vocab_size, seed=w.seed, avoid_ids=())
