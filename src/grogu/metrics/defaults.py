"""The metrics' names and default settings, with no tensor code: what the command line, the settings
objects and the service's request models read without loading torch. Each metric's module re-exports
its own (``grogu.metrics.influence.METHODS`` ...)."""

from __future__ import annotations

#: GROGU: the key-token threshold alpha (nats) and the fallback fraction K (the paper's defaults)
ALPHA = 0.05
TOP_K_FRAC = 0.1
#: n of the n-grams that mark answer tokens copied from the document (tuned, issue #8)
COPY_NGRAM = 5
#: the paper's default variant
DEFAULT_METRIC = "key_entropy"
#: every GROGU variant (grogu.metrics.grogu.METRICS computes them)
METRIC_NAMES = (
    "key_entropy",
    "entropy",
    "ppl",
    "key_ppl",
    # small-model variants (issue #8; docs/results.md, "Small models: utility variants")
    "key_entropy_adaptive",
    "entropy_change",
    "adaptive_entropy_change",
    "copy_aware_key_entropy",
    "copy_aware_entropy_change",
)
#: the metrics computed from the grounded statistics alone (no ``h_u``): the ones a target that cannot
#: teacher-force (``ServerTarget(api="chat")``, ``grounded_only``) can give
GROUNDED_METRICS = ("entropy", "ppl")
#: the default metric of a grounded-only target (the context mode's default confidence, ``context_metric``)
GROUNDED_DEFAULT_METRIC = "ppl"

#: Influence Score: the methods that need only forward passes (grogu.metrics.attribution), and all of them
FORWARD_METHODS = ("leave_one_out_logprob", "contextcite")
INFLUENCE_METHODS = ("exact", "ablation", "auto") + FORWARD_METHODS
#: the longest answer per context where none is given (scorer, CLI, handlers, service)
INFLUENCE_MAX_NEW_TOKENS = 64
#: ΔSePer: the longest sampled answer where none is given (the scorer, the command line, the service)
SEPER_MAX_NEW_TOKENS = 32


def default_metric(grounded_only: bool) -> str:
    """The metric a scorer uses when none is given: the paper's KeyEntropy, or perplexity for a target
    that cannot teacher-force (a chat API), where KeyEntropy cannot be computed."""
    return GROUNDED_DEFAULT_METRIC if grounded_only else DEFAULT_METRIC


def metric_name(name: str) -> str:
    """Canonical metric name: 'KeyEntropy', 'key-entropy', 'key_entropy' all give 'key_entropy'."""
    if not isinstance(name, str):
        raise TypeError(f"metric must be a string, got {type(name).__name__}")
    squashed = name.lower().replace("_", "").replace("-", "")
    for canonical in METRIC_NAMES:
        if canonical.replace("_", "") == squashed:
            return canonical
    raise ValueError(f"unknown metric {name!r}; choose one of {sorted(METRIC_NAMES)}")
