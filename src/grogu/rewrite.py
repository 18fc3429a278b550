"""GROGU-ranked preference data for a conversational query rewriter (paper §5), without gold labels.

For each conversational turn (history + current question):

1. candidate rewrites: given in the input, or sampled from a local LLM (``n`` per turn, all turns in
   one batched :meth:`grogu.engine.Engine.generate` call); identical candidates are merged and the
   original question is always one of them;
2. each rewrite retrieves its top-k (default 10) passages with any :class:`Retriever` (BM25, a
   sentence-transformers index, or a LlamaIndex / LangChain retriever through the adapters);
3. the target LLM answers the *original question* with those k passages as ONE context, and GROGU
   (:meth:`grogu.UtilityScorer.score_contexts`, batched over all rewrites of a turn and over turns)
   is the rewrite's score;
4. SFT target = the highest-GROGU rewrite; DPO pair = (highest, lowest); the ``drop_ratio`` (50%)
   of pairs with the smallest GROGU gap are dropped.

>>> pairs = build_rewrite_pairs(turns, BM25Retriever(passages), "smollm2-135m-instruct")
>>> pairs.write("out/")          # sft.jsonl, dpo.jsonl, scores.jsonl, summary.json

``sft.jsonl`` holds ``{"prompt", "completion"}`` and ``dpo.jsonl`` ``{"prompt", "chosen",
"rejected"}`` records (TRL's standard prompt-completion and preference formats): ``prompt`` is the
rewriting instruction with the conversation history and current question, the very text the
candidates were generated from; completions are rewrite strings. Scores are GROGU utilities
(-KeyEntropy in nats by default; higher = the rewrite's passages make the LLM surer of its answer).

This module is light to import: torch, transformers and sentence-transformers load on first use.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from .checks import check_positive_int
from .retrieval import (
    BM25Retriever, DenseRetriever, LangChainRetriever, LlamaIndexRetriever, Retriever, as_retriever, bm25_tokenize,
    retrieve_all,
)

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine
    from .scorer import UtilityScorer

DEFAULT_INSTRUCTION = (
    "Rewrite the last question of the conversation as a standalone search query that can be understood "
    "without the conversation: resolve pronouns and references using the earlier turns and keep the "
    "meaning. Reply with the rewritten question only.\n\n"
    "Conversation:\n{history}\n\nLast question: {question}"
)
NO_HISTORY = "(no earlier turns)"
DEFAULT_N_CANDIDATES = 8
DEFAULT_K = 10
DEFAULT_DROP_RATIO = 0.5


# ---------------------------------------------------------------------------------------- turns
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
    return Turn(question=item["question"], history=item.get("history") or [], candidates=item.get("candidates"),
                id=item.get("id", position))


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


# ---------------------------------------------------------------------------------------- candidates
_PREFIX = re.compile(r"^\s*(?:\**\s*)?(?:rewritten question|rewritten query|standalone question|rewrite|query|"
                     r"question|answer)\s*\**\s*[:：-]\s*\**\s*", re.IGNORECASE)


def clean_rewrite(text: str) -> str:
    """A generated rewrite made usable: the first non-empty line, without a leading "Rewrite:"-style
    label and without surrounding quotes. May return "" (the candidate is then dropped)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = _PREFIX.sub("", line).strip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'`":
        line = line[1:-1].strip()
    return line


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def dedupe_candidates(question: str, candidates: Sequence[str], include_original: bool = True) -> list[str]:
    """Unique non-empty candidates in first-seen order; identical means equal after collapsing
    whitespace and case. With ``include_original`` the question itself comes first."""
    out: list[str] = []
    seen: set[str] = set()
    for c in ([question] if include_original else []) + [" ".join(c.split()) for c in candidates]:
        key = _norm(c)
        if key and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _chat_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` as the user turn of the tokenizer's chat template (plain text + newline
    when it has none), ready for the assistant's reply."""
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 tokenize=False)
        return tokenizer.encode(rendered, add_special_tokens=False)
    return tokenizer.encode(text + "\nRewritten question:", add_special_tokens=True)


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
    from .engine import get_engine

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (candidates per turn) must be a positive int, got {n!r}")
    if not turns:
        return []
    engine = get_engine(rewriter)
    prompts = [_chat_ids(engine.tokenizer, rewrite_prompt(t, instruction)) for t in turns]
    gens = engine.generate([p for p in prompts for _ in range(n)], max_new_tokens, temperature=temperature, seed=seed)
    texts = [clean_rewrite(g.text) for g in gens]
    return [texts[i * n:(i + 1) * n] for i in range(len(turns))]


# ---------------------------------------------------------------------------------------- pairs (pure)
@dataclass(frozen=True)
class PreferencePair:
    """A DPO pair of one turn: the highest- against the lowest-GROGU rewrite."""

    turn_index: int
    prompt: str
    chosen: str
    rejected: str
    chosen_score: float
    rejected_score: float

    @property
    def gap(self) -> float:
        """GROGU gap chosen - rejected (>= 0, in the metric's units)."""
        return self.chosen_score - self.rejected_score

    def record(self) -> dict[str, str]:
        """The TRL preference record."""
        return {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}


def best_and_worst(scores: Sequence[float]) -> tuple[int, int] | None:
    """(index of the highest score, index of the lowest); ties go to the earlier candidate. None when
    there are fewer than two candidates or all scores are equal (no preference to learn)."""
    if len(scores) < 2:
        return None
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    worst = min(range(len(scores)), key=lambda i: (scores[i], i))
    if not scores[best] > scores[worst]:
        return None
    return best, worst


def drop_smallest_gaps(pairs: Sequence[PreferencePair], drop_ratio: float = DEFAULT_DROP_RATIO
                       ) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(kept, dropped): drop the floor(drop_ratio * n) pairs with the smallest GROGU gap (ties: the
    earlier pair is dropped first); both lists keep the input order."""
    if not 0 <= drop_ratio < 1:
        raise ValueError(f"drop_ratio must be in [0, 1), got {drop_ratio}")
    n_drop = math.floor(round(drop_ratio * len(pairs), 9))
    by_gap = sorted(range(len(pairs)), key=lambda i: (pairs[i].gap, i))
    dropped = set(by_gap[:n_drop])
    return ([p for i, p in enumerate(pairs) if i not in dropped], [p for i, p in enumerate(pairs) if i in dropped])


# ---------------------------------------------------------------------------------------- scoring
@dataclass
class ScoredRewrite:
    """One candidate rewrite: its GROGU ``score`` (utility of its top-k as one context for the original
    question), the ``passages`` it retrieved, and the target LLM's grounded ``answer``."""

    rewrite: str
    score: float
    passages: list[str]
    answer: str
    is_original: bool


@dataclass
class TurnResult:
    """All scored rewrites of a turn (original question first) and the chosen/rejected indices."""

    turn: Turn
    prompt: str
    rewrites: list[ScoredRewrite]
    n_raw_candidates: int
    generated: bool

    @property
    def choice(self) -> tuple[int, int] | None:
        return best_and_worst([r.score for r in self.rewrites])

    @property
    def best(self) -> ScoredRewrite:
        """The highest-GROGU rewrite (ties: the earlier one, so the original question on a tie)."""
        scores = [r.score for r in self.rewrites]
        return self.rewrites[max(range(len(scores)), key=lambda i: (scores[i], -i))]

    @property
    def no_pair_reason(self) -> str | None:
        if len(self.rewrites) < 2:
            return "single_candidate"
        return "zero_gap" if self.choice is None else None

    def pair(self, turn_index: int) -> PreferencePair | None:
        choice = self.choice
        if choice is None:
            return None
        b, w = (self.rewrites[i] for i in choice)
        return PreferencePair(turn_index, self.prompt, b.rewrite, w.rewrite, b.score, w.score)


def score_contexts_many(scorer: "UtilityScorer", jobs: Sequence[tuple[str, list[list[str]]]]) -> list[list[Any]]:
    """:class:`~grogu.scorer.ContextScore` of every context of every (query, contexts) job, all in one
    batched engine pass (:meth:`~grogu.scorer.UtilityScorer.score_contexts_batch`)."""
    return scorer.score_contexts_batch(jobs) if jobs else []


def score_turns(
    scorer: "UtilityScorer",
    turns: Sequence[Turn],
    candidates: Sequence[Sequence[str]],
    retriever: Retriever,
    k: int = DEFAULT_K,
    *,
    turns_per_batch: int = 8,
    instruction: str = DEFAULT_INSTRUCTION,
    progress: bool = False,
) -> list[TurnResult]:
    """Retrieve top-k for each candidate rewrite and score the passages as one context for the turn's
    original question. Rewrites of a turn that retrieve the same passages in the same order share one
    engine context (equal contexts get equal scores)."""
    k = check_positive_int("k", k)
    retriever = as_retriever(retriever)
    results: list[TurnResult] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(turns), desc="turns", unit="turn", file=sys.stderr)
    for start in range(0, len(turns), max(1, turns_per_batch)):
        chunk = list(range(start, min(len(turns), start + max(1, turns_per_batch))))
        per_turn = []
        for i in chunk:
            rewrites = list(candidates[i])
            retrieved = retrieve_all(retriever, rewrites, k)
            unique = list(dict.fromkeys(tuple(r) for r in retrieved))
            per_turn.append((rewrites, retrieved, unique))
        scored = score_contexts_many(scorer, [(turns[i].question, [list(u) for u in unique])
                                              for i, (_, _, unique) in zip(chunk, per_turn)])
        for i, (rewrites, retrieved, unique), scores in zip(chunk, per_turn, scored):
            by_ctx = dict(zip(unique, scores))
            turn = turns[i]
            results.append(TurnResult(
                turn=turn, prompt=rewrite_prompt(turn, instruction),
                rewrites=[ScoredRewrite(rewrite=r, score=by_ctx[tuple(p)].score, passages=p,
                                        answer=by_ctx[tuple(p)].answer, is_original=_norm(r) == _norm(turn.question))
                          for r, p in zip(rewrites, retrieved)],
                n_raw_candidates=len(rewrites), generated=False,
            ))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return results


# ---------------------------------------------------------------------------------------- pipeline
@dataclass
class RewritePairs:
    """Everything :func:`build_rewrite_pairs` produced: per-turn results, the DPO pairs kept and
    dropped by the gap rule, and a summary (counts, settings, timings)."""

    results: list[TurnResult]
    kept: list[PreferencePair]
    dropped: list[PreferencePair]
    summary: dict[str, Any]

    def sft_records(self) -> list[dict[str, str]]:
        """One ``{"prompt", "completion"}`` record per turn: the highest-GROGU rewrite."""
        return [{"prompt": r.prompt, "completion": r.best.rewrite} for r in self.results]

    def dpo_records(self) -> list[dict[str, str]]:
        """One ``{"prompt", "chosen", "rejected"}`` record per kept pair (turn order)."""
        return [p.record() for p in self.kept]

    def score_records(self) -> list[dict[str, Any]]:
        """Per turn: every rewrite with its score, answer and retrieved passages, and what became of it."""
        kept = {p.turn_index for p in self.kept}
        out = []
        for i, r in enumerate(self.results):
            choice = r.choice
            out.append({
                "id": r.turn.id, "question": r.turn.question, "history": r.turn.history, "prompt": r.prompt,
                "generated": r.generated, "n_raw_candidates": r.n_raw_candidates,
                "best": choice[0] if choice else max(range(len(r.rewrites)), key=lambda j: (r.rewrites[j].score, -j)),
                "worst": choice[1] if choice else None,
                "pair": "kept" if i in kept else ("dropped" if choice else r.no_pair_reason),
                "rewrites": [vars(x) for x in r.rewrites],
            })
        return out

    def write(self, out_dir: str) -> dict[str, str]:
        """Write sft.jsonl, dpo.jsonl, scores.jsonl and summary.json into ``out_dir``; returns the paths."""
        os.makedirs(out_dir, exist_ok=True)
        paths = {name: os.path.join(out_dir, name) for name in ("sft.jsonl", "dpo.jsonl", "scores.jsonl",
                                                                 "summary.json")}
        write_jsonl(paths["sft.jsonl"], self.sft_records())
        write_jsonl(paths["dpo.jsonl"], self.dpo_records())
        write_jsonl(paths["scores.jsonl"], self.score_records())
        with open(paths["summary.json"], "w", encoding="utf-8") as f:
            json.dump(self.summary, f, indent=2, ensure_ascii=False)
            f.write("\n")
        return paths


def write_jsonl(path: str, records: Iterable[Mapping[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def summarize(results: Sequence[TurnResult], kept: Sequence[PreferencePair], dropped: Sequence[PreferencePair],
              drop_ratio: float) -> dict[str, Any]:
    """Counts of a run: turns, candidates, turns without a pair (and why), pairs kept/dropped, gaps."""
    reasons = [r.no_pair_reason for r in results]
    gaps_kept = [p.gap for p in kept]
    gaps_dropped = [p.gap for p in dropped]
    n_unique = [len(r.rewrites) for r in results]
    generated = [r for r in results if r.generated]

    def stats(xs: Sequence[float]) -> dict[str, float] | None:
        return {"min": min(xs), "mean": sum(xs) / len(xs), "max": max(xs)} if xs else None

    return {
        "turns": len(results),
        "turns_generated_candidates": len(generated),
        "raw_candidates_generated": sum(r.n_raw_candidates for r in generated),
        "unique_candidates_per_turn_mean": (sum(n_unique) / len(n_unique)) if n_unique else 0.0,
        "sft_records": len(results),
        "sft_chose_original_question": sum(r.best.is_original for r in results),
        "turns_without_pair": {"single_candidate": reasons.count("single_candidate"),
                               "zero_gap": reasons.count("zero_gap")},
        "pairs_before_drop": len(kept) + len(dropped),
        "drop_ratio": drop_ratio,
        "pairs_dropped_small_gap": len(dropped),
        "pairs_kept": len(kept),
        "gap_kept": stats(gaps_kept),
        "gap_dropped": stats(gaps_dropped),
    }


def _scorer(model: Any, **kwargs: Any) -> "UtilityScorer":
    from .scorer import UtilityScorer

    if isinstance(model, UtilityScorer):
        return model
    return UtilityScorer(model, **{k: v for k, v in kwargs.items() if v is not None})


def build_rewrite_pairs(
    turns: Sequence[Turn | Mapping[str, Any]],
    retriever: Any,
    model: Any = "smollm2-135m-instruct",
    *,
    rewriter: Any = None,
    n_candidates: int = DEFAULT_N_CANDIDATES,
    temperature: float = 0.8,
    seed: int = 0,
    rewrite_max_new_tokens: int = 48,
    include_original: bool = True,
    k: int = DEFAULT_K,
    drop_ratio: float = DEFAULT_DROP_RATIO,
    metric: str | None = None,
    max_new_tokens: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    instruction: str = DEFAULT_INSTRUCTION,
    turns_per_batch: int = 8,
    progress: bool = False,
) -> RewritePairs:
    """GROGU-ranked SFT and DPO data for a query rewriter; see the module docstring.

    Args:
        turns: :class:`Turn` objects or ``{"question", "history"?, "candidates"?, "id"?}`` mappings.
            Turns without candidates get ``n_candidates`` sampled rewrites from ``rewriter``.
        retriever: a :class:`BM25Retriever`, :class:`DenseRetriever`, LlamaIndex or LangChain
            retriever, or anything with ``retrieve(query, k) -> list[str]``.
        model: the target LLM scored by GROGU: a :class:`~grogu.UtilityScorer` (its metric and answer
            length are used) or anything it accepts (name, path, Engine, (model, tokenizer)).
        rewriter: the LLM that samples candidates (default: the target LLM's engine).
        temperature, seed, rewrite_max_new_tokens: sampling of the candidates.
        include_original: always rank the original question as a candidate too (default True).
        k: passages retrieved per rewrite, scored together as one context (default 10).
        drop_ratio: fraction of DPO pairs with the smallest GROGU gap that is dropped (default 0.5).
        metric, max_new_tokens, device, dtype: for the UtilityScorer when ``model`` is not one.
        instruction: the rewriting prompt template ({history}, {question}).
        turns_per_batch: turns whose contexts share engine batches.
    """
    k = check_positive_int("k", k)
    if not 0 <= drop_ratio < 1:
        raise ValueError(f"drop_ratio must be in [0, 1), got {drop_ratio}")
    turns = [t if isinstance(t, Turn) else turn_from_dict(t, i) for i, t in enumerate(turns)]
    retriever = as_retriever(retriever)
    scorer = _scorer(model, metric=metric, max_new_tokens=max_new_tokens, device=device, dtype=dtype)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    todo = [i for i, t in enumerate(turns) if t.candidates is None]
    raw: dict[int, list[str]] = {i: list(t.candidates) for i, t in enumerate(turns) if t.candidates is not None}
    if todo:
        engine = scorer.engine if rewriter is None else rewriter
        sampled = generate_candidates(engine, [turns[i] for i in todo], n_candidates, temperature=temperature,
                                      max_new_tokens=rewrite_max_new_tokens, seed=seed, instruction=instruction)
        raw.update(zip(todo, sampled))
    timings["generate_s"] = time.perf_counter() - t0
    candidates = [dedupe_candidates(t.question, raw[i], include_original) for i, t in enumerate(turns)]
    for i, c in enumerate(candidates):
        if not c:
            raise ValueError(f"turn {turns[i].id!r} has no non-empty candidate rewrite (pass include_original=True "
                             "to rank the question itself)")

    t0 = time.perf_counter()
    results = score_turns(scorer, turns, candidates, retriever, k, turns_per_batch=turns_per_batch,
                          instruction=instruction, progress=progress)
    timings["retrieve_and_score_s"] = time.perf_counter() - t0
    generated = set(todo)
    for i, r in enumerate(results):
        r.generated = i in generated
        r.n_raw_candidates = len(raw[i])

    pairs = [p for i, r in enumerate(results) if (p := r.pair(i)) is not None]
    kept, dropped = drop_smallest_gaps(pairs, drop_ratio)
    summary = summarize(results, kept, dropped, drop_ratio)
    if rewriter is None:
        rewriter_name = scorer.model_name
    elif isinstance(rewriter, str):
        rewriter_name = rewriter
    else:
        rewriter_name = getattr(rewriter, "model_name", None) or type(rewriter).__name__
    summary["settings"] = {
        "model": scorer.model_name, "metric": scorer.metric, "max_new_tokens": scorer.max_new_tokens,
        "rewriter": str(rewriter_name),
        "n_candidates": n_candidates, "temperature": temperature, "seed": seed,
        "include_original": include_original, "k": k,
        "retriever": getattr(retriever, "name", type(retriever).__name__),
    }
    summary["timings"] = {name: round(v, 3) for name, v in timings.items()}
    return RewritePairs(results=results, kept=kept, dropped=dropped, summary=summary)


# ---------------------------------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    """``grogu rewrite-pairs``: GROGU-ranked SFT/DPO data for a conversational query rewriter."""
    p.description = ("Rank candidate rewrites of conversational questions by the GROGU utility of their top-k "
                     "passages for the target LLM; write sft.jsonl, dpo.jsonl (TRL formats), scores.jsonl and "
                     "summary.json.")
    p.add_argument("--turns", required=True,
                   help="JSONL of {'question', 'history'?: [...], 'candidates'?: [...], 'id'?} objects")
    p.add_argument("--corpus", required=True, help="passages: .jsonl, .json or text file (paragraphs)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--retriever", choices=("bm25", "dense"), default="bm25")
    p.add_argument("--embedder", default="all-minilm-l6-v2", help="sentence-transformers model for --retriever dense")
    p.add_argument("-k", "--k", type=int, default=DEFAULT_K, help="passages per rewrite, scored as one context")
    p.add_argument("--model", default="smollm2-135m-instruct", help="target LLM (alias, path, .gguf, hub id)")
    p.add_argument("--rewriter", default=None, help="LLM that samples candidates (default: --model)")
    p.add_argument("--n-candidates", type=int, default=DEFAULT_N_CANDIDATES, help="sampled rewrites per turn")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-original", action="store_true", help="do not rank the original question as a candidate")
    p.add_argument("--drop-ratio", type=float, default=DEFAULT_DROP_RATIO,
                   help="fraction of DPO pairs with the smallest GROGU gap to drop (default 0.5)")
    p.add_argument("--metric", default=None, help="GROGU variant (default key_entropy)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="longest grounded answer (default 64)")
    p.add_argument("--rewrite-max-new-tokens", type=int, default=48)
    p.add_argument("--turns-per-batch", type=int, default=8)
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)


def run(args: argparse.Namespace) -> int:
    from .cli import read_documents

    turns = read_turns(args.turns)
    if not turns:
        raise SystemExit(f"{args.turns}: no turns")
    corpus = read_documents(args.corpus)
    if not corpus:
        raise SystemExit(f"{args.corpus}: the corpus is empty")
    retriever = (BM25Retriever(corpus) if args.retriever == "bm25"
                 else DenseRetriever(corpus, args.embedder, device=args.device))
    rewriter = None
    if args.rewriter:
        from .engine import get_engine

        rewriter = get_engine(args.rewriter, device=args.device, dtype=args.dtype)
    pairs = build_rewrite_pairs(
        turns, retriever, args.model, rewriter=rewriter, n_candidates=args.n_candidates,
        temperature=args.temperature, seed=args.seed, rewrite_max_new_tokens=args.rewrite_max_new_tokens,
        include_original=not args.no_original, k=args.k, drop_ratio=args.drop_ratio, metric=args.metric,
        max_new_tokens=args.max_new_tokens, device=args.device, dtype=args.dtype,
        turns_per_batch=args.turns_per_batch, progress=True,
    )
    paths = pairs.write(args.out)
    s = pairs.summary
    print(f"{s['turns']} turns, {s['unique_candidates_per_turn_mean']:.1f} unique candidates/turn; "
          f"SFT: {s['sft_records']} records ({s['sft_chose_original_question']} keep the original question); "
          f"DPO: {s['pairs_kept']} pairs kept of {s['pairs_before_drop']} "
          f"(dropped {s['pairs_dropped_small_gap']} smallest-gap; no pair: {s['turns_without_pair']})")
    for name, path in paths.items():
        print(f"  {name}: {path}")
    return 0


__all__ = [
    "Turn", "read_turns", "turn_from_dict", "rewrite_prompt", "render_history", "clean_rewrite",
    "dedupe_candidates", "generate_candidates", "Retriever", "BM25Retriever", "DenseRetriever",
    "LlamaIndexRetriever", "LangChainRetriever", "as_retriever", "retrieve_all", "PreferencePair",
    "best_and_worst", "drop_smallest_gaps", "ScoredRewrite", "TurnResult", "score_turns",
    "score_contexts_many", "RewritePairs", "summarize", "build_rewrite_pairs", "write_jsonl",
    "DEFAULT_INSTRUCTION",
]
