"""The rerank layer: from a query and documents to the documents to keep.

Its settings (:mod:`.settings`: ``ModeSettings``; its names are also this package's, as the old module
``grogu.rerank`` had them) and modes (:mod:`.modes`, a registry), the one rerank pipeline
(:mod:`.pipeline`), selection rules (:mod:`.selection`), context scoring and the scorer
(:mod:`.context_scoring`, :mod:`.scorer`), the factory that turns whatever a user passes into a scorer
(:mod:`.factory`), batch scoring (:mod:`.batch`), retrieval (:mod:`.retrieval`) and the scoring service's
client (:mod:`.remote`: the scorer's interface over HTTP, so it stands where the scorer stands). It imports
the core, runtime and metrics layers only.
"""

from .settings import *  # noqa: F401,F403 - the old module grogu.rerank is this package


def __getattr__(name: str):
    """Every other name of the old module ``grogu.rerank`` (its constants and helpers), from :mod:`.settings`."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(importlib.import_module(f"{__name__}.settings"), name)
    except AttributeError:
        raise AttributeError(f"module 'grogu.rerank' has no attribute {name!r}") from None
