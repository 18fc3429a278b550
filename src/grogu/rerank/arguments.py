"""The arguments of ``rerank`` and ``arerank``, written once.

:class:`grogu.UtilityScorer`, :class:`grogu.RemoteScorer` and the :class:`grogu.rerank.factory.Scorer`
protocol all take :func:`rerank_arguments`'s arguments. Each implementation is written as
``method(self, call: RerankCall)`` under :func:`takes_rerank_arguments`, which binds the caller's
arguments and shows them in ``help()`` and ``inspect.signature``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from typing_extensions import Unpack

from .settings import DEFAULT_TOP_N, ModeOverrides, ModeSettings


@dataclass(frozen=True)
class RerankCall:
    """One rerank call's arguments (see :func:`rerank_arguments`)."""

    query: Any
    documents: Sequence[Any]
    top_n: int | None = DEFAULT_TOP_N
    threshold: float | None = None
    settings: ModeSettings | str | None = None
    relevance: Sequence[float] | None = None
    return_details: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)


def rerank_arguments(
    query: str,
    documents: Sequence[Any],
    top_n: int | None = DEFAULT_TOP_N,
    threshold: float | None = None,
    *,
    settings: ModeSettings | str | None = None,
    relevance: Sequence[float] | None = None,
    return_details: bool = False,
    **overrides: Unpack[ModeOverrides],
) -> RerankCall:
    """``rerank(query, documents, top_n=3, threshold=None, *, settings=None, relevance=None,
    return_details=False, **overrides)``: the documents to rerank for ``query``; ``top_n`` kept (None:
    all); ``threshold`` on the per-document modes' utility; ``settings`` (a :class:`grogu.ModeSettings`, or
    a ``grogu tune`` settings file) with each setting given by name in ``overrides`` (``mode=``,
    ``gate=`` ...) replacing its value; ``relevance``, the retriever's scores; ``return_details``, the
    per-token numbers. :meth:`grogu.UtilityScorer.rerank` says what each mode does."""
    return RerankCall(query, documents, top_n, threshold, settings, relevance, return_details, dict(overrides))


#: self, then rerank_arguments' parameters
_PARAMETERS = [
    inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    *inspect.signature(rerank_arguments).parameters.values(),
]


def takes_rerank_arguments(method: Callable[[Any, RerankCall], Any]) -> Callable[..., Any]:
    """``method(self, call)`` called as ``rerank(query, documents, ...)``: the arguments bound by
    :func:`rerank_arguments` into one :class:`RerankCall`. Sync or async, as ``method`` is."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def bound(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await method(self, rerank_arguments(*args, **kwargs))

    else:

        @functools.wraps(method)
        def bound(self: Any, *args: Any, **kwargs: Any) -> Any:
            return method(self, rerank_arguments(*args, **kwargs))

    returns = inspect.signature(method).return_annotation
    bound.__dict__["__signature__"] = inspect.Signature(_PARAMETERS, return_annotation=returns)
    return bound


__all__ = ["RerankCall", "rerank_arguments", "takes_rerank_arguments"]
