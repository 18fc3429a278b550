"""ServerTarget: the target LLM behind an inference server, scored through its token log-probabilities.

A :class:`ServerTarget` stands wherever grogu takes a model (``UtilityScorer``, ``InfluenceScorer``,
``SePerScorer``, both integrations, the command line). It implements :class:`grogu.core.target.Target`, as
the engine does. The APIs it speaks, and what each can score: :mod:`grogu.runtime.inference_server.apis`.
It has the engine's primitives — :meth:`generate` (the greedy grounded answer with each token's entropy
and log-probability) and :meth:`token_stats` (the same answer's statistics teacher-forced under another
prompt, through the server's prompt log-probabilities or llama-server's token grammar) — computed by
HTTP requests to the server the pipeline already runs.
All the requests of a call go out at once, at most ``max_concurrency`` in flight, so the server's own
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
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ...core.checks import check_continuations, check_positive_int
from ...core.prompts import ChatPrompt
from ...core.target import GENERATE, NEXT_TOKEN, TEACHER_FORCE, ServerCapabilityError
from ...core.types import Generation, TokenStats
from .apis import (
    APIS,
    CHAT_APIS,
    CHAT_MAX_TOP_LOGPROBS,
    check_chat_settings,
    choose_api,
    is_hosted_openai,
    no_teacher_forcing,
    server_backend,
)
from .http import Connection, ServerError, run
from .listing import ServedModels
from .next_token import ForcedNextToken
from .ollama import OllamaFormats
from .requests import STOP_TOKEN_NAMES as _STOP_TOKEN_NAMES
from .requests import Step as _Step
from .sglang import SglangFormats
from .topk import DEFAULT_TAIL, TAILS


class ServerTarget(SglangFormats, OllamaFormats, ServedModels, ForcedNextToken):
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
    """

    device = "server"
    #: a completions API generates and teacher-forces (prompt log-probabilities), and so gives given next
    #: tokens' log-probabilities (:mod:`.next_token`); a chat API only generates
    capabilities = frozenset({GENERATE, TEACHER_FORCE, NEXT_TOKEN})
    #: True when prompts are :class:`grogu.core.prompts.ChatPrompt` messages (the server applies its chat template)
    takes_messages = False

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
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL of an OpenAI-compatible server, got {base_url!r}")
        if api not in APIS + ("auto",):
            raise ValueError(f"api must be 'auto' or one of {APIS}, got {api!r}")
        if tail is not None and tail not in TAILS:
            raise ValueError(f"tail must be one of {TAILS}, got {tail!r}")
        self.top_logprobs = check_positive_int("top_logprobs", top_logprobs)
        if vocab_size is not None:
            vocab_size = check_positive_int("vocab_size", vocab_size)
        url = base_url.rstrip("/")
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.hosted_openai = is_hosted_openai(self.base_url)
        if api == "auto" and self.hosted_openai:
            api = "chat"
        if api in CHAT_APIS:
            check_chat_settings(tokenizer, context_window, stop_token_ids)
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
        self._models = None
        self._echo_shift: int | None = None
        self._server_bos: bool | None = None  # llama-cpp-python adds a BOS to text prompts (bos.py, probed once)
        self.model_name = model if model is not None else self._only_model()
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ValueError(f"model must be the served model's name, got {model!r}")
        #: the server behind the URL when its /v1/models names it ("vllm", "sglang", "llama-cpp"), else None
        self.backend: str | None = None
        api, tokenizer = self._resolve_api(api, tokenizer, context_window, stop_token_ids)
        self.api = api
        if api == "ollama":
            self._warn_modelfile()
        if grammar_forcing and api != "llama-server":
            raise ValueError(f"grammar_forcing applies to api='llama-server' only; this target's api is {api!r}")
        self.grammar_forcing = api == "llama-server" and grammar_forcing is not False
        if api == "llama-server" and not self.grammar_forcing:
            self.capabilities = frozenset({GENERATE})  # no prompt log-probabilities: grounded-only
        if api in CHAT_APIS:
            self.takes_messages = True
            self.capabilities = frozenset({GENERATE})
            if self.top_logprobs > CHAT_MAX_TOP_LOGPROBS:
                raise ValueError(
                    f"top_logprobs must be at most {CHAT_MAX_TOP_LOGPROBS} with api={api!r} (the "
                    f"OpenAI chat API's range, which Ollama follows), got {self.top_logprobs}"
                )
        elif tokenizer is None:
            tokenizer = self.model_name
        if isinstance(tokenizer, (str, os.PathLike)):
            from ..models import load_tokenizer

            tokenizer = load_tokenizer(os.fspath(tokenizer))
        self.tokenizer = tokenizer
        if vocab_size is None:
            vocab_size = self._served_meta("n_vocab") or (len(tokenizer) if tokenizer is not None else None)
        self.vocab_size = vocab_size
        if tail is None:
            tail = DEFAULT_TAIL if self.vocab_size is not None else "min"
        if tail == "uniform" and self.vocab_size is None:
            raise ValueError(
                "tail='uniform' spreads the mass outside the top k over the rest of the vocabulary, "
                "whose size is unknown here: pass vocab_size= (or tokenizer=), or tail='min'"
            )
        self.tail = tail
        if tokenizer is None:  # api="chat" without a tokenizer: the server ends and counts on its own
            self.stop_token_ids: list[int] = []
            self.max_context_tokens = None
            return
        self.stop_token_ids = sorted(set(stop_token_ids) if stop_token_ids is not None else self._default_stops())
        if not self.stop_token_ids:
            raise ValueError("the tokenizer defines no end-of-sequence token; pass stop_token_ids=")
        self.max_context_tokens = context_window if context_window is not None else self._context_window()
        self.max_context_tokens = check_positive_int("context_window", self.max_context_tokens)

    @property
    def requests_sent(self) -> int:
        """HTTP requests this target has sent (retries included)."""
        return self.http.requests_sent

    def __repr__(self) -> str:
        return f"ServerTarget({self.base_url!r}, model={self.model_name!r}, api={self.api!r})"

    # ------------------------------------------------------------------ setup
    def _default_stops(self) -> set[int]:
        tok = self.tokenizer
        stops = {int(tok.eos_token_id)} if isinstance(tok.eos_token_id, int) else set()
        vocab = tok.get_vocab()
        stops.update(vocab[name] for name in _STOP_TOKEN_NAMES if name in vocab)
        return stops

    @property
    def end_of_turn(self) -> int:
        """The token an answer ends with: the tokenizer's EOS when it is a stop token, else the first one."""
        eos = self.tokenizer.eos_token_id
        return int(eos) if eos in self.stop_token_ids else self.stop_token_ids[0]

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
    @property
    def grounded_only(self) -> bool:
        """True for a target that cannot teacher-force (``api="chat"``, or ``"llama-server"`` without
        ``grammar_forcing``): only the grounded metrics work."""
        return TEACHER_FORCE not in self.capabilities

    def require_teacher_forcing(self, what: str) -> None:
        """Raise for ``what`` on a grounded-only target: it needs teacher forcing, which a chat API
        cannot do (nor llama-server without ``grammar_forcing``). The error says what works through
        this target and which servers can."""
        if self.grounded_only:
            raise ServerCapabilityError(no_teacher_forcing(repr(self), self.api, what))

    def _check_prompts(self, prompts: Sequence[Any]) -> list[Any]:
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
            raise TypeError("prompts must be a list of prompts (render them with grogu.core.prompts.PromptBuilder)")
        if self.api in CHAT_APIS:
            if not all(isinstance(p, ChatPrompt) for p in prompts):
                raise TypeError(
                    f"a ServerTarget with api={self.api!r} takes grogu.core.prompts.ChatPrompt messages (the server "
                    "applies the chat template); PromptBuilder.for_target(target, ...) renders them"
                )
            return list(prompts)
        if any(isinstance(p, ChatPrompt) for p in prompts):
            raise TypeError(f"a ServerTarget with api={self.api!r} takes token-id prompts, not ChatPrompt messages")
        out = [[int(t) for t in p] for p in prompts]
        if any(not p for p in out):
            raise ValueError("a prompt has no tokens")
        return out

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
        return run(self.agenerate(prompts, max_new_tokens, temperature=temperature, seed=seed))

    def token_stats(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[TokenStats]:
        """Teacher-forced statistics of ``continuations[i]`` after ``prompts[i]`` from the server's prompt
        log-probabilities; all requests at once."""
        return run(self.atoken_stats(prompts, continuations))

    async def agenerate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 64,
        *,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> list[Generation]:
        prompts = self._check_prompts(prompts)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        if not prompts:
            return []
        seeds = [None if seed is None else int(seed) + i for i in range(len(prompts))]
        if self.api == "chat":
            replies = await self.http.post_all(
                [self._chat_body(p, max_new_tokens, temperature, s) for p, s in zip(prompts, seeds)],
                "/chat/completions",
            )
            return [self._parse_chat(r) for r in replies]
        if self.api == "ollama":  # its native /api/chat, at the server root
            bodies = [self._ollama_body(p, max_new_tokens, temperature, s) for p, s in zip(prompts, seeds)]
            replies = await self.http.post_all(bodies, url=self.base_url[: -len("/v1")] + "/api/chat")
            return [self._parse_chat(self._ollama_as_chat(r)) for r in replies]
        if self.api in ("llama-server", "sglang"):
            return await self._native_generate(prompts, max_new_tokens, temperature, seeds)
        await self._prepare_prompts(prompts)  # llama-cpp-python: its BOS, and each prompt's round trip
        replies = await self.http.post_all(
            [self._gen_body(p, max_new_tokens, temperature, s) for p, s in zip(prompts, seeds)]
        )
        parsed = [self._parse_generation(r) for r in replies]
        if self.api == "llama-cpp":  # its answers come as text: their token ids as the server reads them
            answer_ids = await self._answer_ids([(p, text) for p, (text, *_) in zip(prompts, parsed)])
            parsed = [(text, finish, steps, ids) for (text, finish, steps, _), ids in zip(parsed, answer_ids)]
        gens: list[Generation | None] = []
        refit: list[int] = []
        for i, (text, finish, steps, ids) in enumerate(parsed):
            if len(ids) != len(steps):
                refit.append(i)  # generated tokens the server reads back otherwise: teacher-force its reading
            while ids and ids[-1] in self.stop_token_ids:  # a stop token the server kept in the text
                ids, steps = ids[:-1], steps[:-1]
            gens.append(self._generation(ids, steps, finish) if i not in refit else None)
        empty = [i for i, g in enumerate(gens) if g is not None and not g.token_ids and g.finished]
        todo = refit + empty
        if todo:  # statistics by teacher forcing: re-tokenised answers, and the stop token of empty ones
            conts = [parsed[i][3] if i in refit else [self.end_of_turn] for i in todo]
            stats = await self.atoken_stats([prompts[i] for i in todo], conts)
            for i, st in zip(todo, stats):
                if i in refit:
                    g = Generation(st.token_ids, st.entropy, st.logprob, text=self.decode(st.token_ids))
                    gens[i] = self._finish(g, parsed[i][1])
                else:
                    g = gens[i]
                    g.stop_entropy, g.stop_logprob = float(st.entropy[0]), float(st.logprob[0])
        return gens  # type: ignore[return-value]

    def _generation(self, ids: list[int], steps: list[_Step], finish: str | None) -> Generation:
        import torch

        ent = torch.tensor([self._entropy(s.top) for s in steps], dtype=torch.float32)
        lp = torch.tensor([s.logprob for s in steps], dtype=torch.float32)
        return self._finish(Generation(ids, ent, lp, text=self.decode(ids)), finish)

    def _finish(self, gen: Generation, finish: str | None) -> Generation:
        if finish == "stop":  # ended with an end-of-turn token (not returned); its statistics only when needed
            gen.stop_token_id = self.end_of_turn
            gen.stop_entropy = gen.stop_logprob = None
        return gen

    async def atoken_stats(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
    ) -> list[TokenStats]:
        import torch

        self.require_teacher_forcing("token_stats (the statistics of an answer under the ungrounded prompt)")
        prompts = self._check_prompts(prompts)
        conts = check_continuations(continuations, len(prompts))
        todo = [i for i, c in enumerate(conts) if c]
        empty = torch.zeros(0, dtype=torch.float32)
        out: list[TokenStats] = [TokenStats([], empty, empty) for _ in conts]
        if todo:
            await self._prepare_prompts([prompts[i] + conts[i] for i in todo])
            await self._probe_echo(prompts[todo[0]])
        forced = await self._forced_steps([prompts[i] for i in todo], [conts[i] for i in todo])
        for i, steps in zip(todo, forced):
            out[i] = TokenStats(
                conts[i],
                torch.tensor([self._entropy(s.top) for s in steps], dtype=torch.float32),
                torch.tensor([s.logprob for s in steps], dtype=torch.float32),
            )
        return out


__all__ = ["ServerTarget", "ServerError", "ServerCapabilityError", "APIS", "choose_api", "server_backend"]
