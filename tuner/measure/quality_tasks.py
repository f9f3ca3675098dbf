"""The quality gate's task checks: a JSONL of prompts with their expected answers,

    {"prompt": "2 + 2 =", "answer": "4"}
    {"messages": [{"role": "user", "content": "Capital of France?"}], "answer": "Paris"}

scored by exact match (the answer text, whitespace trimmed) or by a regular expression searched
in the answer. Prompts are read as a prompt file's (`tuner.measure.prompt_file`); every error
names the line and the fix, in one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tuner.measure.client import Prompt
from tuner.measure.prompt_file import FilePrompt, PromptFileError, read_prompt_file
from tuner.measure.quality import Answer


@dataclass(frozen=True)
class Task:
    prompt: FilePrompt
    answer: str  # the expected answer, or the pattern to search for


def read_tasks(path: Path, match: str = "exact") -> list[Task]:
    """Every record of the task file with its answer; raises PromptFileError naming the line."""
    prompts = read_prompt_file(path, field="quality.tasks.file")
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    tasks = []
    for p in prompts:
        answer = json.loads(lines[p.line - 1]).get("answer")
        where = f"task file {path} line {p.line}"
        if not isinstance(answer, str) or not answer.strip():
            raise PromptFileError(f'{where}: no "answer" text: add the expected answer')
        if match == "regex":
            try:
                re.compile(answer)
            except re.error as e:
                raise PromptFileError(f"{where}: the answer is not a regular expression ({e}): "
                                      "fix it or use match exact") from e
        tasks.append(Task(p, answer))
    return tasks


def task_prompts(tasks: list[Task], api: str) -> list[Prompt]:
    """The requests of the tasks: text for completions, messages for chat."""
    out = []
    for t in tasks:
        if api != "chat" and t.prompt.is_chat:
            raise PromptFileError(f"task file line {t.prompt.line} is a conversation, which only "
                                  "the chat API takes: set workload.api: chat")
        out.append(Prompt(text=t.prompt.text,
                          messages=t.prompt.message_dicts() if api == "chat" else None))
    return out


def solved(task: Task, answer: Answer, match: str) -> bool:
    if answer.error is not None:
        return False
    if match == "regex":
        return re.search(task.answer, answer.text) is not None
    return answer.text.strip() == task.answer.strip()


def accuracy(tasks: list[Task], answers: list[Answer], match: str) -> float:
    """The share of tasks whose answer is right."""
    if not tasks:
        return 1.0
    return sum(solved(t, a, match) for t, a in zip(tasks, answers, strict=True)) / len(tasks)
