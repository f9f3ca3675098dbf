"""A user's own prompts from a JSONL file, one record a line, in the three shapes people have:

    {"prompt": "text"}                                                     plain text
    {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}  ShareGPT
    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}  OpenAI chat

A conversation's prompt is everything before its first assistant turn, and that turn is its reply
(the reply's length can set the request's output length, as `vllm bench serve` does for
ShareGPT). Every error names the line and the fix, in one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# ShareGPT speakers -> OpenAI roles.
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
                   "bard": "assistant", "bing": "assistant", "assistant": "assistant",
                   "system": "system"}
_ROLES = ("system", "user", "assistant", "developer", "tool")


class PromptFileError(ValueError):
    """A prompt file that cannot be used; the message is one line naming the place and fix."""


@dataclass(frozen=True)
class FilePrompt:
    line: int  # 1-based line number in the file
    text: str | None = None  # a {"prompt": ...} record
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) up to the reply
    reply: str | None = None  # the first assistant turn after the prompt, if any

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def message_dicts(self) -> list[dict[str, str]]:
        """The OpenAI `messages` to send: the conversation, or the text as one user turn."""
        if self.messages is None:
            return [{"role": "user", "content": self.text or ""}]
        return [{"role": r, "content": c} for r, c in self.messages]

    def prompt_texts(self) -> list[str]:
        """The text the prompt is made of (without any chat template), for counting tokens."""
        return [self.text or ""] if self.messages is None else [c for _, c in self.messages]


def read_prompt_file(path: Path, field: str = "workload.prompt_file") -> list[FilePrompt]:
    """Parse every non-blank line; raise PromptFileError at the first bad one (`field`: the
    spec field that named the file, for a missing one)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        raise PromptFileError(f"file {path} does not exist: check {field}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise PromptFileError(f"prompt file {path} is not readable UTF-8 text ({e}): "
                              "fix the file") from e
    records = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            records.append(_record(line, number, path))
    if not records:
        raise PromptFileError(f"prompt file {path} has no records: add one JSON object per line")
    return records


def _record(line: str, number: int, path: Path) -> FilePrompt:
    where = f"prompt file {path} line {number}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise PromptFileError(f"{where}: not JSON ({e.msg}): write one JSON object per "
                              "line") from e
    if not isinstance(data, dict):
        raise PromptFileError(f"{where}: a JSON {type(data).__name__}, not an object: write "
                              '{"prompt": ...}, {"conversations": [...]} or {"messages": [...]}')
    if "prompt" in data:
        text = data["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise PromptFileError(f'{where}: "prompt" must be non-empty text')
        return FilePrompt(number, text=text)
    if "conversations" in data:
        turns = _turns(data["conversations"], "from", "value", where, _SHAREGPT_ROLES)
    elif "messages" in data:
        turns = _turns(data["messages"], "role", "content", where, {r: r for r in _ROLES})
    else:
        raise PromptFileError(f'{where}: no "prompt", "conversations" or "messages" field: '
                              "use one of them")
    return _conversation(turns, number, where)


def _turns(value, speaker_key: str, text_key: str, where: str,
           roles: dict[str, str]) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise PromptFileError(f"{where}: the conversation must be a non-empty list of turns")
    turns = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict):
            raise PromptFileError(f"{where}: turn {i} is not an object: write "
                                  f'{{"{speaker_key}": ..., "{text_key}": ...}}')
        speaker, text = turn.get(speaker_key), turn.get(text_key)
        role = roles.get(str(speaker).lower()) if speaker is not None else None
        if role is None:
            raise PromptFileError(f'{where}: turn {i} has "{speaker_key}" {speaker!r}: use one '
                                  f"of {', '.join(sorted(set(roles)))}")
        if not isinstance(text, str):
            raise PromptFileError(f'{where}: turn {i} has no text in "{text_key}": add it')
        turns.append((role, text))
    return turns


def _conversation(turns: list[tuple[str, str]], number: int, where: str) -> FilePrompt:
    reply_at = next((i for i, (role, _) in enumerate(turns) if role == "assistant"), len(turns))
    prompt = tuple(turns[:reply_at])
    if not any(role == "user" and text.strip() for role, text in prompt):
        raise PromptFileError(f"{where}: no user turn with text before the first assistant "
                              "turn: the prompt would be empty")
    reply = turns[reply_at][1] if reply_at < len(turns) else None
    return FilePrompt(number, messages=prompt, reply=reply)
