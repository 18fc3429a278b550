"""What a refused request means, in a target's terms (:func:`refusal`)."""

from __future__ import annotations

from typing import Any

from ...core.target import ServerCapabilityError
from .http import ServerError
from .protocol import ServerAPI


def refusal(
    resp: Any,
    url: str,
    *,
    api: ServerAPI | None,
    has_tokenizer: bool,
    top_logprobs: int,
    model: str | None,
    models: list[dict[str, Any]] | None,
) -> Exception:
    """The error for a refused request (4xx, or a 5xx after the retries). ``api`` reads it first when the
    target is connected; ``models`` are the server's listing, when known."""
    text = resp.text[:500]
    low = text.lower()
    if resp.status_code == 401 or resp.status_code == 403:
        return ServerError(f"the LLM server at {url} refused the API key ({resp.status_code}): {text}")
    own = api.refusal(resp.status_code, text, url) if api is not None else None
    if own is not None:
        return own
    if "context" in low and any(w in low for w in ("exceed", "maximum", "too long", "length", "window")):
        cut = (
            "grogu cut the documents with the tokenizer given, whose count differs from the server's: "
            "pass a smaller context_window="
            if has_tokenizer
            else "pass tokenizer= (and context_window=) so that grogu cuts the documents to fit"
        )
        return ServerError(
            f"the LLM server at {url} refused a prompt that does not fit the model's context "
            f"window ({resp.status_code}: {text}); {cut}, or give fewer or shorter documents"
        )
    if "logprob" in low or "logits_all" in low:
        return ServerCapabilityError(
            f"the LLM server at {url} refused the log-probabilities grogu asks for (top_logprobs="
            f"{top_logprobs}): {text}. vLLM: start it with --max-logprobs {top_logprobs} (or "
            f"more), or pass a smaller top_logprobs; llama-cpp-python: keep logits_all on"
        )
    if resp.status_code == 404 or ("model" in low and ("not found" in low or "does not exist" in low)):
        served = [m.get("id") for m in models] if models else None
        return ServerError(
            f"the LLM server at {url} does not serve model {model!r} "
            f"(status {resp.status_code}: {text})" + (f"; it serves {served}" if served else "")
        )
    return ServerError(f"the LLM server at {url} answered {resp.status_code}: {text}")


__all__ = ["refusal"]
