"""The research harness, apart from the plug-in: the papers' experiments (:mod:`grogu.harness.experiments`,
``grogu eval``), GROGU-ranked query-rewrite data and the rewriter's trainer (:mod:`grogu.harness.rewrite`,
``grogu rewrite-pairs``, ``grogu train-rewriter``), and the BM25 / dense retrievers they share
(:mod:`grogu.harness.retrieval`).

The import direction is one way: the harness uses the plug-in (scorer, engine, metrics, ...), and no module
of the plug-in imports the harness (``tests/test_architecture.py`` checks it); the command line reaches it
only through the names of its subcommands.
"""
