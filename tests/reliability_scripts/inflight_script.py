"""The process ends while async requests are still being scored (a server stopping, a batch job
giving up on a request): asyncio.run cancels their tasks and the interpreter exits with engine work
in flight on grogu's worker thread, which finishes it before the interpreter finalises."""

import asyncio

from _common import DOCS, QUERIES, make_scorer

scorer = make_scorer()


async def main():
    tasks = [asyncio.ensure_future(scorer.ascore(q, DOCS * 2)) for q in QUERIES[:8]]
    await asyncio.sleep(0.05)  # the batch is running now; leave without awaiting it
    return tasks


asyncio.run(main())
print("ok")
