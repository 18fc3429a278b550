"""The shared scoring service: ``grogu serve`` runs engines on Ray Serve (``pip install "grogu[serve]"``);
:class:`RemoteScorer` and :class:`RemoteInfluenceScorer` use it from any process with the in-process
classes' methods and results. The clients live in :mod:`grogu.rerank.remote` (they need ``httpx`` and
``pydantic``: extra ``server``) and are named here too, imported on first use; Ray is imported by the
server side (:mod:`grogu.apps.serve.service`) alone; ``grogu score --ray`` runs Ray Data from :mod:`grogu.rerank.batch`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.exports import lazy_names

if TYPE_CHECKING:  # what static tools see; at run time each name is imported on first use
    from grogu.rerank.remote import is_url  # noqa: F401
    from grogu.rerank.remote.client import RemoteACUScorer, RemoteInfluenceScorer, RemoteScorer, RemoteSePerScorer  # noqa: F401
    from grogu.rerank.remote.transport import (  # noqa: F401
        ServiceAuthError,
        ServiceError,
        ServiceTypeError,
        ServiceUnavailable,
        ServiceValueError,
        Transport,
    )

#: the client's names, as this package has always offered them
_CLIENT = {
    "RemoteScorer": "grogu.rerank.remote.client",
    "RemoteInfluenceScorer": "grogu.rerank.remote.client",
    "RemoteSePerScorer": "grogu.rerank.remote.client",
    "RemoteACUScorer": "grogu.rerank.remote.client",
    "Transport": "grogu.rerank.remote.transport",
    "ServiceError": "grogu.rerank.remote.transport",
    "ServiceValueError": "grogu.rerank.remote.transport",
    "ServiceTypeError": "grogu.rerank.remote.transport",
    "ServiceAuthError": "grogu.rerank.remote.transport",
    "ServiceUnavailable": "grogu.rerank.remote.transport",
    "is_url": "grogu.rerank.remote",
}

__all__ = list(_CLIENT)
__getattr__, __dir__ = lazy_names(__name__, _CLIENT)
