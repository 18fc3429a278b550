"""The prefix tree of a batch: which rows are encoded together, sharing which prefix.

Plain logic on token lists, no model: :func:`common_prefix` (the one longest-common-prefix of the
engine) and :func:`prefix_groups`, the split of a batch into groups whose shared prefix is encoded
once (:mod:`grogu.runtime.engine.prefill` encodes them).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence


class PrefixGroup(NamedTuple):
    """Rows of a batch encoded together: their ``prefix`` first tokens are equal and encoded once."""

    rows: list[int]  # indices into the batch, in token order
    prefix: int  # tokens shared by every row of the group


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    m = min(len(a), len(b))
    k = 0
    while k < m and a[k] == b[k]:
        k += 1
    return k


def _run_tables(
    seqs: Sequence[Sequence[int]], order: list[int], cap: list[int], adjacent: list[int], min_shared_prefix: int
) -> tuple[list[list[int]], list[list[int]]]:
    """(prefix, longest): prefix[a][b] is the prefix run order[a..b] shares (0 where it saves fewer than
    ``min_shared_prefix`` tokens), longest[a][b] its longest row."""
    n = len(order)
    prefix = [[0] * n for _ in range(n)]
    longest = [[0] * n for _ in range(n)]
    for a in range(n):
        p, w = cap[a], len(seqs[order[a]])
        prefix[a][a], longest[a][a] = p, w
        for b in range(a + 1, n):
            p, w = min(p, adjacent[b - 1], cap[b]), max(w, len(seqs[order[b]]))
            prefix[a][b] = p if (b - a) * p >= min_shared_prefix else 0
            longest[a][b] = w
    return prefix, longest


def prefix_groups(
    seqs: Sequence[Sequence[int]], limits: Sequence[int], *, min_shared_prefix: int, group_overhead_tokens: int
) -> list[PrefixGroup]:
    """Split a batch into groups of rows that share a prefix: returns the :class:`PrefixGroup` s
    (row indices, prefix length) in token order. Each group's prefix is encoded once (at batch size 1), continuing the cache of
    the earlier groups' prefixes where they agree, and its rows' rests are encoded together, padded
    to the group's longest. Rows are sorted by their tokens, so long common prefixes are neighbours;
    the split of that order into runs minimises (dynamic programming) the tokens computed —
    prefixes as a prefix tree (the part a run shares with the run before it costs nothing), each
    run's rows padded to its longest rest — plus ``group_overhead_tokens`` per run. A prefix that
    saves fewer than ``min_shared_prefix`` tokens is not shared. E.g. the leave-one-out prompts of the
    Influence Score: the i-th shares documents 1..i-1 with the full prompt. Row j reuses at most
    ``limits[j]`` of its tokens."""
    n = len(seqs)
    order = sorted(range(n), key=lambda i: seqs[i])
    cap = [max(0, min(limits[i], len(seqs[i]))) for i in order]
    adjacent = [common_prefix(seqs[x], seqs[y]) for x, y in zip(order, order[1:])]  # neighbours' LCP
    prefix, longest = _run_tables(seqs, order, cap, adjacent, min_shared_prefix)

    def cost(a: int, b: int, reuse: int) -> int:  # run a..b after a run whose prefix shares `reuse`
        p = prefix[a][b]
        return p - min(p, reuse) + (b - a + 1) * (longest[a][b] - p) + group_overhead_tokens

    inf = float("inf")
    best = [[inf] * n for _ in range(n)]  # best[a][b]: first b+1 rows, last run a..b
    back = [[-1] * n for _ in range(n)]
    for b in range(n):
        best[0][b] = cost(0, b, 0)
        for a in range(1, b + 1):
            for a0 in range(a):  # the run before: a0..a-1
                if best[a0][a - 1] == inf:
                    continue
                reuse = min(prefix[a0][a - 1], adjacent[a - 1])
                c = best[a0][a - 1] + cost(a, b, reuse)
                if c < best[a][b]:
                    best[a][b], back[a][b] = c, a0
    a = min(range(n), key=lambda i: best[i][n - 1])
    groups, b = [], n - 1
    while True:
        groups.append(PrefixGroup([order[i] for i in range(a, b + 1)], prefix[a][b]))
        if a == 0:
            break
        a, b = back[a][b], a - 1
    return groups[::-1]
