"""Candidate rewrites: sampled from a local LLM in one batched engine call, cleaned and deduplicated."""

from __future__ import annotations

import re
from typing import Any, Sequence

from grogu.core.prompts import chat_ids
from grogu_research.rewrite.turns import DEFAULT_INSTRUCTION, Turn, rewrite_prompt

DEFAULT_N_CANDIDATES = 8


_PREFIX = re.compile(
    r"^\s*(?:\**\s*)?(?:rewritten question|rewritten query|standalone question|rewrite|query|"
    r"question|answer)\s*\**\s*[:：-]\s*\**\s*",
    re.IGNORECASE,
)


def clean_rewrite(text: str) -> str:
    """A generated rewrite made usable: the first non-empty line, without a leading "Rewrite:"-style
    label and without surrounding quotes. May return "" (the candidate is then dropped)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = _PREFIX.sub("", line).strip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'`":
        line = line[1:-1].strip()
    return line


def text_key(text: str) -> str:
    """What makes two rewrites the same: the text with whitespace collapsed, case-folded."""
    return " ".join(text.split()).casefold()


def dedupe_candidates(question: str, candidates: Sequence[str], include_original: bool = True) -> list[str]:
    """Unique non-empty candidates in first-seen order; identical means equal after collapsing
    whitespace and case. With ``include_original`` the question itself comes first."""
    out: list[str] = []
    seen: set[str] = set()
    for c in ([question] if include_original else []) + [" ".join(c.split()) for c in candidates]:
        key = text_key(c)
        if key and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def generate_candidates(
    rewriter: Any,
    turns: Sequence[Turn],
    n: int = DEFAULT_N_CANDIDATES,
    *,
    temperature: float = 0.8,
    max_new_tokens: int = 48,
    seed: int = 0,
    instruction: str = DEFAULT_INSTRUCTION,
) -> list[list[str]]:
    """``n`` sampled rewrites per turn (cleaned with :func:`clean_rewrite`, not yet deduplicated),
    all turns in one batched engine call. ``rewriter``: an Engine, a model name/path or a loaded
    (model, tokenizer) pair. Reproducible for a given seed and input."""
    from grogu.runtime.engine import get_engine

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (candidates per turn) must be a positive int, got {n!r}")
    if not turns:
        return []
    engine = get_engine(rewriter)
    prompts = [
        chat_ids(engine.tokenizer, rewrite_prompt(t, instruction), plain_suffix="\nRewritten question:") for t in turns
    ]
    gens = engine.generate([p for p in prompts for _ in range(n)], max_new_tokens, temperature=temperature, seed=seed)
    texts = [clean_rewrite(g.text) for g in gens]
    return [texts[i * n : (i + 1) * n] for i in range(len(turns))]


def candidates_for_turns(
    turns: Sequence[Turn],
    rewriter: Any,
    n: int = DEFAULT_N_CANDIDATES,
    *,
    include_original: bool = True,
    temperature: float = 0.8,
    max_new_tokens: int = 48,
    seed: int = 0,
    instruction: str = DEFAULT_INSTRUCTION,
) -> tuple[list[list[str]], list[list[str]], set[int]]:
    """(raw candidates, deduplicated candidates, indices of the turns whose candidates were sampled) of
    each turn: its given candidates, else ``n`` sampled from ``rewriter`` (all such turns in one call).
    A ValueError names a turn left without any non-empty candidate."""
    todo = [i for i, t in enumerate(turns) if t.candidates is None]
    raw = {i: list(t.candidates) for i, t in enumerate(turns) if t.candidates is not None}
    if todo:
        sampled = generate_candidates(
            rewriter,
            [turns[i] for i in todo],
            n,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            seed=seed,
            instruction=instruction,
        )
        raw.update(zip(todo, sampled))
    raw_lists = [raw[i] for i in range(len(turns))]
    candidates = [dedupe_candidates(t.question, r, include_original) for t, r in zip(turns, raw_lists)]
    for turn, c in zip(turns, candidates):
        if not c:
            raise ValueError(
                f"turn {turn.id!r} has no non-empty candidate rewrite (pass include_original=True "
                "to rank the question itself)"
            )
    return raw_lists, candidates, set(todo)


__all__ = [
    "clean_rewrite",
    "text_key",
    "dedupe_candidates",
    "generate_candidates",
    "candidates_for_turns",
    "DEFAULT_N_CANDIDATES",
]
