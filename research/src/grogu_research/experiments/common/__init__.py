"""Shared pieces of the evaluation harness, one module each: answer checks (:mod:`.answers`), statistics
(:mod:`.stats`), data (:mod:`.data`), models and scoring (:mod:`.scoring`), outputs (:mod:`.outputs`).

Answer strings are compared after SQuAD's normalisation (lower case, no punctuation, no articles
a/an/the, single spaces). A model's answer is *correct* when it contains a gold answer string as whole
words (so exact match counts too; punctuation is dropped or read as a space, so "Six-time" holds
"Six"). A paragraph *holds an answer* when a gold answer string occurs in it, normalised or raw
(case-insensitive), even inside a longer word: the strict test used to pick distractors that cannot
answer the question.
"""

from __future__ import annotations

from grogu.runtime.models import DEFAULT_MODEL
from grogu_research.experiments.common.answers import (
    answer_tokens,
    best_over,
    exact_match,
    holds_answer,
    is_correct,
    normalize_answer,
    normalize_spaced,
    rouge_l,
    token_f1,
)
from grogu_research.experiments.common.data import random_paragraph, sample, squad_data, squad_questions
from grogu_research.experiments.common.outputs import (
    METRIC_LABELS,
    Clock,
    bar_plot,
    clean,
    finish,
    fmt,
    fmt_p,
    header,
    md_table,
    model_names,
)
from grogu_research.experiments.common.scoring import (
    GROGU_METRICS,
    build_scorer,
    chunks,
    model_list,
    one_model,
    progress,
    score_contexts,
    set_threads,
)
from grogu_research.experiments.common.stats import (
    binary_scores,
    kendall_tau,
    pearson,
    proportion_ci,
    sign_test,
    win_counts,
)

__all__ = [
    "DEFAULT_MODEL",
    "GROGU_METRICS",
    "METRIC_LABELS",
    "normalize_answer",
    "normalize_spaced",
    "is_correct",
    "holds_answer",
    "answer_tokens",
    "exact_match",
    "token_f1",
    "rouge_l",
    "best_over",
    "win_counts",
    "proportion_ci",
    "sign_test",
    "kendall_tau",
    "binary_scores",
    "pearson",
    "squad_data",
    "sample",
    "squad_questions",
    "random_paragraph",
    "model_list",
    "one_model",
    "build_scorer",
    "score_contexts",
    "set_threads",
    "progress",
    "chunks",
    "clean",
    "fmt",
    "fmt_p",
    "md_table",
    "model_names",
    "header",
    "finish",
    "Clock",
    "bar_plot",
]
