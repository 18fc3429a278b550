"""Clients of the scoring service (``grogu serve``) with the methods and results of the in-process
classes: :class:`RemoteScorer` (:class:`grogu.UtilityScorer`), :class:`RemoteInfluenceScorer`
(:class:`grogu.metrics.influence.InfluenceScorer`), :class:`RemoteSePerScorer` and :class:`RemoteACUScorer`.

>>> scorer = RemoteScorer("http://127.0.0.1:8000", token=None)     # token: or GROGU_SERVE_TOKEN
>>> kept = scorer.rerank("Who wrote Hamlet?", docs, top_n=3)        # DocumentScore, as in-process

Inputs are checked here with the checks the in-process classes use (a bad query is the same
TypeError / ValueError without a round trip). Only each document's text and title are sent; results
come back on the caller's own document objects. Connection errors, 502/503/504 answers and a 500 that
grogu did not write (the replica died under the request) are retried with exponential backoff (``retries`` times: ``backoff``, 2x, 4x ... seconds, at most 8 s apart); a
4xx answer raises at once with the server's message: :class:`ServiceValueError` (a ``ValueError``) for
a bad value or a request over the limits, :class:`ServiceTypeError`, :class:`ServiceAuthError` (401).
Prompt templates are checked here as the service checks them (:func:`grogu.rerank.remote.wire.check_template`):
a placeholder the service would refuse is a ValueError when the client is made.

Where they live: :mod:`.utility_client` (RemoteScorer), :mod:`.metric_clients` (the other metrics), and
:mod:`.client_base` (what they share: the transport, the request runners, the template check).
"""

from .client_base import RemoteClient, check_prompt_template
from .metric_clients import RemoteACUScorer, RemoteInfluenceScorer, RemoteSePerScorer
from .transport import ServiceUnavailable
from .utility_client import RemoteScorer

__all__ = [
    "RemoteScorer",
    "RemoteInfluenceScorer",
    "RemoteSePerScorer",
    "RemoteACUScorer",
    "RemoteClient",
    "ServiceUnavailable",
    "check_prompt_template",
]
