"""Sampled decoding draws on the model's device from counter-based random numbers
(:mod:`grogu.runtime.engine.sampling`): the same distribution as ``torch.multinomial`` on the tempered
probabilities, tested by chi-square against the exact probabilities and against multinomial's own draws;
the random numbers against a plain-Python writing of the same hash, and for uniformity and independence.
Seeded, so each run draws the same samples; a wrong temperature or a biased number is rejected, so the
tests can fail."""

from __future__ import annotations

import hashlib

import pytest
import torch

from grogu.runtime.engine.sampling import row_keys, sample_rows, uniforms

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


def _draw(logits, keys, counters, alive=None) -> torch.Tensor:
    alive = torch.ones(len(keys), dtype=torch.bool) if alive is None else torch.tensor(alive)
    return sample_rows(logits, TEMPERATURE, torch.tensor(keys), torch.as_tensor(counters), alive)


def _draws() -> torch.Tensor:
    """DRAWS tokens per row of LOGITS, each row its own key, draws 0..DRAWS-1: [DRAWS, rows]."""
    keys = row_keys([[1], [2], [3]], seed=11)
    counters = torch.arange(DRAWS).repeat_interleave(3)  # draw i of every row, then draw i + 1
    out = _draw(LOGITS.repeat(DRAWS, 1), keys * DRAWS, counters)
    return out[:, 0].long().view(DRAWS, 3)


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
    keys = row_keys([[1], [2], [3]], seed=3)
    out = _draw(LOGITS, keys, [4, 4, 4], [True, False, True])
    tokens = out[:, 0].long()
    assert tokens[1] == -1 and out[1, 1] == 0.0
    logp = torch.log_softmax(LOGITS, dim=-1)
    for row in (0, 2):
        assert torch.isclose(out[row, 1], logp[row, tokens[row]])
    again = _draw(LOGITS, keys, [4, 4, 4])  # a draw is a function of its key and number alone
    assert torch.equal(again[[0, 2]], out[[0, 2]])


def test_a_row_draws_the_same_whatever_the_other_rows():
    """50 draws of the row of prompt [7]: alone, and beside another row (its key, its samples)."""
    alone_k, mixed_k = row_keys([[7]], seed=2), row_keys([[7], [8]], seed=2)
    assert alone_k[0] == mixed_k[0]
    alone = [int(_draw(LOGITS[:1], alone_k, [i])[0, 0]) for i in range(50)]
    mixed = [int(_draw(LOGITS[[0, 2]], mixed_k, [i, 49 - i])[0, 0]) for i in range(50)]
    assert alone == mixed and len(set(alone)) > 1


def _mix32(x: int) -> int:  # MurmurHash3's finaliser, in plain Python integers
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _uniform(key: int, counter: int) -> float:
    lo, hi = key & 0xFFFFFFFF, key >> 32
    a = _mix32(_mix32(_mix32(counter) ^ lo) ^ hi)
    b = _mix32(_mix32(a ^ 0x9E3779B9) ^ lo)
    return ((a << 21) | (b >> 11)) / 2.0**53


def test_uniforms_equal_the_hash_written_in_plain_python():
    pairs = [(0, 0), (1, 0), (0, 1), (2**63 - 1, 2**32 - 1), (0x0123456789ABCDEF, 12345), (2**62 + 7, 2**31)]
    pairs += [
        (int.from_bytes(hashlib.sha256(str(i).encode()).digest()[:8], "little") >> 1, i * 7919) for i in range(50)
    ]
    keys, counters = (torch.tensor(list(c)) for c in zip(*pairs))
    got = uniforms(keys, counters)
    assert got.dtype == torch.float64
    assert got.tolist() == [_uniform(k, c) for k, c in pairs]
    assert ((got >= 0) & (got < 1)).all()


def test_uniforms_are_uniform_and_independent():
    """200,000 numbers of one key (draws 0..), and the first draw of 200,000 keys: Kolmogorov-Smirnov
    against U(0, 1), and the correlation of consecutive draws; u ** 1.02 is rejected (power)."""
    n = 200_000
    one_key = uniforms(torch.full((n,), 0x5EED), torch.arange(n)).numpy()
    keys = torch.tensor(row_keys([[i] for i in range(n)], seed=0))
    first = uniforms(keys, torch.zeros(n, dtype=torch.long)).numpy()
    for u in (one_key, first):
        assert scipy_stats.kstest(u, "uniform").pvalue > 1e-3
        assert scipy_stats.kstest(u**1.02, "uniform").pvalue < 1e-6
        assert abs(scipy_stats.pearsonr(u[:-1], u[1:]).statistic) < 0.01  # |r| of independent draws: ~0.002
