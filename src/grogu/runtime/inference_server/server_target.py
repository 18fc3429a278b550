"""ServerTarget: the target LLM behind an inference server, scored through its token log-probabilities.

A :class:`ServerTarget` stands wherever grogu takes a model (``UtilityScorer``, ``InfluenceScorer``,
``SePerScorer``, both integrations, the command line). It implements :class:`grogu.core.target.Target`, as
the engine does. The APIs it speaks, and what each can score: :mod:`grogu.runtime.inference_server.apis`.
It has the engine's primitives — :meth:`generate` (the greedy grounded answer with each token's entropy
and log-probability) and :meth:`token_stats` (the same answer's statistics teacher-forced under another
prompt, through the server's prompt log-probabilities or llama-server's token grammar) — computed by
HTTP requests to the server the pipeline already runs. All the requests of a call go out at once, at most ``max_concurrency`` in flight, so the server's own
batching does the work (vLLM skips its prefix cache for requests with ``prompt_logprobs``: each
teacher-forcing request encodes its whole prompt).

With the completions APIs prompts are rendered by grogu with the model's tokenizer (its chat template),
exactly as for an in-process model; the answer scored is the answer the server gives that prompt, which
is the pipeline LLM's answer when the pipeline sends the same prompt through the chat endpoint (the
server applies the same chat template) with greedy decoding. With ``api="chat"`` the scored answer is
the chat endpoint's own answer to the pipeline's messages.

What is approximate: entropies are computed from the top-k log-probabilities the server returns,
with a tail correction (:mod:`grogu.runtime.inference_server.topk`); log-probabilities of the answer tokens are exact
(up to the server's numerics and quantisation). Whether a hosted API reports the log-probabilities of
the untempered distribution when sampling (ΔSePer samples at temperature 1, where both agree) is the
API's own; llama-cpp-python and llama-server report the untempered ones.

Making a target sends no request. It connects on first use (or at :meth:`ServerTarget.connect`): it
lists the served models, tells the API, loads the tokenizer and reads the context window. Its requests
go through one HTTP client, kept open until :meth:`ServerTarget.close` (or the end of a ``with`` block).
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Sequence

from ...core.aio import call, run
from ...core.checks import check_continuations, check_positive_int
from ...core.target import NEXT_TOKEN, TEACHER_FORCE, ServerCapabilityError
from ...core.types import Generation, TokenStats
from .apis import APIS, Discovery, choose_api, discover, server_backend
from .base import Served, no_teacher_forcing
from .connecting import bind, check_settings
from .errors import refusal
from .http import Connection, ServerError
from .listing import served_models
from .next_token import check_token_ids, next_token_table
from .protocol import ServerAPI
from .requests import check_prompts

if TYPE_CHECKING:  # annotations only: torch is imported when a request's results are built
    import torch


class ServerTarget:
    """A target LLM served by an inference server (see the module docstring).

    Args:
        base_url: the server's OpenAI-compatible base URL (``http://host:8000/v1``; ``/v1`` is added when
            missing).
        model: the served model name (default: the only model the server lists).
        api: ``"auto"`` (default: told from the server's ``/v1/models`` answer, see :func:`choose_api`),
            ``"vllm"``, ``"llama-cpp"``, ``"llama-server"``, ``"sglang"``, ``"ollama"`` or ``"chat"`` (both
            grounded-only, see :mod:`grogu.runtime.inference_server.apis`).
        grammar_forcing: with ``api="llama-server"``, teacher-force answers through a token-id grammar
            (default: on there; exact against llama.cpp in process on a real llama-server). ``False``
            makes that target grounded-only (:mod:`grogu.runtime.inference_server.llama_server`).
        tokenizer: the model's tokenizer, or what :func:`grogu.runtime.models.load_tokenizer` loads one from (an
            embedded alias, a .gguf path, a directory, a hub id). Default: ``model``; with ``api="chat"``
            none (optional there: it gives the vocabulary size and cuts documents to ``context_window``).
        api_key: sent as a bearer token; default the ``OPENAI_API_KEY`` environment variable, if set.
        top_logprobs: k, how many alternatives per token the server returns (vLLM caps it with
            ``--max-logprobs``, 20 by default; the chat API at most 20). Default 20.
        tail: the top-k entropy's tail correction, ``"uniform"``, ``"min"`` or ``"none"``. Default
            ``"uniform"``, or ``"min"`` when the vocabulary size is unknown (``api="chat"`` with neither
            ``tokenizer`` nor ``vocab_size``).
        vocab_size: the model's vocabulary size, for the ``"uniform"`` tail (default: llama-server's
            ``meta.n_vocab``, else the tokenizer's).
        context_window: the served context length in tokens (default: vLLM's ``max_model_len`` or
            llama-server's ``meta.n_ctx`` from ``/v1/models``, else the tokenizer's ``model_max_length``,
            at most 8192... pass it); needs a tokenizer.
        max_concurrency: most requests in flight at once (default 16).
        timeout: seconds for one request (default 120); retries: attempts after a connection error, a
            timeout, 429 or 5xx (default 4), with exponential backoff from ``backoff`` seconds.

    The settings are checked here. The attributes the server tells (``api``, ``tokenizer``...) connect when read.
    """

    device = "server"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api: str = "auto",
        tokenizer: Any = None,
        api_key: str | None = None,
        top_logprobs: int = 20,
        tail: str | None = None,
        vocab_size: int | None = None,
        context_window: int | None = None,
        max_concurrency: int = 16,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.5,
        stop_token_ids: Sequence[int] | None = None,
        grammar_forcing: bool | None = None,
    ) -> None:
        self._settings = check_settings(
            base_url,
            model,
            api=api,
            tokenizer=tokenizer,
            top_logprobs=top_logprobs,
            tail=tail,
            vocab_size=vocab_size,
            context_window=context_window,
            stop_token_ids=stop_token_ids,
            grammar_forcing=grammar_forcing,
        )
        self.base_url, self.hosted_openai = self._settings.base_url, self._settings.hosted_openai
        self.top_logprobs = self._settings.top_logprobs
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.http = Connection(
            self.base_url,
            self.api_key,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_concurrency=max_concurrency,
            explain=self._http_error,
        )
        self._models: list[dict[str, Any]] | None = None
        self._backend: str | None = None
        self._served: Served | None = None
        self._api: ServerAPI | None = None
        self._window: int | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def __repr__(self) -> str:
        api = self._api.name if self._api is not None else self._settings.api
        model = self._served.model_name if self._served is not None else self._settings.model
        return f"ServerTarget({self.base_url!r}, model={model!r}, api={api!r})"

    # ------------------------------------------------------------------ connecting
    def connect(self) -> ServerTarget:
        """Read what the server serves and choose its API, once (later calls return at once): the
        ``/v1/models`` listing, the model checked against it, the tokenizer, the context window."""
        if self._api is None:
            with self._lock:
                if self._api is None:
                    api = self._bind(run(discover(self.http, self._settings)))
                    self._start(api, run(api.start()))
        return self

    async def aconnect(self) -> ServerTarget:
        """:meth:`connect` from async code."""
        if self._api is None:
            found = await call(discover(self.http, self._settings))
            if self._api is None:
                api = self._bind(found)
                self._start(api, await call(api.start()))
        return self

    def _bind(self, found: Discovery) -> ServerAPI:
        api, self._served, self._window = bind(found, self._settings, self.http)
        self._models, self._backend = found.entries, found.backend
        return api

    def _start(self, api: ServerAPI, notes: list[str]) -> None:  # the API's warnings, then the API in use
        for note in notes:
            warnings.warn(note, UserWarning, stacklevel=3)
        self._api = api

    def _connected(self) -> tuple[ServerAPI, Served]:
        self.connect()
        assert self._api is not None and self._served is not None
        return self._api, self._served

    def close(self) -> None:
        """Close the target's HTTP client (a later request opens a new one)."""
        self.http.close()

    async def aclose(self) -> None:
        """:meth:`close` from async code."""
        await call(self.http.aclose())

    def __enter__(self) -> ServerTarget:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> ServerTarget:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ what connecting tells
    @property
    def server_api(self) -> ServerAPI:
        """The API object this target speaks through (:class:`~.protocol.ServerAPI`)."""
        return self._connected()[0]

    @property
    def api(self) -> str:
        """The API's name: ``"vllm"``, ``"llama-cpp"``, ``"llama-server"``, ``"sglang"``, ``"ollama"`` or ``"chat"``."""
        return self._connected()[0].name

    @property
    def backend(self) -> str | None:
        """The server behind the URL when its listing names it ("vllm", "llama-server", "ollama"...), else None."""
        self.connect()
        return self._backend

    @property
    def model_name(self) -> str:
        return self._settings.model if self._settings.model is not None else self._connected()[1].model_name

    @property
    def tokenizer(self) -> Any:
        return self._connected()[1].tokenizer

    @property
    def vocab_size(self) -> int | None:
        return self._connected()[1].vocab_size

    @property
    def tail(self) -> str:
        return self._connected()[1].tail

    @property
    def stop_token_ids(self) -> list[int]:
        return self._connected()[1].stop_token_ids

    @property
    def max_context_tokens(self) -> int | None:
        self.connect()
        return self._window

    @property
    def capabilities(self) -> frozenset[str]:
        """What the API can do: a chat API, and llama-server without ``grammar_forcing``, only generate."""
        return self._connected()[0].capabilities

    @property
    def takes_messages(self) -> bool:
        """True when prompts are :class:`grogu.core.prompts.ChatPrompt` messages (the server applies its chat template)."""
        return self._connected()[0].takes_messages

    @property
    def grounded_only(self) -> bool:
        """True for a target that cannot teacher-force: only the grounded metrics work."""
        return TEACHER_FORCE not in self.capabilities

    @property
    def grammar_forcing(self) -> bool:
        """Whether answers are teacher-forced through llama-server's token grammar."""
        return bool(getattr(self._connected()[0], "grammar_forcing", False))

    @property
    def requests_sent(self) -> int:
        """HTTP requests this target has sent (retries included)."""
        return self.http.requests_sent

    @property
    def end_of_turn(self) -> int:
        """The token an answer ends with: the tokenizer's EOS when it is a stop token, else the first one."""
        return self._connected()[1].end_of_turn

    def served_models(self) -> list[dict[str, Any]]:
        """The server's ``/v1/models`` entries."""
        if self._models is None:
            self._models = run(served_models(self.http))
        return self._models

    # ------------------------------------------------------------------ text helpers (as the Engine)
    def _need_tokenizer(self, what: str) -> Any:
        if self.tokenizer is None:
            raise ServerCapabilityError(f"{what} needs the model's tokenizer; pass tokenizer= to ServerTarget")
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        return self._need_tokenizer("encoding text to token ids").encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self._need_tokenizer("decoding token ids").decode(list(ids), skip_special_tokens=True).strip()

    # ------------------------------------------------------------------ the Target protocol's primitives
    def require_teacher_forcing(self, what: str) -> None:
        """Raise for ``what`` on a grounded-only target, which cannot teacher-force. The error says what
        works through this target and which servers can."""
        api = self._connected()[0]
        if api.grounded_only:
            raise ServerCapabilityError(no_teacher_forcing(repr(self), api.why_grounded_only(), what))

    def _check_prompts(self, prompts: Sequence[Any]) -> list[Any]:
        return check_prompts(prompts, self.takes_messages, self.api)

    def generate(
        self,
        prompts: Sequence[Any],
        max_new_tokens: int = 64,
        *,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> list[Generation]:
        """One answer per prompt from the server (greedy when ``temperature`` is None), with each token's
        top-k entropy and log-probability; all prompts sent at once. Prompts are token-id lists, or
        :class:`~grogu.core.prompts.ChatPrompt` messages with ``api="chat"``."""
        self.connect()
        return run(self._generate(prompts, max_new_tokens, temperature, seed))

    async def agenerate(
        self,
        prompts: Sequence[Any],
        max_new_tokens: int = 64,
        *,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> list[Generation]:
        await self.aconnect()
        return await call(self._generate(prompts, max_new_tokens, temperature, seed))

    async def _generate(
        self, prompts: Sequence[Any], max_new_tokens: int, temperature: float | None, seed: int | None
    ) -> list[Generation]:
        prompts = self._check_prompts(prompts)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        if not prompts:
            return []
        seeds = [None if seed is None else int(seed) + i for i in range(len(prompts))]
        return await self._connected()[0].generate(prompts, max_new_tokens, temperature, seeds)

    def token_stats(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[TokenStats]:
        """Teacher-forced statistics of ``continuations[i]`` after ``prompts[i]`` from the server's prompt
        log-probabilities; all requests at once."""
        self.connect()
        return run(self._token_stats(prompts, continuations))

    async def atoken_stats(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
    ) -> list[TokenStats]:
        await self.aconnect()
        return await call(self._token_stats(prompts, continuations))

    async def _token_stats(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
    ) -> list[TokenStats]:
        import torch

        self.require_teacher_forcing("token_stats (the statistics of an answer under the ungrounded prompt)")
        api = self._connected()[0]
        prompts = self._check_prompts(prompts)
        conts = check_continuations(continuations, len(prompts))
        todo = [i for i, c in enumerate(conts) if c]
        empty = torch.zeros(0, dtype=torch.float32)
        out: list[TokenStats] = [TokenStats([], empty, empty) for _ in conts]
        forced = await api.forced_steps([prompts[i] for i in todo], [conts[i] for i in todo]) if todo else []
        for i, steps in zip(todo, forced):
            out[i] = api.statistics(conts[i], steps)
        return out

    def next_token_logprobs(
        self, prompts: Sequence[Sequence[int]], token_ids: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Log-probabilities (float32) of the tokens ``token_ids`` right after each prompt:
        ``[len(prompts), len(token_ids)]``. Each is a one-token teacher-forced answer, exact up to the
        server's numerics (:mod:`.next_token`). The whole distribution (``token_ids=None``) is the
        in-process engine's alone."""
        if NEXT_TOKEN not in self.capabilities:
            self.require_teacher_forcing("next_token_logprobs (given next tokens' log-probabilities, ACU's need)")
        cols = check_token_ids(token_ids, self.vocab_size)
        prompts = self._check_prompts(list(prompts))
        rows = run(self._connected()[0].next_token_rows(prompts, cols)) if prompts else None
        return next_token_table(self, prompts, cols, rows)

    def _http_error(self, resp: Any, url: str) -> Exception:
        """What a refused request means, in this target's terms (:class:`Connection`'s ``explain``)."""
        served = self._served
        return refusal(
            resp,
            url,
            api=self._api,
            has_tokenizer=served is not None and served.tokenizer is not None,
            top_logprobs=self.top_logprobs,
            model=served.model_name if served is not None else self._settings.model,
            models=self._models,
        )


__all__ = ["ServerTarget", "ServerError", "ServerCapabilityError", "APIS", "choose_api", "server_backend"]
