"""Checks of the public API's inputs and settings, shared by the core, the command line and the
LlamaIndex and LangChain integrations, so that a bad value is the same clear error everywhere.

Inputs (the query, the documents) of the wrong type are a ``TypeError``, empty or otherwise unusable
ones a ``ValueError``. A bad *setting* (a count, a fraction, a threshold, a temperature...) is a
``ValueError`` whatever is wrong with it: the wrong type, a bool where a number is expected (``True``
is not a count), NaN, an infinity or a value out of range. Every message names the argument and the
value it got. Each check returns the value in its canonical form (a stripped query, an ``int``, a
``float``), so callers store what the check returned.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from .prompts import Document, as_document, check_text

#: the smallest sampling temperature: logits / T must stay finite in float32 (logits reach ~1e2)
MIN_TEMPERATURE = 1e-3
#: absurd counts, refused everywhere (a service sets lower limits: grogu serve --help)
MAX_SAMPLES = 1_000
MAX_ABLATIONS = 10_000


def check_query(query: Any) -> str:
    """The query, stripped; a TypeError for a non-string and a ValueError for an empty one."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    check_text("query", query)
    if not query.strip():
        raise ValueError("query is empty or whitespace: there is nothing to ground")
    return query.strip()


def check_documents(documents: Any) -> list[Document]:
    """The documents as :class:`~grogu.core.prompts.Document` objects, in input order (none dropped: an
    empty text is a document too); a TypeError naming the position of anything that is not one."""
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Iterable):
        raise TypeError(f"documents must be a list of documents, got {type(documents).__name__}")
    return [as_document(d, i) for i, d in enumerate(documents)]


def check_document_list(documents: Any) -> tuple[list[Any], list[Document]]:
    """(the documents as given, as a list; the same as :class:`~grogu.core.prompts.Document` objects). The
    input is read once, so a generator gives its documents too instead of coming back empty."""
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Iterable):
        raise TypeError(f"documents must be a list of documents, got {type(documents).__name__}")
    originals = list(documents)
    return originals, check_documents(originals)


def check_pairs(name: str, items: Any, what: str) -> list[tuple[Any, Any]]:
    """``items`` as a list of 2-tuples (e.g. (query, documents) pairs of a batch call); a TypeError
    naming the position of anything else, instead of an unpacking error deep inside."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list of {what} pairs, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (str, bytes)) or not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"{name}[{i}] must be a {what} pair, got {item!r:.80}")
        out.append((item[0], item[1]))
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """An int (not a bool, not a float such as 2.0) that is at least ``minimum``."""
    if not _is_int(value):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_positive_int(name: str, value: Any) -> int:
    """An int >= 1 (a count: max_new_tokens, n_samples, n_ablations, ...)."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def check_top_n(value: Any, name: str = "top_n") -> int | None:
    """None (keep every document) or a positive int. 0 is an error, not an empty result: a caller
    who asks for no documents has made a mistake that would otherwise pass silently."""
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int or None (keep all), got {value!r}")
    return int(value)


def check_float(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    min_inclusive: bool = True,
    max_inclusive: bool = True,
) -> float:
    """A finite real number (int or float, not a bool, not NaN or an infinity) within the bounds."""
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    low_ok = minimum is None or (value >= minimum if min_inclusive else value > minimum)
    high_ok = maximum is None or (value <= maximum if max_inclusive else value < maximum)
    if not (low_ok and high_ok):
        left = "" if minimum is None else ("[" if min_inclusive else "(") + f"{minimum:g}"
        right = "" if maximum is None else f"{maximum:g}" + ("]" if max_inclusive else ")")
        if minimum is None:
            where = f"<{'=' if max_inclusive else ''} {maximum:g}"
        elif maximum is None:
            where = f">{'=' if min_inclusive else ''} {minimum:g}"
        else:
            where = f"in {left}, {right}"
        raise ValueError(f"{name} must be {where}, got {value!r}")
    return float(value)


def check_threshold(value: Any, name: str = "threshold") -> float | None:
    """None (no threshold) or a finite number (a utility, e.g. -1.5 nats). NaN would keep nothing and
    an infinity everything or nothing, silently: both are errors."""
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number (a utility, e.g. -1.5 nats) or None, got {value!r}")
    return float(value)


def check_relevance(values: Any, n_documents: int) -> list[float]:
    """The retriever's relevance scores: one finite number per document."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != n_documents:
        raise ValueError(f"relevance must hold one score per document ({n_documents})")
    if not all(_is_number(v) and math.isfinite(v) for v in values):
        raise ValueError("relevance scores must be finite numbers")
    return [float(v) for v in values]


def check_continuations(continuations: Any, n_prompts: int) -> list[list[int]]:
    """Teacher-forced continuations: one token-id list per prompt (an empty one gives empty statistics)."""
    if isinstance(continuations, (str, bytes)) or not isinstance(continuations, Sequence):
        raise TypeError("continuations must be a list of token-id lists, one per prompt")
    conts = [[int(t) for t in c] for c in continuations]
    if len(conts) != n_prompts:
        raise ValueError(f"{n_prompts} prompts but {len(conts)} continuations")
    return conts


def check_alpha(value: Any, name: str = "alpha") -> float:
    """The key-token threshold on |H_g - H_u| in nats: finite and >= 0."""
    return check_float(name, value, minimum=0.0)


def check_fraction(name: str, value: Any) -> float:
    """A fraction in (0, 1] (e.g. top_k_frac)."""
    return check_float(name, value, minimum=0.0, maximum=1.0, min_inclusive=False)


def check_probability(name: str, value: Any) -> float:
    """A probability in [0, 1] (e.g. an entailment threshold tau)."""
    return check_float(name, value, minimum=0.0, maximum=1.0)


def check_positive_float(name: str, value: Any) -> float:
    """A finite number > 0 (e.g. lasso_alpha)."""
    return check_float(name, value, minimum=0.0, min_inclusive=False)


def check_temperature(value: Any, name: str = "temperature", *, allow_none: bool = False) -> float | None:
    """A sampling temperature: finite and >= :data:`MIN_TEMPERATURE` (None = greedy decoding where
    ``allow_none``). A smaller one overflows the scaled logits: it cannot be sampled."""
    if value is None and allow_none:
        return None
    if value is None:
        raise ValueError(f"{name} must be a finite number > 0, got None")
    value = check_positive_float(name, value)
    if value < MIN_TEMPERATURE:
        raise ValueError(
            f"{name} must be >= {MIN_TEMPERATURE:g}, got {value!r}: a smaller temperature overflows "
            f"the scaled logits and cannot be sampled (use greedy decoding instead)"
        )
    return value


def check_count(name: str, value: Any, maximum: int) -> int:
    """A positive int that is at most ``maximum`` (n_samples, n_ablations: work a call would do)."""
    value = check_positive_int(name, value)
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def check_seed(value: Any, name: str = "seed", *, allow_none: bool = True) -> int | None:
    """An int seed (None: a fresh one each time, where allowed); a TypeError for anything else."""
    if value is None and allow_none:
        return None
    if not _is_int(value):
        raise TypeError(
            f"{name} must be an int{' or None' if allow_none else ''}, got {value!r} ({type(value).__name__})"
        )
    return int(value)


def check_masks(masks: Any, k: int, name: str = "masks") -> Any:
    """Ablation masks for k documents as a [m, k] numpy bool array (m >= 1; row j, column i: document i
    kept in ablation j). Accepts bools or the numbers 0 and 1; anything else (other numbers, NaN, a
    ragged or wrongly shaped array) is a ValueError naming the problem."""
    import numpy as np

    try:
        arr = np.asarray(masks)
    except (ValueError, TypeError) as exc:  # ragged rows
        raise ValueError(f"{name} must be an [m, {k}] array of 0/1 or bools: {exc}") from exc
    if arr.dtype == object or arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != k:
        raise ValueError(
            f"{name} must be an [m, {k}] array of 0/1 or bools with m >= 1 "
            f"(one column per document), got shape {arr.shape}"
        )
    if arr.dtype != bool:
        if not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"{name} must hold 0/1 or bools, got dtype {arr.dtype}")
        if np.isnan(arr.astype(np.float64)).any() or not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must hold only 0/1 or bools (no NaN or other numbers)")
    return arr.astype(bool)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """One of ``choices``."""
    choices = tuple(choices)
    if not any(value == c and type(value) is type(c) for c in choices):
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


__all__ = [
    "check_query",
    "check_text",
    "check_count",
    "check_documents",
    "check_document_list",
    "check_pairs",
    "check_int",
    "check_positive_int",
    "check_top_n",
    "check_float",
    "check_threshold",
    "check_alpha",
    "check_fraction",
    "check_probability",
    "check_positive_float",
    "check_temperature",
    "check_seed",
    "check_choice",
    "check_masks",
    "check_influence_items",
]


def check_influence_items(items: Any) -> list[tuple[Any, Any, Any]]:
    """``InfluenceScorer.score_batch``'s items as (query, documents, answer-or-None) triples; a pair means no answer."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(
            f"items must be a list of (query, documents, answer-or-None) triples, got {type(items).__name__}"
        )
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (tuple, list)) and len(item) == 2:
            item = (*item, None)
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise TypeError(f"items[{i}] must be a (query, documents, answer-or-None) triple, got {item!r:.80}")
        out.append(tuple(item))
    return out
