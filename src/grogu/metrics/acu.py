"""ACU — accumulated context usage (Hagström et al., ACL 2025, DRUID), for claim verification.

For each target label token t (default True / None / False) with P taken from the next-token
distribution after the prompt, with (C, E) and without (C) the evidence:
ΔP(t) = (P(t|C,E) - P(t|C)) / (1 - P(t|C)) if P(t|C,E) >= P(t|C), else (P(t|C,E) - P(t|C)) / P(t|C).
ACU = (1/|T|) sum_t D(t, S_E) * ΔP(t), D = +1 for the label the evidence's stance should raise, -1 for
the others. ACU lies in [-1, 1]; higher = the model moved towards what the evidence says.
Each label's probability sums its variants with and without a leading space (as the DRUID code does).
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping, Sequence

from ..core.prompts import chat_ids, check_text
from ..core.target import NEXT_TOKEN, NEXT_TOKEN_MESSAGE, require
from ..runtime.engine import get_engine
from ..runtime.models import DEFAULT_MODEL
from .results import ACUResult  # noqa: F401 - this metric's result, defined without tensor code

#: stance of the evidence -> the label it should raise
STANCES = {
    "supports": "True",
    "support": "True",
    "true": "True",
    "refutes": "False",
    "refute": "False",
    "false": "False",
    "insufficient": "None",
    "not enough": "None",
    "not enough info": "None",
    "none": "None",
    "nei": "None",
}


def delta_p(p_with: float, p_without: float) -> float:
    """Normalised change of one label's probability, in [-1, 1]."""
    diff = p_with - p_without
    if diff >= 0:
        return diff / (1 - p_without) if p_without < 1 else 0.0
    return diff / p_without


def acu(p_with: Mapping[str, float], p_without: Mapping[str, float], raised: str) -> float:
    """ACU from label probabilities with/without evidence; ``raised`` is the label the stance raises."""
    if raised not in p_with:
        raise ValueError(f"stance label {raised!r} is not one of the labels {sorted(p_with)}")
    return sum((1 if t == raised else -1) * delta_p(p_with[t], p_without[t]) for t in p_with) / len(p_with)


DEFAULT_PROMPT_WITH = (
    "Evidence: {evidence}\n\nClaim: {claim}\n\nBased on the evidence, is the claim True, False, "
    "or is there not enough information (None)? Answer with one word: True, False or None."
)
DEFAULT_PROMPT_WITHOUT = (
    "Claim: {claim}\n\nIs the claim True, False, or is there not enough information (None)? "
    "Answer with one word: True, False or None."
)


def _check_prompt(name: str, prompt: Any, fields: tuple[str, ...]) -> None:
    """A prompt template must be a str with each of ``fields`` (else the claim or the evidence would
    silently be left out of what the model reads)."""
    if not isinstance(prompt, str):
        raise TypeError(f"{name} must be a str template, got {type(prompt).__name__}")
    missing = [f for f in fields if f not in prompt]
    if missing:
        raise ValueError(f"{name} must contain {' and '.join(fields)}; {', '.join(missing)} missing in {prompt!r:.120}")


class ACUScorer:
    """ACU of evidence for claims, for one target LLM.

    Args:
        model: grogu Engine, model name/path/hub id, or (model, tokenizer) pair.
        labels: the label words (default True, None, False); each (with and without a leading space)
            must be a single token of the tokenizer, else a ValueError names the word and its closest tokens.
        prompt_with / prompt_without: templates with ``{claim}`` (and ``{evidence}``).
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        *,
        labels: Sequence[str] = ("True", "None", "False"),
        prompt_with: str = DEFAULT_PROMPT_WITH,
        prompt_without: str = DEFAULT_PROMPT_WITHOUT,
        device: str | None = None,
        dtype: str | None = None,
    ) -> None:
        if isinstance(labels, str) or not isinstance(labels, Sequence):
            raise TypeError(f"labels must be a list of label words, got {type(labels).__name__}")
        for i, lab in enumerate(labels):
            if not isinstance(lab, str) or not lab.strip():
                raise ValueError(f"label {i} must be a non-empty str, got {lab!r}")
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise ValueError(f"ACU needs at least two distinct label words, got {list(labels)!r}")
        _check_prompt("prompt_with", prompt_with, ("{claim}", "{evidence}"))
        _check_prompt("prompt_without", prompt_without, ("{claim}",))
        self.target = get_engine(model, device=device, dtype=dtype)
        require(self.target, NEXT_TOKEN, NEXT_TOKEN_MESSAGE)  # before its tokenizer is needed
        self.labels = list(labels)
        self.prompt_with, self.prompt_without = prompt_with, prompt_without
        self.label_tokens = {lab: self._variants(lab) for lab in self.labels}

    def _variants(self, label: str) -> list[int]:
        tok = self.target.tokenizer
        ids = []
        for variant in dict.fromkeys((label, " " + label)):
            enc = tok.encode(variant, add_special_tokens=False)
            if len(enc) == 1:
                ids.append(enc[0])
        if not ids:
            vocab = [t for t in tok.get_vocab() if isinstance(t, str)]
            close = difflib.get_close_matches(label, vocab, n=5, cutoff=0.5) + difflib.get_close_matches(
                "Ġ" + label, vocab, n=3, cutoff=0.5
            )
            raise ValueError(
                f"label word {label!r} is not a single token of this tokenizer (with or without a "
                f"leading space); closest tokens: {close}"
            )
        return ids

    def _prompt(self, text: str) -> list[int]:
        ids = chat_ids(self.target.tokenizer, text, plain_suffix="\nAnswer:")
        window = getattr(self.target, "max_context_tokens", None)
        if window is not None and len(ids) > window:
            raise ValueError(
                f"an ACU prompt takes {len(ids)} tokens (claim and evidence in the template); the "
                f"model's context window holds {window}: shorten the evidence"
            )
        return ids

    def _raised(self, stance: str) -> str:
        if not isinstance(stance, str):
            raise TypeError(f"stance must be a str, got {type(stance).__name__}")
        key = stance.strip().lower().replace("_", " ")
        raised = STANCES.get(key, stance if stance in self.labels else None)
        if raised not in self.labels:
            raise ValueError(f"unknown stance {stance!r}: use SUPPORTS, REFUTES, NOT ENOUGH or one of {self.labels}")
        return raised

    def score_batch(self, items: Sequence[tuple[str, str, str]]) -> list[ACUResult]:
        """ACU of many (claim, evidence, stance) triples; two batched next-token passes in all."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise TypeError(f"items must be a list of (claim, evidence, stance) triples, got {type(items).__name__}")
        checked = []
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 3:
                raise TypeError(f"items[{i}] must be a (claim, evidence, stance) triple, got {item!r:.80}")
            claim, evidence, stance = item
            if not isinstance(claim, str) or not isinstance(evidence, str):
                raise TypeError("claim and evidence must be strings")
            check_text(f"items[{i}].claim", claim)
            check_text(f"items[{i}].evidence", evidence)
            if not claim.strip():
                raise ValueError("claim is empty")
            checked.append((claim.strip(), evidence, self._raised(stance)))
        if not checked:
            return []
        cols = [t for lab in self.labels for t in self.label_tokens[lab]]
        prompts = [self._prompt(self.prompt_with.format(claim=c, evidence=e)) for c, e, _ in checked]
        prompts += [self._prompt(self.prompt_without.format(claim=c)) for c, _, _ in checked]
        probs = self.target.next_token_logprobs(prompts, token_ids=cols).double().exp()
        out = []
        n = len(checked)
        for i, (_, _, raised) in enumerate(checked):
            p = {}
            for row, key in ((i, "with"), (n + i, "without")):
                start, vals = 0, {}
                for lab in self.labels:
                    k = len(self.label_tokens[lab])
                    vals[lab] = float(probs[row, start : start + k].sum())
                    start += k
                p[key] = vals
            out.append(
                ACUResult(
                    acu=acu(p["with"], p["without"], raised),
                    delta_p={t: delta_p(p["with"][t], p["without"][t]) for t in self.labels},
                    p_with=p["with"],
                    p_without=p["without"],
                    raised=raised,
                )
            )
        return out

    def score(self, claim: str, evidence: str, stance: str) -> ACUResult:
        """ACU of one evidence text for a claim; ``stance`` is SUPPORTS / REFUTES / NOT ENOUGH (or a label)."""
        return self.score_batch([(claim, evidence, stance)])[0]
