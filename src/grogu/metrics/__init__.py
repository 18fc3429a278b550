"""The metrics layer: the four published metrics, computed from token statistics.

The GROGU family (:mod:`.grogu`, pure functions over tensors; its names are also this package's, as the
old module ``grogu.metrics`` had them), ΔSePer (:mod:`.seper`), ACU (:mod:`.acu`), the Influence Score
(:mod:`.influence`) with its attribution methods (:mod:`.attribution`), and the probability scales of metric
values (:mod:`.scales`); their names and defaults without tensor code (:mod:`.defaults`). It imports
the core and runtime layers only.
"""

#: this package's modules (``from grogu.metrics import results`` imports that one, not :mod:`.grogu`)
_SUBMODULES = ("acu", "attribution", "defaults", "grogu", "influence", "results", "scales", "seper")


def __getattr__(name: str):
    """The names of the old module ``grogu.metrics`` (the GROGU family), from :mod:`.grogu`, imported on
    first use: ``grogu.metrics.defaults`` alone loads no tensor code."""
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from grogu.metrics import defaults`` imports that module alone
        return importlib.import_module(f"{__name__}.{name}")
    try:
        return getattr(importlib.import_module(f"{__name__}.grogu"), name)
    except AttributeError:
        raise AttributeError(f"module 'grogu.metrics' has no attribute {name!r}") from None
