"""8 threads call score at once, then exit."""

import threading

from _common import DOCS, QUERIES, make_scorer

scorer = make_scorer()
results = {}


def work(i):
    results[i] = scorer.score(QUERIES[i], DOCS)


threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert sorted(results) == list(range(8))
print("ok")
