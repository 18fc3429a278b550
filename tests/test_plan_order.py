"""Teacher forcing plans its batches in prefix-tree order: prompts that share a prefix share a batch
(the plan itself, without a model: tests/test_engine_parts.py)."""

from __future__ import annotations

import numpy as np
import torch
from grogu_research.naive import forward_stats
from grogu_research.testing import tiny_model

from grogu import Engine
from grogu.runtime.engine.planning import plan_batches

TOL = 1e-4


def _limits(engine: Engine) -> dict:
    """plan_batches' limits under an engine's settings (the logits budget is far from binding here)."""
    return dict(
        max_batch_size=engine.config.max_batch_size,
        max_batch_tokens=engine.config.max_batch_tokens,
        min_batch_fill=engine.config.min_batch_fill,
    )


def masked_prompts(k: int = 6, m: int = 24, doc_len: int = 12) -> list[list[int]]:
    """ContextCite-like prompts: a header, then the documents a random mask keeps, then a question."""
    rng = np.random.default_rng(0)
    docs = [list(range(100 + 20 * i, 100 + 20 * i + doc_len)) for i in range(k)]
    masks = rng.random((m, k)) < 0.5
    return [[1, 2, 3] + [t for d, keep in zip(docs, row) if keep for t in d] + [7, 8] for row in masks]


def test_masked_prompts_over_several_batches_equal_one_at_a_time(tokenizer):
    engine = Engine(tiny_model("llama"), tokenizer, device="cpu", max_batch_size=6)  # four batches
    prompts = masked_prompts()
    conts = [[40, 41, 42, 43]] * len(prompts)
    lengths = [len(p) + len(c) for p, c in zip(prompts, conts)]
    planned = plan_batches(lengths, logit_rows=[len(c) for c in conts], prompts=prompts, **_limits(engine))
    assert len(planned) == 4 and all(len(b) <= 6 for b in planned)
    engine.prefill_tokens = 0
    stats = engine.token_stats(prompts, conts)
    encoded = engine.prefill_tokens
    for p, c, s in zip(prompts, conts, stats):
        h, lp = forward_stats(engine.model, p, c)
        torch.testing.assert_close(s.entropy, h, atol=TOL, rtol=0)
        torch.testing.assert_close(s.logprob, lp, atol=TOL, rtol=0)
    # the same rows planned by length first (as decoding plans them) encode more
    engine.prefill_tokens = 0
    seqs = [p + c[:-1] for p, c in zip(prompts, conts)]
    by_length = plan_batches([len(s) for s in seqs], prompts=prompts, **_limits(engine))
    for batch in by_length:
        list(engine.prefill.encode([seqs[i] for i in batch], 4, engine.config, [len(prompts[i]) - 1 for i in batch]))
    assert encoded < engine.prefill_tokens
