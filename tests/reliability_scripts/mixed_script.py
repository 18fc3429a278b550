"""Threads call score, then 16 concurrent async callers (with per-token details), then exit."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from _common import DOCS, QUERIES, make_scorer

scorer = make_scorer()
with ThreadPoolExecutor(4) as pool:
    counts = list(pool.map(lambda q: len(scorer.score(q, DOCS, return_details=True)), QUERIES[:8]))
assert counts == [len(DOCS)] * 8


async def main():
    results = await asyncio.gather(*(scorer.ascore(q, DOCS, return_details=True) for q in QUERIES))
    return [len(r) for r in results]


assert asyncio.run(main()) == [len(DOCS)] * len(QUERIES)
print("ok")
