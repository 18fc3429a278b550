"""What a server says about itself in ``/v1/models``: the models it serves, who owns them, and the
served model's context window and vocabulary size where the server gives them."""

from __future__ import annotations

from typing import Any

from .http import Connection


async def served_models(http: Connection) -> list[dict[str, Any]]:
    """The server's ``/v1/models`` entries."""
    data = await http.get("/models")
    return list(data.get("data", [])) if isinstance(data, dict) else []


def only_model(entries: list[dict[str, Any]], base_url: str) -> str:
    """The served model's name when the server serves one model; else an error naming them."""
    ids = [m.get("id") for m in entries]
    if len(ids) != 1:
        raise ValueError(f"the server at {base_url} serves {ids}; pass model= to choose one")
    return ids[0]


def served_meta(entries: list[dict[str, Any]], model_name: str, key: str) -> int | None:
    """A positive int of the served model's ``meta`` in ``/v1/models`` (llama-server's), else None."""
    for m in entries:
        meta = m.get("meta")
        if m.get("id") == model_name and isinstance(meta, dict):
            value = meta.get(key)
            return value if isinstance(value, int) and value > 0 else None
    return None


def context_window(entries: list[dict[str, Any]], model_name: str, tokenizer: Any) -> int:
    """The served context length: vLLM's and SGLang's ``max_model_len``, llama-server's ``meta.n_ctx``,
    else the tokenizer's ``model_max_length``, else 2048."""
    for m in entries:
        if m.get("id") == model_name and isinstance(m.get("max_model_len"), int):
            return m["max_model_len"]
    n_ctx = served_meta(entries, model_name, "n_ctx")  # llama-server's context per slot
    if n_ctx:
        return n_ctx
    tok_max = getattr(tokenizer, "model_max_length", None)
    return int(tok_max) if isinstance(tok_max, int) and 0 < tok_max < 10**7 else 2048


__all__ = ["served_models", "only_model", "served_meta", "context_window"]
