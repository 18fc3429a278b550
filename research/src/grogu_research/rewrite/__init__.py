"""GROGU-ranked preference data for a conversational query rewriter (paper §5), without gold labels.

For each conversational turn (history + current question):

1. candidate rewrites: given in the input, or sampled from a local LLM (``n`` per turn, all turns in
   one batched :meth:`grogu.runtime.engine.Engine.generate` call); identical candidates are merged and the
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

This package is light to import: torch, transformers and sentence-transformers load on first use.

Modules: :mod:`.turns` (input and prompt), :mod:`.candidates` (sampling, cleaning), :mod:`.pairs`
(pair selection, plain logic), :mod:`.scoring` (retrieval + GROGU per rewrite), :mod:`.pipeline`
(:func:`build_rewrite_pairs` and the files), :mod:`.command` (``grogu-research rewrite-pairs``); the retrievers
are :mod:`grogu.rerank.retrieval`'s.
"""

from __future__ import annotations

# Every name the single-module grogu_research.rewrite had stays importable from here.
from grogu.rerank.retrieval import (  # noqa: F401
    BM25Retriever,
    DenseRetriever,
    LangChainRetriever,
    LlamaIndexRetriever,
    Retriever,
    as_retriever,
    bm25_tokenize,
    retrieve_all,
)
from grogu_research.rewrite.candidates import (  # noqa: F401
    DEFAULT_N_CANDIDATES,
    clean_rewrite,
    dedupe_candidates,
    generate_candidates,
)
from grogu_research.rewrite.command import add_arguments, run  # noqa: F401
from grogu_research.rewrite.pairs import DEFAULT_DROP_RATIO, PreferencePair, best_and_worst, drop_smallest_gaps  # noqa: F401
from grogu_research.rewrite.pipeline import RewritePairs, build_rewrite_pairs, summarize, write_jsonl
from grogu_research.rewrite.scoring import DEFAULT_K, ScoredRewrite, TurnResult, score_contexts_many, score_turns  # noqa: F401
from grogu_research.rewrite.turns import (  # noqa: F401
    DEFAULT_INSTRUCTION,
    NO_HISTORY,
    Turn,
    read_turns,
    render_history,
    rewrite_prompt,
    turn_from_dict,
)

__all__ = [
    "Turn",
    "read_turns",
    "turn_from_dict",
    "rewrite_prompt",
    "render_history",
    "clean_rewrite",
    "dedupe_candidates",
    "generate_candidates",
    "Retriever",
    "BM25Retriever",
    "DenseRetriever",
    "LlamaIndexRetriever",
    "LangChainRetriever",
    "as_retriever",
    "retrieve_all",
    "PreferencePair",
    "best_and_worst",
    "drop_smallest_gaps",
    "ScoredRewrite",
    "TurnResult",
    "score_turns",
    "score_contexts_many",
    "RewritePairs",
    "summarize",
    "build_rewrite_pairs",
    "write_jsonl",
    "DEFAULT_INSTRUCTION",
]
