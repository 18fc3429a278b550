"""Teacher forcing plans its batches in prefix-tree order: prompts that share a prefix share a batch."""

from __future__ import annotations

import numpy as np
import torch

from grogu import Engine
from grogu.naive import forward_stats
from grogu.testing import tiny_model

TOL = 1e-4


def masked_prompts(k: int = 6, m: int = 24, doc_len: int = 12) -> list[list[int]]:
    """ContextCite-like prompts: a header, then the documents a random mask keeps, then a question."""
    rng = np.random.default_rng(0)
    docs = [list(range(100 + 20 * i, 100 + 20 * i + doc_len)) for i in range(k)]
    masks = rng.random((m, k)) < 0.5
    return [[1, 2, 3] + [t for d, keep in zip(docs, row) if keep for t in d] + [7, 8] for row in masks]


def test_logit_plan_is_in_token_order_and_not_length_bucketed(tokenizer):
    engine = Engine(tiny_model("llama"), tokenizer, device="cpu")
    prompts = [[5, 9, 9, 9, 9, 9], [5, 1], [5, 9, 9, 9, 9, 9, 9, 9], [4]]
    lengths = [len(p) + 2 for p in prompts]
    # teacher forcing: token order ([4] < [5, 1] < [5, 9, ...] < [5, 9, ..., 9]) in one batch
    assert engine._plan(lengths, logit_rows=[2] * 4, prompts=prompts) == [[3, 1, 0, 2]]
    # decoding keeps the length buckets: short rows are not padded to the widest
    assert engine._plan(lengths, prompts=prompts) == [[2, 0], [1, 3]]


def test_masked_prompts_over_several_batches_equal_one_at_a_time(tokenizer):
    engine = Engine(tiny_model("llama"), tokenizer, device="cpu")
    prompts = masked_prompts()
    conts = [[40, 41, 42, 43]] * len(prompts)
    engine.max_batch_size = 6  # four batches
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
    by_length = engine._plan([len(s) for s in seqs], prompts=prompts)
    for batch in by_length:
        list(engine._encode([seqs[i] for i in batch], 4, [len(prompts[i]) - 1 for i in batch]))
    assert encoded < engine.prefill_tokens
