"""Sampled decoding draws on the model's device (:func:`grogu.runtime.engine.decode.sample_rows`): the same
distribution as the eager path it replaced (``torch.multinomial`` per row on host copies of the
probabilities), tested by chi-square against the exact probabilities and against multinomial's own draws.
Seeded, so each run draws the same samples; a wrong temperature is rejected, so the test can fail."""

from __future__ import annotations

import pytest
import torch

from grogu.runtime.engine.decode import row_generators, sample_rows

scipy_stats = pytest.importorskip("scipy.stats")

LOGITS = torch.tensor(
    [
        [2.0, 1.0, 0.5, 0.0, -1.0, -3.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [4.0, -2.0, 3.5, 1.0, -5.0, 0.2],
    ]
)
TEMPERATURE = 0.7
DRAWS = 6000


def _draws() -> torch.Tensor:
    """DRAWS tokens per row of LOGITS, each row from its own generator: [DRAWS, rows]."""
    generators = row_generators([[1], [2], [3]], seed=11)
    return torch.stack([sample_rows(LOGITS, TEMPERATURE, generators, [True] * 3)[:, 0].long() for _ in range(DRAWS)])


def _counts(tokens: torch.Tensor) -> torch.Tensor:
    return torch.bincount(tokens, minlength=LOGITS.shape[1]).double()


def test_samples_follow_the_tempered_distribution_as_multinomial_does():
    draws = _draws()
    expected = torch.softmax(LOGITS.double() / TEMPERATURE, dim=-1)
    g = torch.Generator().manual_seed(5)
    eager = torch.multinomial(torch.softmax(LOGITS / TEMPERATURE, dim=-1), DRAWS, replacement=True, generator=g)
    for row in range(LOGITS.shape[0]):
        counts = _counts(draws[:, row])
        keep = expected[row] * DRAWS >= 5  # chi-square's rule: cells expected at least 5 times
        rest = float(counts[~keep].sum()), float(expected[row][~keep].sum() * DRAWS)
        observed = torch.cat([counts[keep], torch.tensor([rest[0]])]).numpy()
        wanted = torch.cat([expected[row][keep] * DRAWS, torch.tensor([rest[1]])]).numpy()
        if rest[1] == 0:
            observed, wanted = observed[:-1], wanted[:-1]
        assert scipy_stats.chisquare(observed, wanted).pvalue > 1e-3, row
        # the eager path's draws of the same distribution: one population (a two-sample chi-square)
        table = torch.stack([counts, _counts(eager[row])])
        table = table[:, table.sum(0) > 0].numpy()
        assert scipy_stats.chi2_contingency(table).pvalue > 1e-3, row
        # the test has power: the untempered distribution is rejected for the rows that are not flat
        if row != 1:
            untempered = torch.softmax(LOGITS[row].double(), dim=-1) * DRAWS
            cells = untempered >= 5
            assert (
                scipy_stats.chisquare(
                    counts[cells].numpy(),
                    untempered[cells].numpy() * counts[cells].sum().item() / untempered[cells].sum().item(),
                ).pvalue
                < 1e-6
            )


def test_each_draw_carries_its_untempered_log_probability_and_dead_rows_draw_nothing():
    generators = row_generators([[1], [2], [3]], seed=3)
    before = generators[1].get_state().clone()
    out = sample_rows(LOGITS, TEMPERATURE, generators, [True, False, True])
    tokens = out[:, 0].long()
    assert tokens[1] == -1 and out[1, 1] == 0.0
    assert torch.equal(generators[1].get_state(), before)  # a finished row's generator does not move
    logp = torch.log_softmax(LOGITS, dim=-1)
    for row in (0, 2):
        assert torch.isclose(out[row, 1], logp[row, tokens[row]])


def test_a_row_draws_the_same_whatever_the_other_rows():
    """50 draws of the row of prompt [7]: alone, and beside another row (its generator, its samples)."""
    alone_g, mixed_g = row_generators([[7]], seed=2), row_generators([[7], [8]], seed=2)
    alone = [int(sample_rows(LOGITS[:1], 1.0, alone_g, [True])[0, 0]) for _ in range(50)]
    mixed = [int(sample_rows(LOGITS[[0, 2]], 1.0, mixed_g, [True, True])[0, 0]) for _ in range(50)]
    assert alone == mixed and len(set(alone)) > 1
