"""The scoring service's client: ``RemoteScorer`` and ``RemoteInfluenceScorer``, the scorer's interface over
HTTP (:mod:`.client`), the request and response models both sides share (:mod:`.wire`) and the HTTP
transport (:mod:`.transport`). Part of the rerank layer: a remote scorer stands where a scorer stands.
"""


def is_url(value: object) -> bool:
    """True for a service URL (a str starting with http:// or https://): what the integrations accept
    in place of a model."""
    return isinstance(value, str) and value.startswith(("http://", "https://"))
