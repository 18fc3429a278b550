"""grogu's research harness, apart from the plug-in's wheel: the papers' experiments
(:mod:`grogu_research.experiments`, ``grogu-research eval``), GROGU-ranked query-rewrite data and the
rewriter's trainer (:mod:`grogu_research.rewrite`, ``grogu-research rewrite-pairs`` and
``train-rewriter``), the plain reference computation (:mod:`grogu_research.naive`) and the helpers of the
tests, examples and benchmarks (:mod:`grogu_research.testing`).

The retrievers it shares with ``grogu audit`` are in the plug-in (:mod:`grogu.rerank.retrieval`). The import
direction is one way: this package uses the plug-in, and the plug-in never imports it
(``tests/test_architecture.py`` checks it).
"""
