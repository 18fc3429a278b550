"""ΔSePer: semantic perplexity reduction (Dai et al., ICLR 2025) — reference-based utility.

N answers are sampled (temperature 1.0) with and without the documents; sample i gets the weight
w_i = softmax over the N samples of its mean token log-likelihood. An entailment kernel E(x, y) in
[0, 1] compares samples with the reference answers a*:
- soft: P(a*) = sum_i w_i * E_sym(r_i, a*), with E_sym comparing "question answer" with
  "question reference" in both directions and keeping the larger (the authors' code);
- hard: samples are clustered by bidirectional entailment (E >= tau both ways, greedy against each
  cluster's first member); P(a*) = total weight of the clusters whose first member and a* entail each
  other (>= tau both ways).
Several references are averaged. ΔSePer = P(a* | q, D) - P(a* | q); higher = the documents help.

The kernel is pluggable: any ``(premises, hypotheses) -> probabilities`` callable (an LLM judge, a
stub), or :class:`NLIEntailment` around any NLI sequence-classification model.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch

from ..core.checks import (
    MAX_SAMPLES,
    check_count,
    check_documents,
    check_positive_int,
    check_probability,
    check_query,
    check_seed,
    check_temperature,
)
from ..core.prompts import Document, PromptBuilder, PromptTemplate
from ..runtime.engine import Generation, get_engine
from ..runtime.models import DEFAULT_MODEL
from .defaults import SEPER_MAX_NEW_TOKENS
from .results import SePerResult  # noqa: F401 - this metric's result, defined without tensor code

Kernel = Callable[[Sequence[str], Sequence[str]], Sequence[float]]


class NLIEntailment:
    """Entailment probability P(premise entails hypothesis) from an NLI sequence classifier.

    ``model``: hub id, local path, or a loaded (model, tokenizer) pair. The entailment class is found in
    ``config.id2label`` (a label containing 'entail'); an error lists the labels when there is none.
    """

    def __init__(self, model: Any, *, device: str | None = None, batch_size: int = 64) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if isinstance(model, tuple):
            self.model, self.tokenizer = model
        else:
            try:
                self.tokenizer = AutoTokenizer.from_pretrained(model)
                self.model = AutoModelForSequenceClassification.from_pretrained(model)
            except Exception as exc:
                raise ValueError(
                    f"Could not load the NLI model {model!r} (a hub id or local path of a "
                    f"sequence-classification model): {exc}"
                ) from exc
        if device is not None:
            self.model.to(device)
        self.model.eval()
        labels = {int(i): str(l) for i, l in self.model.config.id2label.items()}
        hits = [i for i, l in labels.items() if "entail" in l.lower() and "not" not in l.lower()]
        if len(hits) != 1:
            raise ValueError(
                f"cannot tell the entailment class from id2label={labels}; "
                f"it needs exactly one label containing 'entail'"
            )
        self.entailment_index = hits[0]
        self.batch_size = batch_size

    @torch.inference_mode()
    def __call__(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        out: list[float] = []
        dev = next(self.model.parameters()).device
        for s in range(0, len(premises), self.batch_size):
            enc = self.tokenizer(
                list(premises[s : s + self.batch_size]),
                list(hypotheses[s : s + self.batch_size]),
                padding=True,
                truncation=True,
                return_tensors="pt",
            ).to(dev)
            probs = torch.softmax(self.model(**enc).logits.float(), dim=-1)[:, self.entailment_index]
            out += probs.cpu().tolist()
        return out


def sample_weights(generations: Sequence[Generation]) -> torch.Tensor:
    """Softmax over the samples of each sample's mean token log-likelihood (end-of-turn token included
    when generated and its log-probability known: an inference server reports it only where it was
    needed, a chat API never). float64, sums to 1."""
    means = []
    for i, g in enumerate(generations):
        n = len(g.token_ids) + (1 if g.finished and g.stop_logprob is not None else 0)
        if n == 0:
            raise ValueError(
                f"sample {i} is an empty answer whose end-of-turn log-probability the target did "
                "not return (a chat API returns none), so it has no likelihood to weight it by; "
                "ΔSePer needs a target that reports it (a model in process, or a completions API: "
                "api='vllm' or 'llama-cpp')"
            )
        means.append(g.sequence_logprob / n)
    return torch.softmax(torch.tensor(means, dtype=torch.float64), dim=0)


def soft_belief(weights: torch.Tensor, entail: torch.Tensor) -> float:
    """SePer_S for one reference: sum_i w_i * E(r_i, a*). entail: [N] symmetric entailment scores."""
    return float((weights * entail.to(weights.dtype)).sum())


def hard_clusters(pair_entail: torch.Tensor, tau: float) -> list[int]:
    """Greedy bidirectional-entailment clustering: sample i joins the first cluster whose first member
    j has E(i, j) >= tau and E(j, i) >= tau; else it starts a new cluster. Returns a cluster id per sample.
    pair_entail[i, j] = E(sample i entails sample j)."""
    ids: list[int] = []
    heads: list[int] = []
    for i in range(pair_entail.shape[0]):
        for c, j in enumerate(heads):
            if pair_entail[i, j] >= tau and pair_entail[j, i] >= tau:
                ids.append(c)
                break
        else:
            ids.append(len(heads))
            heads.append(i)
    return ids


def hard_belief(
    weights: torch.Tensor,
    cluster_ids: Sequence[int],
    head_ref_entail: torch.Tensor,
    ref_head_entail: torch.Tensor,
    tau: float,
) -> float:
    """SePer_H for one reference: total weight of the clusters whose first member and a* entail each
    other (>= tau both ways). head_ref_entail[c] = E(head_c, a*), ref_head_entail[c] = E(a*, head_c)."""
    ok = [(head_ref_entail[c] >= tau) and (ref_head_entail[c] >= tau) for c in range(len(head_ref_entail))]
    return float(sum(float(w) for w, c in zip(weights, cluster_ids) if ok[c]))


def check_references(references: Any) -> list[str]:
    """The reference answers as a list of stripped strings; a TypeError for a non-string and a
    ValueError for none or an empty one (each counts in the average, so none is dropped)."""
    if isinstance(references, str):
        references = [references]
    if not isinstance(references, Sequence):
        raise TypeError(f"references must be a str or a list of str, got {type(references).__name__}")
    if not references:
        raise ValueError("ΔSePer is reference-based: give at least one non-empty reference answer")
    refs = []
    for i, r in enumerate(references):
        if not isinstance(r, str):
            raise TypeError(f"reference answer {i} must be a str, got {type(r).__name__}")
        if not r.strip():
            raise ValueError(f"ΔSePer is reference-based: reference answer {i} is empty")
        refs.append(r.strip())
    return refs


#: the longest sampled answer where none is given (the scorer, the command line, the service)
DEFAULT_MAX_NEW_TOKENS = SEPER_MAX_NEW_TOKENS


class SePerScorer:
    """ΔSePer of documents for one target LLM.

    Args:
        model: grogu Engine, model name/path/hub id, or (model, tokenizer) pair.
        entailment: an :class:`NLIEntailment`, any ``(premises, hypotheses) -> [0, 1]`` callable, or an
            NLI model id/path (the paper uses deberta-v2-xlarge-mnli).
        n_samples: N (default 10); temperature: sampling temperature (default 1.0);
        tau: entailment threshold of the hard variant (default 0.5); seed: sampling seed (default 0;
            None: fresh samples every call).
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        *,
        entailment: Any,
        n_samples: int = 10,
        temperature: float = 1.0,
        tau: float = 0.5,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int | None = 0,
        template: PromptTemplate | None = None,
        device: str | None = None,
        dtype: str | None = None,
    ) -> None:
        n_samples = check_count("n_samples", n_samples, MAX_SAMPLES)
        temperature = check_temperature(temperature)
        tau = check_probability("tau (an entailment probability threshold)", tau)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        seed = check_seed(seed)
        if not callable(entailment) and not isinstance(entailment, (str, os.PathLike, tuple)):
            raise TypeError(
                f"entailment must be a (premises, hypotheses) -> probabilities callable, an NLI model "
                f"id/path or a (model, tokenizer) pair, got {type(entailment).__name__}"
            )
        self.target = get_engine(model, device=device, dtype=dtype)
        self.kernel: Kernel = entailment if callable(entailment) else NLIEntailment(entailment, device=device)
        self.n_samples, self.temperature, self.tau, self.seed = n_samples, temperature, tau, seed
        self.max_new_tokens = max_new_tokens
        self.prompts = PromptBuilder.for_target(self.target, max_new_tokens, template)

    def _beliefs(self, query: str, gens: list[Generation], refs: list[str]) -> tuple[float, float]:
        """(soft, hard) belief in the references for one set of N samples."""
        n = len(gens)
        w = sample_weights(gens)
        qa = [f"{query} {g.text}" for g in gens]
        qr = [f"{query} {r}" for r in refs]
        # one kernel call for every pair this context needs
        prem, hyp = [], []
        for a in qa:
            for r in qr:
                prem += [a, r]
                hyp += [r, a]
        for i in range(n):
            for j in range(n):
                if i != j:
                    prem.append(qa[i])
                    hyp.append(qa[j])
        scores = torch.tensor(list(self.kernel(prem, hyp)), dtype=torch.float64)
        if scores.shape != (len(prem),) or not bool(((scores >= 0) & (scores <= 1)).all()):
            raise ValueError(
                f"the entailment kernel must return one probability in [0, 1] per (premise, "
                f"hypothesis) pair: got {tuple(scores.shape)} values for {len(prem)} pairs, "
                f"min {scores.min().item() if scores.numel() else None}, "
                f"max {scores.max().item() if scores.numel() else None}"
            )
        ar = scores[: 2 * n * len(refs)].view(n, len(refs), 2)  # [..., 0] = E(answer, ref), [..., 1] = E(ref, answer)
        pair = torch.ones(n, n, dtype=torch.float64)
        pair[~torch.eye(n, dtype=torch.bool)] = scores[2 * n * len(refs) :]
        clusters = hard_clusters(pair, self.tau)
        heads = [clusters.index(c) for c in range(max(clusters) + 1)]
        soft = [soft_belief(w, ar[:, k].max(dim=-1).values) for k in range(len(refs))]
        hard = [hard_belief(w, clusters, ar[heads, k, 0], ar[heads, k, 1], self.tau) for k in range(len(refs))]
        return sum(soft) / len(soft), sum(hard) / len(hard)

    def sample_rows(self, query: str, contexts: list[list[Document]]) -> list[tuple[list[int], int]]:
        """Every sample to draw, as (prompt ids, sample number): the ungrounded prompt's N samples, then
        each context's. A sample depends only on the seed, its prompt and its number, so the rows can be
        drawn in slices (a service's scheduler) with the same result as in one call."""
        prompts = [self.prompts.ungrounded_ids(query)] + [self.prompts.grounded_ids(query, c) for c in contexts]
        seen: dict[tuple[int, ...], int] = {}
        rows = []
        for p in prompts:
            first = seen.get(tuple(p), 0)
            seen[tuple(p)] = first + self.n_samples
            rows += [(p, first + j) for j in range(self.n_samples)]
        return rows

    def sample(self, rows: Sequence[tuple[list[int], int]]) -> list[Generation]:
        """The samples of ``rows`` (from :meth:`sample_rows`), in one engine call."""
        return self.target.generate(
            [p for p, _ in rows],
            self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
            sample_numbers=[n for _, n in rows],
        )

    def beliefs(
        self, query: str, references: Sequence[str], groups: Sequence[list[Generation]]
    ) -> list[tuple[float, float]]:
        """(soft, hard) belief in the references of each group of N samples."""
        return [self._beliefs(query, list(g), list(references)) for g in groups]

    @staticmethod
    def results(groups: Sequence[list[Generation]], beliefs: Sequence[tuple[float, float]]) -> list[SePerResult]:
        """ΔSePer of each context from its samples' beliefs; group 0 is the ungrounded prompt's."""
        (soft0, hard0), out = beliefs[0], []
        for g, (soft, hard) in zip(groups[1:], beliefs[1:]):
            out.append(
                SePerResult(
                    delta_soft=soft - soft0,
                    delta_hard=hard - hard0,
                    p_soft_with=soft,
                    p_soft_without=soft0,
                    p_hard_with=hard,
                    p_hard_without=hard0,
                    samples_with=[x.text for x in g],
                    samples_without=[x.text for x in groups[0]],
                )
            )
        return out

    def _run(self, query: str, contexts: list[list[Document]], references: Sequence[str]) -> list[SePerResult]:
        query = check_query(query)
        refs = check_references(references)
        prompts = [self.prompts.ungrounded_ids(query)] + [self.prompts.grounded_ids(query, c) for c in contexts]
        rows = [p for p in prompts for _ in range(self.n_samples)]
        gens = self.target.generate(rows, self.max_new_tokens, temperature=self.temperature, seed=self.seed)
        groups = [gens[i * self.n_samples : (i + 1) * self.n_samples] for i in range(len(prompts))]
        return self.results(groups, self.beliefs(query, refs, groups))

    def score(self, query: str, documents: Sequence[Any], references: Sequence[str]) -> list[SePerResult]:
        """ΔSePer of each document alone (input order); the ungrounded samples are shared."""
        docs = check_documents(documents)
        if not docs:
            check_query(query)
            return []
        return self._run(query, [[d] for d in docs], references)

    def score_context(self, query: str, documents: Sequence[Any], references: Sequence[str]) -> SePerResult:
        """ΔSePer of an ordered list of documents used together as one context."""
        return self._run(query, [check_documents(documents)], references)[0]
