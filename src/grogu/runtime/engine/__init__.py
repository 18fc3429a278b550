"""The shared, batched scoring engine: one object per (model, device).

Every metric in grogu is computed from three primitives, all batched over many prompts:

- :meth:`Engine.generate` — greedy (or sampled) generation that also returns, for every generated
  token, its entropy (nats, full vocabulary) and log-probability under the generating prompt, taken
  from the generation steps themselves (no second pass);
- :meth:`Engine.token_stats` — teacher-forced entropy and log-probability of given continuations
  under given prompts, logits taken only at the continuation positions;
- :meth:`Engine.next_token_logprobs` — the next-token distribution after each prompt.

How it is fast: prompts are length-bucketed into batches; within a batch shared prefixes are encoded
once, as a prefix tree (rows grouped by common prefix, each group's prefix continuing the KV cache of
earlier groups' prefixes: the chat-template header; the whole prompt when k answers are
teacher-forced under one ungrounded prompt; documents 1..i-1 for the i-th leave-one-out prompt of the
Influence Score), the rest of each row following with padding masked out and position ids that
continue its own prefix, and the groups' caches stacked to decode together; with
``retain_prefix_tokens`` set, prompts encoded for decoding are kept, so a later call that starts the
same way continues their cache (a doubtful query's swap candidates after its first answer); greedy
decoding can take prompt-lookup drafts (verified, so the answer is unchanged); finished rows leave the
decode batch; entropies are computed in float32 on chunks, never on a float32 [batch, seq, vocab]
tensor of the whole prompt; on out-of-memory a batch is split in two
and retried. Inputs and outputs are token ids: prompts are rendered by :mod:`grogu.core.prompts`.

Thread safety: one re-entrant lock serialises the model work, so any number of threads can share an
engine and each gets exactly the result it would get alone.

The parts. The Engine (:mod:`.core`) owns three objects and hands each its inputs explicitly (the
configuration in use, token lists, small dataclasses), one module per mechanism:

- :mod:`.planning` — :class:`~.planning.BatchPlanner`: which rows run together under the size, token
  and logits budgets (:func:`~.planning.plan_batches`, :func:`~.planning.split_unpadded`), and running
  the plan with the out-of-memory retry;
- :mod:`.prefill` — :class:`~.prefill.PrefixPrefill`: a batch encoded group by group
  (:class:`~.prefill.EncodedGroup` per group), for its logits alone or, the groups' caches stacked
  (:func:`~.prefill.stack_groups`), as a :class:`~.prefill.PrefilledBatch` to decode from;
- :mod:`.decode` — :class:`~.decode.Decoder`: the decode loop from a :class:`~.prefill.PrefilledBatch`,
  greedy (verifying prompt-lookup drafts) or sampled (:class:`~.sampling.Sampling`: counter-based
  draws); on a GPU its steps are CUDA graphs kept from batch to batch over kept buffers (:mod:`.graphs`).

And the plain logic and helpers they use, each testable without a model: :mod:`.config`
(:class:`EngineConfig`, every tuned constant as a documented, validated setting, with per-device
defaults: ``engine.config``), :mod:`.prefixtree` (:func:`~.prefixtree.common_prefix`,
:func:`~.prefixtree.prefix_groups`: a batch split into groups sharing a prefix, by dynamic
programming), :mod:`.drafting` (:class:`~.drafting.PromptLookup`, ``propose(history) -> draft``),
:mod:`.stats` (entropies and log-probabilities from logits; teacher-forced statistics),
:mod:`.kvcache` (decode cache with reserved room), :mod:`.kernels` (CPU linear kernels) and
:mod:`.types` (results).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.exports import lazy_names

if TYPE_CHECKING:  # what static tools see; at run time each name is imported on first use
    from ...core.types import Generation, TokenStats
    from .config import EngineConfig
    from .core import Engine, get_engine
    from .drafting import PromptLookup

#: the public names and the module each comes from: ``EngineConfig`` (and the integrations' settings,
#: which hold one) import without torch; ``Engine`` loads the tensor code
_EXPORTS = {
    "Engine": ".core",
    "get_engine": ".core",
    "EngineConfig": ".config",
    "PromptLookup": ".drafting",
    "Generation": "grogu.core.types",
    "TokenStats": "grogu.core.types",
}
__all__ = ["Engine", "EngineConfig", "get_engine", "Generation", "TokenStats", "PromptLookup"]
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
