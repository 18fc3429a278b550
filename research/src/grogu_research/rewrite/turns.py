"""Conversational turns: the input of the rewrite pairs, read from JSONL, and the rewriting prompt."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

DEFAULT_INSTRUCTION = (
    "Rewrite the last question of the conversation as a standalone search query that can be understood "
    "without the conversation: resolve pronouns and references using the earlier turns and keep the "
    "meaning. Reply with the rewritten question only.\n\n"
    "Conversation:\n{history}\n\nLast question: {question}"
)
NO_HISTORY = "(no earlier turns)"


@dataclass
class Turn:
    """One conversational turn.

    question: the current (possibly context-dependent) question; the target LLM answers it.
    history: earlier utterances, oldest first: strings, or mappings with ``content`` and optional
        ``role`` (rendered "Role: content"). May be empty.
    candidates: rewrites to rank; None means "generate them with the rewriter LLM".
    id: any identifier, carried to scores.jsonl.
    """

    question: str
    history: list[Any] = field(default_factory=list)
    candidates: list[str] | None = None
    id: Any = None

    def __post_init__(self) -> None:
        where = f"turn {self.id!r}" if self.id is not None else "turn"
        if not isinstance(self.question, str):
            raise TypeError(f"{where}: question must be a str, got {type(self.question).__name__}")
        if not self.question.strip():
            raise ValueError(f"{where}: the question is empty; every turn needs a current question")
        self.question = self.question.strip()
        if isinstance(self.history, (str, bytes)) or not isinstance(self.history, Iterable):
            raise TypeError(f"{where}: history must be a list of utterances (strings or {{'role', 'content'}})")
        self.history = list(self.history)
        for i, h in enumerate(self.history):
            if isinstance(h, Mapping):
                if not isinstance(h.get("content"), str):
                    raise TypeError(f"{where}: history item {i} is a mapping without a string 'content'")
            elif not isinstance(h, str):
                raise TypeError(f"{where}: history item {i} must be a str or a {{'role', 'content'}} mapping")
        if self.candidates is not None:
            if isinstance(self.candidates, (str, bytes)) or not isinstance(self.candidates, Iterable):
                raise TypeError(f"{where}: candidates must be a list of strings or None")
            self.candidates = list(self.candidates)
            if not all(isinstance(c, str) for c in self.candidates):
                raise TypeError(f"{where}: every candidate rewrite must be a str")


def turn_from_dict(item: Mapping[str, Any], position: int | None = None) -> Turn:
    """A :class:`Turn` from ``{"question", "history"?, "candidates"?, "id"?}``."""
    if not isinstance(item, Mapping) or "question" not in item:
        where = f"line {position}" if position is not None else "turn"
        raise ValueError(f"{where}: each turn needs a 'question' (and optionally 'history', 'candidates', 'id')")
    return Turn(
        question=item["question"],
        history=item.get("history") or [],
        candidates=item.get("candidates"),
        id=item.get("id", position),
    )


def read_turns(path: str) -> list[Turn]:
    """Turns from a JSONL file, one ``{"question", "history"?, "candidates"?, "id"?}`` object a line
    (the id defaults to the line number)."""
    turns = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    turns.append(turn_from_dict(json.loads(line), n))
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{path}:{n}: {exc}") from exc
    return turns


def render_history(history: Sequence[Any]) -> str:
    """Earlier utterances, one a line ("Role: content" for mappings with a role)."""
    lines = []
    for h in history:
        if isinstance(h, Mapping):
            role = h.get("role")
            lines.append(f"{str(role).capitalize()}: {h['content'].strip()}" if role else h["content"].strip())
        else:
            lines.append(h.strip())
    return "\n".join(lines) if lines else NO_HISTORY


def rewrite_prompt(turn: Turn, instruction: str = DEFAULT_INSTRUCTION) -> str:
    """The rewriting instruction for a turn (the DPO/SFT ``prompt``; the user message the candidates
    are generated from). ``instruction`` is a ``str.format`` template with {history} and {question}."""
    return instruction.format(history=render_history(turn.history), question=turn.question)


__all__ = [
    "Turn",
    "turn_from_dict",
    "read_turns",
    "render_history",
    "rewrite_prompt",
    "DEFAULT_INSTRUCTION",
    "NO_HISTORY",
]
