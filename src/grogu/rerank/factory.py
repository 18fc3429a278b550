"""The target LLM as the integrations receive it: the parts that do not depend on the framework.

A user passes ``model=`` to a reranker or an influence handler as a model name, a grogu engine, a
framework LLM wrapper (which each integration resolves to an engine, or to a
:class:`grogu.ServerTarget` for an LLM behind an inference server, itself), a ready scorer, or the
shared scoring service (a URL, a :class:`grogu.RemoteScorer` or a :class:`grogu.RemoteInfluenceScorer`).
This module says what a scorer is (:class:`Scorer`), tells the service apart (:func:`remote_target`),
names an engine's model (:func:`engine_label`) and builds the utility scorer
(:func:`build_scorer`) and the Influence scorer (:func:`build_influence_scorer`) from any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ..core.prompts import PromptTemplate
from ..metrics.influence import InfluenceScorer
from ..runtime.engine import Engine
from ..runtime.engine.config import configure_engine
from .scorer import UtilityScorer


@runtime_checkable
class Scorer(Protocol):
    """What the integrations score with: :class:`grogu.UtilityScorer` (in this process, on an engine or
    a ServerTarget) and :class:`grogu.RemoteScorer` (the ``grogu serve`` service) both are one."""

    model_name: str
    metric: str

    @property
    def template(self) -> PromptTemplate: ...

    def score(self, query: str, documents: Sequence[Any], *, return_details: bool = False) -> list: ...

    def score_contexts(
        self, query: str, contexts: Sequence[Sequence[Any]], *, return_details: bool = False
    ) -> list: ...

    def rerank(self, query: str, documents: Sequence[Any], *args: Any, **kwargs: Any) -> list:
        """The arguments of :func:`grogu.rerank.arguments.rerank_arguments`."""

    async def arerank(self, query: str, documents: Sequence[Any], *args: Any, **kwargs: Any) -> list:
        """Async :meth:`rerank`."""

    def best_layout(self, query: str, layouts: Sequence[Sequence[Any]]) -> Any: ...

    async def abest_layout(self, query: str, layouts: Sequence[Sequence[Any]]) -> Any: ...


def remote_target(model: Any) -> Any:
    """The service client when ``model`` is a grogu service URL (``http(s)://...``) or a remote scorer
    (``grogu.RemoteScorer``, ``grogu.RemoteInfluenceScorer``), else None."""
    from .remote import is_url

    # the client needs httpx and pydantic: imported on use
    from .remote.client import RemoteInfluenceScorer, RemoteScorer

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


def build_scorer(
    model: Any,
    settings: Any,
    *,
    resolve_engine: Callable[[Any, str | None, str | None], Any],
    model_label: Callable[[Any, Any], str],
    template: PromptTemplate | None = None,
    max_new_tokens: int | None = None,
    **options: Any,
) -> tuple[Scorer, str]:
    """The utility :class:`Scorer` for ``model`` and a readable name of the target LLM: the one place an
    integration's ``model=`` becomes a scorer.

    ``model``: a service URL or a ``grogu.RemoteScorer`` (the service's client; node and document
    metadata stay in this process), else anything ``resolve_engine(model, device, dtype)`` turns into an
    engine or a ServerTarget (the framework's own resolution of its LLM objects), scored here.
    ``settings``: the integration itself, a :class:`grogu.apps.integration_settings.SharedSettings`, passed
    whole: its ``metric`` and ``answer_style`` go to the scorer; ``device``, ``dtype``, ``batch_size`` and
    ``engine_config`` to a model run here (:func:`grogu.runtime.engine.config.configure_engine`; for
    anything else they are an error). ``template`` and ``max_new_tokens``: the prompt and answer budget
    the integration resolved. ``options``: more :class:`grogu.UtilityScorer` settings (``alpha`` ...).
    """
    s = settings
    if s.batch_size is not None and s.engine_config is not None:
        raise ValueError("give batch_size or engine_config (which holds max_batch_size), not both")
    options = {
        "metric": s.metric,
        "answer_style": s.answer_style,
        "template": template,
        "max_new_tokens": max_new_tokens,
        **options,
    }
    remote = remote_target(model)
    if remote is not None:
        if s.device is not None or s.dtype is not None:
            raise ValueError("device/dtype apply to a model loaded here; the grogu service chooses its own")
        if s.batch_size is not None or s.engine_config is not None:
            raise ValueError("batch_size/engine_config apply to a model run here; the grogu service chooses its own")
        from .remote.client import RemoteScorer

        scorer = (RemoteScorer(remote) if isinstance(remote, str) else remote).with_settings(**options)
        return scorer, scorer.model_name
    engine = resolve_engine(model, s.device, s.dtype)
    if s.batch_size is not None or s.engine_config is not None:
        if not hasattr(engine, "config"):
            raise ValueError(f"batch_size/engine_config apply to a model run here, not to {type(engine).__name__}")
        configure_engine(engine, batch_size=s.batch_size, config=s.engine_config)
    return UtilityScorer(engine, **options), model_label(model, engine)


def build_influence_scorer(
    model: Any,
    *,
    resolve_engine: Callable[[Any, str | None, str | None], Engine],
    model_label: Callable[[Any, Engine], str],
    embedder: Any = "all-minilm-l6-v2",
    device: str | None = None,
    dtype: str | None = None,
    **settings: Any,
) -> tuple[Any, str]:
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
        return model, model_label(model, model.target)
    engine = resolve_engine(model, device, dtype)
    scorer = InfluenceScorer(engine, embedder=embedder, device=device, **settings)
    return scorer, model_label(model, engine)


def _remote_influence_scorer(remote: Any, device: str | None, dtype: str | None, **settings: Any) -> tuple[Any, str]:
    """A RemoteInfluenceScorer as given, or one on the service's influence route with ``settings``."""
    from .remote.client import RemoteInfluenceScorer

    if isinstance(remote, RemoteInfluenceScorer):
        return remote, remote.model_name
    if device is not None or dtype is not None:
        raise ValueError("device/dtype apply to a model loaded here; the grogu service chooses its own")
    scorer = RemoteInfluenceScorer(remote if isinstance(remote, str) else remote.transport, **settings)
    return scorer, scorer.model_name


__all__ = ["Scorer", "remote_target", "engine_label", "build_scorer", "build_influence_scorer"]
