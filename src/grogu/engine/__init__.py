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
continue its own prefix, and the groups' caches stacked to decode together; greedy decoding can
take prompt-lookup drafts (verified, so the answer is unchanged); finished rows leave the decode batch; entropies are computed in float32 on chunks, never on a
float32 [batch, seq, vocab] tensor of the whole prompt; on out-of-memory a batch is split in two
and retried. Inputs and outputs are token ids: prompts are rendered by :mod:`grogu.prompts`.

Thread safety: one re-entrant lock serialises the model work, so any number of threads can share an
engine and each gets exactly the result it would get alone.

The parts — the plain logic in functions that need no model, each testable alone:

- :mod:`.config` — :class:`EngineConfig`, every tuned constant as a documented, validated setting,
  with per-device defaults (``engine.config``);
- :mod:`.planning` — :func:`~.planning.plan_batches` (which rows run together under the size, token
  and logits budgets), :func:`~.planning.split_unpadded`, and the out-of-memory retry;
- :mod:`.prefixtree` — :func:`~.prefixtree.common_prefix` and :func:`~.prefixtree.prefix_groups` (a
  batch split into groups sharing a prefix, by dynamic programming);
- :mod:`.prefill` — group prefill continuing earlier groups' prefixes, and cache stacking;
- :mod:`.drafting` — :class:`~.drafting.PromptLookup`, ``propose(history) -> draft``;
- :mod:`.decode` — the decode loop (verifying drafts) and teacher forcing;
- :mod:`.kvcache` (decode cache with reserved room), :mod:`.kernels` (CPU linear kernels), :mod:`.types`
  (results) and :mod:`.core` (the Engine, built from the parts above, and ``get_engine``).
"""

from .config import EngineConfig
from .core import Engine, get_engine
from .drafting import PromptLookup
from .types import Generation, TokenStats

__all__ = ["Engine", "EngineConfig", "get_engine", "Generation", "TokenStats", "PromptLookup"]
