"""The shared scoring service: ``grogu serve`` runs engines on Ray Serve (``pip install "grogu[serve]"``);
:class:`RemoteScorer` and :class:`RemoteInfluenceScorer` use it from any process with the in-process
classes' methods and results. The client needs only ``httpx``; Ray is imported by the server side
(:mod:`grogu.serve.service`) alone; ``grogu score --ray`` runs Ray Data from :mod:`grogu.batch`."""

from .client import RemoteACUScorer, RemoteInfluenceScorer, RemoteScorer, RemoteSePerScorer
from .transport import (
    ServiceAuthError,
    ServiceError,
    ServiceTypeError,
    ServiceUnavailable,
    ServiceValueError,
    Transport,
)


def is_url(value: object) -> bool:
    """True for a service URL (a str starting with http:// or https://): what the integrations accept
    in place of a model."""
    return isinstance(value, str) and value.startswith(("http://", "https://"))


__all__ = [
    "RemoteScorer",
    "RemoteInfluenceScorer",
    "RemoteSePerScorer",
    "RemoteACUScorer",
    "Transport",
    "ServiceError",
    "ServiceValueError",
    "ServiceTypeError",
    "ServiceAuthError",
    "ServiceUnavailable",
    "is_url",
]
