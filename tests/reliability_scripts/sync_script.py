"""Plain sync use: score a few queries one after another, then exit."""

from _common import DOCS, QUERIES, make_scorer

scorer = make_scorer()
for q in QUERIES[:4]:
    assert len(scorer.score(q, DOCS)) == len(DOCS)
print("ok")
