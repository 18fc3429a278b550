"""The harness's SQuAD data: paragraphs and questions, seeded samples, random paragraphs."""

from __future__ import annotations

import json
import random
from typing import Any, Sequence

from grogu_research.experiments.common.answers import holds_answer
from grogu_research.testing import shared_data_path


def squad_data() -> tuple[list[dict], list[dict]]:
    """SQuAD v1.1 dev as (paragraphs, questions). paragraphs[i] = {'id', 'title', 'text'} (all 2,067,
    file order); questions = {'id', 'question', 'answers', 'gold'} with ``gold`` a paragraph id."""
    with open(shared_data_path("squad-v1.1-dev", "dev-v1.1.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    paragraphs, questions = [], []
    for article in data:
        for p in article["paragraphs"]:
            pid = len(paragraphs)
            paragraphs.append({"id": pid, "title": article["title"].replace("_", " "), "text": p["context"]})
            for qa in p["qas"]:
                answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
                questions.append({"id": qa["id"], "question": qa["question"], "answers": answers, "gold": pid})
    return paragraphs, questions


def sample(items: Sequence[Any], limit: int | None, seed: int) -> list[Any]:
    """``limit`` items drawn at random (seeded), or all of them in order when limit is None."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return random.Random(seed).sample(list(items), limit)


def squad_questions(limit: int | None, seed: int) -> tuple[list[dict], list[dict]]:
    """(all paragraphs, ``limit`` questions sampled with ``seed``)."""
    paragraphs, questions = squad_data()
    return paragraphs, sample(questions, limit, seed)


def random_paragraph(rng: random.Random, paragraphs: Sequence[dict], exclude: set[int], answers: Sequence[str]) -> int:
    """A random paragraph id outside ``exclude`` that holds no answer string."""
    while True:
        pid = rng.randrange(len(paragraphs))
        if pid not in exclude and not holds_answer(paragraphs[pid]["text"], answers):
            return pid


__all__ = ["squad_data", "sample", "squad_questions", "random_paragraph"]
