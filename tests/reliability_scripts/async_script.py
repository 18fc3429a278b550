"""16 concurrent async callers (asyncio.gather of ascore, with per-token details), then exit.

Only a summary outlives the event loop, so the results (and their tensors) are released by whichever
thread drops them last, possibly grogu's worker, just as the interpreter finalises."""

import asyncio

from _common import DOCS, QUERIES, make_scorer

scorer = make_scorer()


async def main():
    results = await asyncio.gather(*(scorer.ascore(q, DOCS, return_details=True) for q in QUERIES))
    return [len(r) for r in results]


assert asyncio.run(main()) == [len(DOCS)] * len(QUERIES)
print("ok")
