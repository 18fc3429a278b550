"""llama.cpp's own ``llama-server`` through its native ``/completion`` endpoint (``api="llama-server"``).

Read from llama.cpp as vendored in llama-cpp-python 0.3.36 (``tools/server/``, ``common/sampling.cpp``,
``src/llama-grammar.cpp``). What grogu relies on:

- A token-id prompt is used as given. No BOS is added (server-common.cpp, ``tokenize_input_subprompt``).
- ``n_probs: k`` returns each generated token's log-probability and its top k, with ids
  (``completion_probabilities``). ``post_sampling_probs`` is false by default. The values are then
  log-probabilities of a softmax of the model's raw logits (server-context.cpp, ``populate_token_probs``;
  server-common.cpp, ``get_token_probabilities``). No sampler and no grammar touch those logits: the
  sampler works on a copy (common/sampling.cpp, ``set_logits``).
- ``return_tokens: true`` returns the generated ids in ``tokens``.
- A request's fields override the server's command line and the GGUF's ``general.sampling.*``
  defaults (common/common.cpp, ``common_init_sampler_from_model``, fills the server's defaults;
  server-schema.cpp, ``eval_llama_cmpl_schema``, starts each request from them). grogu sends every sampler field neutral
  (:data:`NEUTRAL`), and the sampler chain ``["top_k", "temperature"]``. Greedy is ``top_k`` 1 and
  ``temperature`` 0.
- ``/v1/models`` entries are owned by ``"llamacpp"``. Their ``meta.n_vocab`` and ``meta.n_ctx`` give the
  vocabulary size and the context window (server-context.cpp, ``get_res_model_info``).

Teacher forcing (``grammar_forcing``, on by default; ``False`` makes the target grounded-only): a GBNF
grammar names the answer's token ids (``root ::= <[a]> <[b]> ...``; src/llama-grammar.cpp, ``parse_token``). With ``n_predict`` the answer's
length, the server decodes exactly the answer. Each step still reports the model's unconstrained
distribution (above). A grammar cannot name an end-of-generation token: it refuses one until the grammar
is complete, then allows those only (``llama_grammar_apply_impl``). So a trailing end-of-turn token is
left out of the grammar and picked by a logit bias. Forcing costs one decode step per answer token.
Run against a real llama-server built from this llama.cpp (``benchmarks/llama_server_real.py``): on 8
contexts each of SmolLM2 and Gemma 3 270M, greedy answers identical to llama.cpp in process and every
log-probability, forced ones included, within 1e-3. The tests run llama.cpp in process behind a
stand-in transcribed from the source. A llama.cpp without token-id grammars refuses the grammar: grogu
then says to pass ``grammar_forcing=False``.

Limits, from server-context.cpp:

- A token that ends inside a UTF-8 character gets no probabilities (``process_token`` adds its entry
  only once the text is whole). Such an answer raises :class:`ServerCapabilityError`. One cut by the
  token budget inside its last character ends before that character instead. The token grammar cannot
  force such a token either. grogu refuses it before sending: llama.cpp's grammar would abort.
- Speculative decoding reports no alternatives for drafted tokens. That raises too.
- A grammar or stop strings on the server's command line still apply to generation. A request cannot
  clear them.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from ...core.target import GENERATE, ServerCapabilityError
from ...core.types import Generation
from .base import BaseAPI, Served, Settings
from .http import ServerError
from .requests import Step

#: every sampler field of ``/completion`` (server-schema.cpp, ``make_llama_cmpl_schema``, "Sampling
#: params"), at the value that switches its sampler off; a switched-off sampler's own settings at
#: llama.cpp's defaults (common/common.h, ``common_params_sampling``). ``temperature`` and ``top_k`` are
#: set per request
NEUTRAL: dict[str, Any] = {
    "top_p": 1.0,  # 1.0 = disabled
    "min_p": 0.0,  # 0 = disabled
    "top_n_sigma": -1.0,  # < 0 = disabled
    "xtc_probability": 0.0,  # 0 = disabled
    "xtc_threshold": 0.1,
    "typical_p": 1.0,  # 1.0 = disabled
    "dynatemp_range": 0.0,  # 0 = disabled
    "dynatemp_exponent": 1.0,
    "repeat_last_n": 0,  # 0 = disabled (hard limits 0..INT32_MAX: -1 is refused)
    "repeat_penalty": 1.0,  # 1.0 = disabled
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "dry_multiplier": 0.0,  # 0 = disabled
    "dry_base": 1.75,
    "dry_allowed_length": 2,
    "dry_penalty_last_n": 0,  # 0 = disabled
    "mirostat": 0,  # 0 = disabled
    "mirostat_tau": 5.0,
    "mirostat_eta": 0.1,
    "adaptive_target": -1.0,  # negative = disabled
    "adaptive_decay": 0.9,
    "min_keep": 0,
    "backend_sampling": False,
    "logit_bias": [],  # clears the command line's --logit-bias (the field's handler clears, then adds)
    "ignore_eos": False,
    "n_indent": 0,  # no stop on indentation
    "t_max_predict_ms": 0,  # no time limit
    "post_sampling_probs": False,  # the model's own probabilities, not the sampler chain's
    "samplers": ["top_k", "temperature"],  # the chain: no other sampler runs, whatever the command line says
}
#: the logit bias that picks a trailing end-of-turn token among the end-of-generation tokens the
#: complete grammar allows (the reported probabilities are computed before any bias)
FORCE_BIAS = 1.0e4
#: llama-server writes the log of a zero probability as the lowest float (server-task.cpp, ``logarithm``)
_LOWEST = -1.0e38


def llama_server_sampling(temperature: float | None, seed: int | None) -> dict[str, Any]:
    """The sampler fields of a request: greedy when ``temperature`` is None, else plain sampling."""
    body = {**NEUTRAL, "temperature": 0.0 if temperature is None else float(temperature)}
    body["top_k"] = 1 if temperature is None else 0  # 0 = disabled
    if seed is not None:
        body["seed"] = int(seed)
    return body


def token_grammar(ids: Sequence[int]) -> str:
    """The GBNF grammar that admits exactly ``ids`` (``<[id]>`` names a token id); ``""`` for none."""
    return "root ::= " + (" ".join(f"<[{int(t)}]>" for t in ids) or '""')


def auto_tokenizer(model_name: str, server: str = "llama-server") -> Any:
    """The tokenizer named by a served model's name, or None (with a warning) when it does not load."""
    from ..models import load_tokenizer

    try:
        return load_tokenizer(model_name)
    except (ValueError, OSError) as exc:  # a GGUF file name (llama-server's default model id) is not found here
        warnings.warn(
            f"{server} serves {model_name!r}, a name grogu cannot load a tokenizer from ({exc}). It is "
            "scored through its chat API (grounded-only). Pass tokenizer= (a path or a hub id) "
            f"to score it through its native endpoint (api={server!r})",
            stacklevel=3,
        )
        return None


#: why llama-server without grammar forcing cannot teacher-force
NO_GRAMMAR_WHY = (
    "llama-server returns no prompt log-probabilities, and teacher forcing through a token-id grammar "
    "was switched off (grammar_forcing=False). Leave grammar_forcing at its default to turn it on "
    "(see grogu.runtime.inference_server.llama_server)"
)


class LlamaServerAPI(BaseAPI):
    """llama-server's native ``/completion``: token-id prompts, teacher forcing by a token grammar."""

    name = "llama-server"

    def __init__(self, served: Served) -> None:
        super().__init__(served)
        #: teacher forcing through a token-id grammar (on unless ``grammar_forcing=False``)
        self.grammar_forcing = served.grammar_forcing is not False
        if not self.grammar_forcing:
            self.capabilities = frozenset({GENERATE})  # no prompt log-probabilities: grounded-only

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        """Every setting applies (``grammar_forcing`` is this API's)."""

    @property
    def generate_url(self) -> str:
        return self.served.root + "/completion"

    def why_grounded_only(self) -> str:
        return NO_GRAMMAR_WHY

    def refusal(self, status: int, text: str, url: str) -> Exception | None:
        if "grammar" in text.lower():
            return ServerCapabilityError(
                f"llama-server at {url} refused the token grammar grogu forces answers with ({text}). A llama.cpp "
                "without token-id grammars (<[id]>) does that: update llama-server, or pass grammar_forcing=False "
                "(grounded-only)"
            )
        return None

    # ------------------------------------------------------------------ bodies
    def body(self, prompt: Sequence[int], n_predict: int, temperature: float | None, seed: int | None) -> dict:
        s = self.served
        return {
            "model": s.model_name,
            "prompt": [int(t) for t in prompt],
            "n_predict": int(n_predict),
            "n_probs": s.top_logprobs,
            "return_tokens": True,
            "stream": False,
            **llama_server_sampling(temperature, seed),
        }

    def forced_body(self, prompt: list[int], cont: list[int]) -> dict[str, Any]:
        body = self.body(prompt, len(cont), None, None)
        named = list(cont)
        if named[-1] in self.served.stop_token_ids:  # after the complete grammar only end tokens pass: bias this one
            body["logit_bias"] = [[named.pop(), FORCE_BIAS]]
        self.check_forceable(named)
        body.update(grammar=token_grammar(named), grammar_lazy=False)
        return body

    def check_forceable(self, ids: list[int]) -> None:
        """Refuse, before any request, an answer the token grammar cannot force. llama.cpp's grammar rejects
        a named token that leaves a character unfinished, or whose text starts with a NUL byte
        (src/llama-grammar.cpp, ``llama_grammar_apply_impl`` and ``llama_grammar_reject_candidates_for_stack``).
        Every candidate is then rejected, and accepting the token sampled anyway aborts llama.cpp
        (``llama_grammar_accept_impl``; seen in process)."""
        decode = self.served.tokenizer.decode
        for k, t in enumerate(ids):
            alone = decode([t], skip_special_tokens=False)
            cut = "\ufffd" in alone and decode(ids[: k + 1], skip_special_tokens=False).endswith("\ufffd")
            if cut or alone.startswith("\x00"):
                raise ServerCapabilityError(
                    f"token {k} of the answer ({t}) {'ends inside a UTF-8 character' if cut else 'is a NUL byte'}. "
                    "llama-server reports no probabilities for such a token, and its token grammar cannot force "
                    "one (llama.cpp's grammar rejects it, then aborts). Score such answers through vLLM or "
                    "llama-cpp-python's server"
                )

    # ------------------------------------------------------------------ the protocol
    async def generate(
        self, prompts: list[Any], max_new_tokens: int, temperature: float | None, seeds: list[int | None]
    ) -> list[Generation]:
        bodies = [self.body(p, max_new_tokens, temperature, s) for p, s in zip(prompts, seeds)]
        replies = await self.http.post_all(bodies, url=self.generate_url)
        out = []
        for data in replies:
            ids, steps = self.steps(data, generated=True)
            out.append(self.stopped_generation(ids, steps, data.get("stop_type") == "eos"))
        return out

    async def forced_steps(self, prompts: list[list[int]], conts: list[list[int]]) -> list[list[Step]]:
        if not self.grammar_forcing:
            return await super().forced_steps(prompts, conts)
        bodies = [self.forced_body(p, c) for p, c in zip(prompts, conts)]
        replies = await self.http.post_all(bodies, url=self.generate_url)
        out = []
        for data, cont in zip(replies, conts):
            ids, steps = self.steps(data)
            if ids != list(cont):
                raise ServerError(
                    f"{self.where()} decoded {ids[:8]}... where the token grammar forces "
                    f"{list(cont)[:8]}...; llama-server cannot force a token with empty text, nor an "
                    "end-of-generation token inside an answer"
                )
            out.append(steps)
        return out

    # ------------------------------------------------------------------ reading answers
    def steps(self, data: Any, generated: bool = False) -> tuple[list[int], list[Step]]:
        """(generated ids, one step per id) of a ``/completion`` answer (server-task.cpp,
        ``to_json_non_oaicompat`` and ``probs_vector_to_json``). A ``generated`` answer cut by the budget
        inside a character ends before that character: the tokens a smaller budget gives."""
        where = self.where()
        if not isinstance(data, dict):
            raise ServerError(f"{where} answered /completion with {str(data)[:200]}")
        ids = data.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids) or (data.get("content") and not ids):
            raise ServerCapabilityError(
                f"{where} returned no token ids (return_tokens); api='llama-server' needs a llama-server "
                "that honours return_tokens on /completion"
            )
        if data.get("stop_type") == "word":
            raise ServerCapabilityError(
                f"{where} stopped at a stop string of its command line ({data.get('stopping_word')!r}); a request "
                "cannot clear those. grogu ends answers at the end-of-turn token: start llama-server without them"
            )
        entries = data.get("completion_probabilities") or []
        if any(not isinstance(e, dict) or "logprob" not in e for e in entries):
            raise ServerError(f"{where} returned probabilities, not the log-probabilities asked for")
        cut = len(ids) - len(entries)
        if generated and 0 < cut < 4 and data.get("stop_type") == "limit":  # a character takes 4 bytes at most
            if [e.get("id") for e in entries] == ids[: len(entries)]:
                ids = ids[: len(entries)]
        if len(entries) != len(ids):
            raise ServerCapabilityError(
                f"{where} returned probabilities for {len(entries)} of the {len(ids)} tokens it decoded. "
                "llama-server reports none for a token that ends inside a UTF-8 character (a character split "
                "over byte tokens), so the answer has no statistics there. Score it through vLLM or "
                "llama-cpp-python's server"
            )
        steps = []
        for tok, e in zip(ids, entries):
            if e.get("id") != tok:
                raise ServerError(f"{where} returned probabilities out of step with its tokens")
            top = [float(t["logprob"]) for t in e.get("top_logprobs") or [] if float(t["logprob"]) > _LOWEST]
            if not top:
                raise ServerCapabilityError(
                    f"{where} returned no top log-probabilities for a token (n_probs={self.served.top_logprobs}). "
                    "llama-server reports none for tokens drafted by speculative decoding: start it without"
                )
            steps.append(Step(float(e["logprob"]), top))
        return ids, steps


__all__ = [
    "NEUTRAL",
    "FORCE_BIAS",
    "NO_GRAMMAR_WHY",
    "LlamaServerAPI",
    "llama_server_sampling",
    "token_grammar",
    "auto_tokenizer",
]
