"""A target's settings and its connection to its server: the settings checked when the target is made
(:func:`check_settings`), then, from what the server said (:class:`~.apis.Discovery`), the API object and
the served model's statistics settings (:func:`bind`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from ...core.checks import check_positive_int
from .apis import Discovery, api_class, is_hosted_openai, settle
from .base import UNIFORM_NEEDS_VOCAB, Served, Settings
from .http import Connection
from .listing import context_window, served_meta
from .protocol import ServerAPI
from .requests import STOP_TOKEN_NAMES
from .topk import DEFAULT_TAIL, TAILS


def check_settings(
    base_url: str,
    model: str | None,
    *,
    api: str,
    tokenizer: Any,
    top_logprobs: int,
    tail: str | None,
    vocab_size: int | None,
    context_window: int | None,
    stop_token_ids: Sequence[int] | None,
    grammar_forcing: bool | None,
) -> Settings:
    """A target's settings, refused when wrong before any request: the URL, the API's name, the tail, the
    counts, and what a named API refuses (its ``check_settings``)."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL of an OpenAI-compatible server, got {base_url!r}")
    url = base_url.rstrip("/")
    url = url if url.endswith("/v1") else url + "/v1"
    known = api_class(api, url)
    if tail is not None and tail not in TAILS:
        raise ValueError(f"tail must be one of {TAILS}, got {tail!r}")
    top_logprobs = check_positive_int("top_logprobs", top_logprobs)
    if vocab_size is not None:
        vocab_size = check_positive_int("vocab_size", vocab_size)
    if model is not None and (not isinstance(model, str) or not model):
        raise ValueError(f"model must be the served model's name, got {model!r}")
    settings = Settings(
        url,
        api,
        model,
        tokenizer,
        top_logprobs,
        tail,
        vocab_size,
        context_window,
        stop_token_ids,
        grammar_forcing,
        is_hosted_openai(url),
    )
    if known is not None:
        known.check_settings(settings)
    return settings


def default_stops(tokenizer: Any) -> set[int]:
    """The tokenizer's EOS and the end-of-turn tokens its vocabulary holds."""
    stops = {int(tokenizer.eos_token_id)} if isinstance(tokenizer.eos_token_id, int) else set()
    vocab = tokenizer.get_vocab()
    stops.update(vocab[name] for name in STOP_TOKEN_NAMES if name in vocab)
    return stops


def bind(found: Discovery, settings: Settings, http: Connection) -> tuple[ServerAPI, Served, int | None]:
    """(the API object, the served model it is bound to, the context window in tokens or None).

    A detected API checks the settings here (a named one did when the target was made). The tokenizer
    defaults to the model's name, but for an API that takes messages."""
    cls, tokenizer, traits = settle(found, settings.tokenizer)
    if found.detected:
        cls.check_settings(dataclasses.replace(settings, tokenizer=tokenizer))
    if not cls.takes_messages and tokenizer is None:
        tokenizer = found.model_name
    if isinstance(tokenizer, (str, os.PathLike)):
        from ..models import load_tokenizer

        tokenizer = load_tokenizer(os.fspath(tokenizer))
    vocab = settings.vocab_size or served_meta(found.entries, found.model_name, "n_vocab")
    if vocab is None and tokenizer is not None:
        vocab = len(tokenizer)
    tail = settings.tail or (DEFAULT_TAIL if vocab is not None else "min")
    if tail == "uniform" and vocab is None:
        raise ValueError(UNIFORM_NEEDS_VOCAB)
    stops: list[int] = []
    window = None
    if tokenizer is not None:  # a chat API without a tokenizer: the server ends and counts on its own
        given = settings.stop_token_ids
        stops = sorted(set(given) if given is not None else default_stops(tokenizer))
        if not stops:
            raise ValueError("the tokenizer defines no end-of-sequence token; pass stop_token_ids=")
        window = settings.context_window
        window = window if window is not None else context_window(found.entries, found.model_name, tokenizer)
        window = check_positive_int("context_window", window)
    served = Served(
        http,
        settings.base_url,
        found.model_name,
        settings.top_logprobs,
        tokenizer,
        stops,
        vocab,
        tail,
        hosted_openai=settings.hosted_openai,
        grammar_forcing=settings.grammar_forcing,
        **traits,
    )
    return cls(served), served, window


__all__ = ["check_settings", "bind", "default_stops"]
