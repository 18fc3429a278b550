"""The metrics layer: the four published metrics, computed from token statistics.

The GROGU family (:mod:`.grogu`, pure functions over tensors; its names are also this package's, as the
old module ``grogu.metrics`` had them), ΔSePer (:mod:`.seper`), ACU (:mod:`.acu`), the Influence Score
(:mod:`.influence`) with its attribution methods (:mod:`.attribution`), and the probability scales of metric
values (:mod:`.scales`); their names and defaults without tensor code (:mod:`.defaults`). It imports
the core and runtime layers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.exports import lazy_names

if TYPE_CHECKING:  # what static tools see; at run time each name is imported from .grogu on first use
    from .grogu import (  # noqa: F401
        ADAPTIVE_KEY_QUANTILE,
        ALPHA,
        CHANGE_KEY_QUANTILE,
        COPY_NGRAM,
        DEFAULT_METRIC,
        GROUNDED_DEFAULT_METRIC,
        GROUNDED_METRICS,
        METRIC_NAMES,
        METRICS,
        TOP_K_FRAC,
        AnswerStats,
        MetricFn,
        MetricValue,
        compute,
        copied_mask,
        copy_continuation_mask,
        copy_support_weights,
        default_metric,
        entropy,
        entropy_change,
        grogu_difference,
        key_entropy,
        key_perplexity,
        key_token_mask,
        metric_name,
        perplexity,
        quantile_key_mask,
        relative_key_mask,
        top_k_count,
        top_k_mask,
        ungrounded_key_entropy,
        ungrounded_key_mask,
        weighted_mean,
    )

#: the names of the old module ``grogu.metrics`` (the GROGU family), each from :mod:`.grogu` on first use,
#: so ``from grogu.metrics import defaults`` loads no tensor code (a module's name imports that module)
__all__ = [
    "ALPHA",
    "COPY_NGRAM",
    "DEFAULT_METRIC",
    "GROUNDED_DEFAULT_METRIC",
    "GROUNDED_METRICS",
    "METRIC_NAMES",
    "TOP_K_FRAC",
    "default_metric",
    "metric_name",
    "ADAPTIVE_KEY_QUANTILE",
    "CHANGE_KEY_QUANTILE",
    "top_k_count",
    "top_k_mask",
    "key_token_mask",
    "ungrounded_key_mask",
    "copied_mask",
    "quantile_key_mask",
    "relative_key_mask",
    "copy_continuation_mask",
    "copy_support_weights",
    "weighted_mean",
    "entropy",
    "key_entropy",
    "perplexity",
    "key_perplexity",
    "ungrounded_key_entropy",
    "grogu_difference",
    "entropy_change",
    "MetricValue",
    "AnswerStats",
    "MetricFn",
    "METRICS",
    "compute",
]
__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(__all__, ".grogu"))
