"""The target LLM as the integrations receive it: the parts that do not depend on the framework.

A user passes ``model=`` to a reranker or an influence handler as a model name, a grogu engine, a
framework LLM wrapper (which each integration resolves to an engine itself), a ready scorer, or the
shared scoring service (a URL, a :class:`grogu.RemoteScorer` or a :class:`grogu.RemoteInfluenceScorer`).
This module tells the service apart (:func:`remote_target`), names an engine's model
(:func:`engine_label`) and builds the Influence scorer from any of them (:func:`build_influence_scorer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .engine import Engine
from .influence import InfluenceScorer


def remote_target(model: Any) -> Any:
    """The service client when ``model`` is a grogu service URL (``http(s)://...``) or a remote scorer
    (``grogu.RemoteScorer``, ``grogu.RemoteInfluenceScorer``), else None."""
    from .serve import RemoteInfluenceScorer, RemoteScorer, is_url  # the client needs httpx: imported on use

    if is_url(model) or isinstance(model, (RemoteScorer, RemoteInfluenceScorer)):
        return model
    return None


def engine_label(engine: Engine) -> str:
    """A readable name of an engine's model: the name it was loaded by, else the loaded model's
    ``config._name_or_path``, else its class name."""
    name = engine.model_name
    if isinstance(name, str) and name:
        return name
    return type(engine.model).__name__


def build_influence_scorer(model: Any, *, resolve_engine: Callable[[Any, str | None, str | None], Engine],
                           model_label: Callable[[Any, Engine], str], embedder: Any = "all-minilm-l6-v2",
                           device: str | None = None, dtype: str | None = None,
                           **settings: Any) -> tuple[Any, str]:
    """The Influence scorer for ``model`` and a readable name of the target LLM.

    ``model``: a ``grogu.RemoteInfluenceScorer`` or a ready ``InfluenceScorer`` (used as they are), a
    service URL or a ``grogu.RemoteScorer`` (the service's influence route, with ``settings``; the
    service's own embedder), or anything ``resolve_engine(model, device, dtype)`` turns into an engine
    (the framework's own resolution of its LLM wrappers), scored in this process with ``embedder``.
    ``settings``: what both scorers take (``max_new_tokens``, ``template``, ``method``,
    ``n_ablations``, ``seed``, ``lasso_alpha``). ``model_label(model, engine)`` names the target LLM of
    an in-process scorer.
    """
    remote = remote_target(model)
    if remote is not None:
        return _remote_influence_scorer(remote, device, dtype, **settings)
    if isinstance(model, InfluenceScorer):
        return model, model_label(model, model.engine)
    engine = resolve_engine(model, device, dtype)
    scorer = InfluenceScorer(engine, embedder=embedder, device=device, **settings)
    return scorer, model_label(model, engine)


def _remote_influence_scorer(remote: Any, device: str | None, dtype: str | None, **settings: Any) -> tuple[Any, str]:
    """A RemoteInfluenceScorer as given, or one on the service's influence route with ``settings``."""
    from .serve import RemoteInfluenceScorer

    if isinstance(remote, RemoteInfluenceScorer):
        return remote, remote.model_name
    if device is not None or dtype is not None:
        raise ValueError("device/dtype apply to a model loaded here; the grogu service chooses its own")
    scorer = RemoteInfluenceScorer(remote if isinstance(remote, str) else remote.transport, **settings)
    return scorer, scorer.model_name


__all__ = ["remote_target", "engine_label", "build_influence_scorer"]
