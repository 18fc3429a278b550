"""The request bodies :class:`~grogu.runtime.inference_server.ServerTarget` sends and how it reads the answers, per API.

Bodies follow each server's own protocol classes (the fixtures in ``tests/test_server_requests.py``
name the file and commit they were read from):

- vLLM ``/v1/completions``: token-id prompts; ``return_token_ids`` (the answer's ids in
  ``choices[0].token_ids``; ``return_tokens_as_token_ids`` gives the ``token_id:N`` form as a fallback);
  ``prompt_logprobs`` for teacher forcing; the sampling fields a request leaves out are filled from the
  model's ``generation_config.json``, so the neutral ones are sent explicitly (``repetition_penalty``
  1.0, ``top_k`` -1, ``min_p`` 0.0, ``presence_penalty`` and ``frequency_penalty`` 0.0), and
  ``stop_token_ids``.
- llama-cpp-python: text prompts (its ``/v1/completions`` takes no token ids). What the server adds to
  them (a BOS, an EOS) and the check that it reads each prompt as grogu's ids:
  :mod:`grogu.runtime.inference_server.bos`. ``echo`` with ``logprobs`` gives the prompt's log-probabilities.
- llama.cpp's ``llama-server``: its native ``/completion`` (:mod:`grogu.runtime.inference_server.llama_server`).
- chat: ``/v1/chat/completions`` with messages (grounded-only). Every chat request carries the
  penalties at 0 (:data:`NEUTRAL_PENALTIES`); llama-server's chat route gets all its sampler fields.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ...core.prompts import ChatPrompt
from ...core.target import ServerCapabilityError
from ...core.types import UNKNOWN_TOKEN_ID, Generation
from .apis import CHAT_APIS
from .bos import LlamaCppPrompts
from .http import ServerError
from .topk import topk_entropy

STOP_TOKEN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
#: the penalties no server may fill in: vLLM takes them from the model's generation_config.json (or
#: --override-generation-config) when a request leaves them out, llama.cpp from its command line
NEUTRAL_PENALTIES = {"presence_penalty": 0.0, "frequency_penalty": 0.0}
#: sampling fields that vLLM would otherwise fill from the model's generation_config.json
NEUTRAL_SAMPLING = {"repetition_penalty": 1.0, "top_k": -1, "min_p": 0.0, **NEUTRAL_PENALTIES}


@dataclass
class Step:
    """One token position: the token's log-probability and the top-k log-probabilities there."""

    logprob: float
    top: list[float]


class RequestFormats(LlamaCppPrompts):
    """Request bodies and response parsing of :class:`~grogu.runtime.inference_server.ServerTarget` (its mixin: the
    attributes used here are the target's)."""

    def _sampling(self, temperature: float | None, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {"temperature": 0.0 if temperature is None else float(temperature), "top_p": 1.0}
        if seed is not None:
            body["seed"] = int(seed)
        if "llama-cpp" in (self.api, self.backend):  # llama.cpp samples with these on by default
            body.update(repeat_penalty=1.0, top_k=0 if temperature is not None else 1, min_p=0.0, **NEUTRAL_PENALTIES)
        elif self.api == "vllm" or self.backend in ("vllm", "sglang"):  # else from the model's generation_config
            body.update(NEUTRAL_SAMPLING)
        else:  # any other chat API: the OpenAI fields a server may fill from its own defaults
            body.update(NEUTRAL_PENALTIES)
        return body

    def _chat_body(
        self, prompt: ChatPrompt, max_new_tokens: int, temperature: float | None, seed: int | None
    ) -> dict[str, Any]:
        # the hosted OpenAI API wants max_completion_tokens (its newer models refuse max_tokens); the
        # OpenAI-compatible servers read max_tokens (llama-cpp-python ignores max_completion_tokens)
        budget = "max_completion_tokens" if self.hosted_openai else "max_tokens"
        return {
            "model": self.model_name,
            "messages": prompt.messages(),
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
            budget: max_new_tokens,
            **self._sampling(temperature, seed),
        }

    def _gen_body(
        self, prompt: list[int], max_new_tokens: int, temperature: float | None, seed: int | None
    ) -> dict[str, Any]:
        body = {
            "model": self.model_name,
            "max_tokens": max_new_tokens,
            "logprobs": self.top_logprobs,
            **self._sampling(temperature, seed),
        }
        if self.api == "vllm":
            body.update(
                prompt=prompt,
                return_token_ids=True,
                return_tokens_as_token_ids=True,
                skip_special_tokens=False,
                stop_token_ids=list(self.stop_token_ids),
                # grogu's stop tokens alone: vLLM otherwise adds the generation config's eos_token_id list
                # (vllm/sampling_params.py, update_from_generation_config), which grogu's may lack
                ignore_eos=True,
            )
        else:
            body.update(prompt=self._prompt_text(prompt))
        return body

    def _forced_body(self, prompt: list[int], cont: list[int]) -> dict[str, Any]:
        body = {"model": self.model_name, "max_tokens": 1, **self._sampling(None, None)}
        if self.api == "vllm":
            body.update(prompt=prompt + cont, prompt_logprobs=self.top_logprobs, return_tokens_as_token_ids=True)
        else:
            body.update(prompt=self._prompt_text(prompt + cont), echo=True, logprobs=self.top_logprobs)
        return body

    def _entropy(self, top: list[float]) -> float:
        return topk_entropy(top, self.vocab_size or 0, self.tail)

    def _no_logprobs(self) -> ServerCapabilityError:
        if self.api in CHAT_APIS:
            return ServerCapabilityError(
                f"the LLM server at {self.base_url} answered the chat request without log-probabilities (it "
                f"ignored logprobs=true, top_logprobs={self.top_logprobs}); grogu needs each generated token's "
                "top log-probabilities, which OpenAI's chat API, Ollama from version 0.12.11, vLLM, SGLang and "
                "llama-cpp-python (logits_all on) return on request. Update or "
                "reconfigure the server, or serve the model with one that does"
            )
        return ServerCapabilityError(
            f"the LLM server at {self.base_url} returned no top log-probabilities; grogu needs "
            f"top_logprobs={self.top_logprobs} (vLLM: --max-logprobs; llama-cpp-python: logits_all on)"
        )

    def _check_top(self, top: Any) -> list[float]:
        if not top:
            raise self._no_logprobs()
        values = [
            float(v["logprob"]) if isinstance(v, dict) else float(v)
            for v in (top.values() if isinstance(top, dict) else top)
        ]
        # the k largest: vLLM adds the sampled or forced token to its top k when it ranks below (k + 1 entries)
        return sorted(values, reverse=True)[: self.top_logprobs]

    def _parse_generation(self, data: Any) -> tuple[str, str | None, list[Step], list[int] | None]:
        """(text, finish_reason, per-token steps, token ids when the server gives them)."""
        choice = data["choices"][0]
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        logprobs = lp.get("token_logprobs") or []
        tops = lp.get("top_logprobs") or []
        if len(tokens) != len(logprobs) or (tokens and len(tops) != len(tokens)):
            raise ServerError(
                f"the LLM server at {self.base_url} returned log-probabilities that do not match "
                f"its tokens ({len(tokens)} tokens, {len(logprobs)} log-probabilities)"
            )
        if not tokens and "content" in lp:  # llama-server's format: an error, never an empty answer
            raise self._llama_server_format(choice.get("text") or "")
        if not tokens and (choice.get("text") or "").strip():  # an answer without its statistics: never empty ones
            raise self._no_logprobs()
        steps = [Step(float(l), self._check_top(t)) for l, t in zip(logprobs, tops)]
        ids = None
        if self.api == "vllm":
            ids = self._generated_ids(choice, tokens)
        return choice.get("text") or "", choice.get("finish_reason"), steps, ids

    def _generated_ids(self, choice: dict, tokens: list[str]) -> list[int]:
        """The answer's token ids: ``token_ids`` (``return_token_ids``), else the ``token_id:N`` form of
        the log-probability tokens (``return_tokens_as_token_ids``); an error when neither came back."""
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
            return [int(t) for t in ids]
        if all(isinstance(t, str) and t.startswith("token_id:") and t[9:].lstrip("-").isdigit() for t in tokens):
            return [int(t[9:]) for t in tokens]
        raise ServerCapabilityError(
            f"the LLM server at {self.base_url} returned neither the answer's token ids (return_token_ids) nor "
            f"its tokens as 'token_id:N' (return_tokens_as_token_ids), e.g. {tokens[:1]!r}; api='vllm' needs "
            "vLLM's completions API. For another server use api='chat' (grounded-only) or api='llama-cpp'"
        )

    def _llama_server_format(self, text: str) -> ServerCapabilityError:
        return ServerCapabilityError(
            f"the LLM server at {self.base_url} answered {text[:40]!r} as llama.cpp's llama-server does: without "
            "the completions API's per-token log-probabilities (logprobs.tokens; it gives {'content': [...]}) "
            "and without prompt log-probabilities. Use api='llama-server' for it"
        )

    def _parse_chat(self, data: Any) -> Generation:
        """A chat completion's answer: its text, and each generated token's text, log-probability and
        top-k entropy from ``choices[0].logprobs.content``."""
        import torch

        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError) as exc:
            raise ServerError(
                f"the LLM server at {self.base_url} answered the chat request without a choice: {str(data)[:200]}"
            ) from exc
        text = (choice.get("message") or {}).get("content") or ""
        lp = choice.get("logprobs")
        entries = lp.get("content") if isinstance(lp, dict) else None
        if entries is None or (not entries and text.strip()):
            raise self._no_logprobs()
        tokens, steps = [], []
        for e in entries:
            if not isinstance(e, dict) or not isinstance(e.get("logprob"), (int, float)):
                raise self._no_logprobs()
            tokens.append(str(e.get("token", "")))
            steps.append(Step(float(e["logprob"]), self._check_top(e.get("top_logprobs"))))
        finish = choice.get("finish_reason")
        stop = None
        if finish == "stop" and tokens and tokens[-1] in STOP_TOKEN_NAMES:  # a server that reports the end token
            tokens.pop()
            stop = steps.pop()
        gen = Generation(
            [UNKNOWN_TOKEN_ID] * len(steps),
            torch.tensor([self._entropy(st.top) for st in steps], dtype=torch.float32),
            torch.tensor([st.logprob for st in steps], dtype=torch.float32),
            text=text.strip(),
            tokens=tokens,
        )
        if finish == "stop":  # ended its turn; the end token's statistics only where the server reported them
            gen.stop_token_id = UNKNOWN_TOKEN_ID
            if stop is not None:
                gen.stop_entropy, gen.stop_logprob = self._entropy(stop.top), stop.logprob
        return gen

    def _parse_forced(self, data: Any, prompt: list[int], cont: list[int]) -> list[Step]:
        """The steps of ``cont``'s tokens from a teacher-forcing response."""
        choice = data["choices"][0]
        n = len(cont)
        if self.api == "vllm":
            entries = choice.get("prompt_logprobs") or data.get("prompt_logprobs") or []
            if not entries and (self.backend == "llama-server" or "content" in (choice.get("logprobs") or {})):
                raise self._llama_server_format(choice.get("text") or "")
            entries = entries[len(prompt) : len(prompt) + n]
            if len(entries) != n:
                raise ServerError(
                    f"the LLM server at {self.base_url} returned {len(entries)} prompt "
                    f"log-probabilities for a {n}-token answer (does it support prompt_logprobs?)"
                )
            steps = []
            for tok, entry in zip(cont, entries):
                entry = {int(str(k).split(":")[-1]): v for k, v in entry.items()}
                if tok not in entry:
                    raise ServerError(
                        f"the LLM server at {self.base_url} did not return the forced token's log-probability"
                    )
                steps.append(Step(float(entry[tok]["logprob"]), self._check_top(list(entry.values()))))
            return steps
        # llama-cpp-python's echo: one entry per prompt token, the generated token last. Entry i holds the
        # distribution that predicts token i when the prompt starts with the BOS token (it drops that
        # token), else the one after token i (``echo_shift`` 1, found by :meth:`_probe_echo`)
        lp = choice.get("logprobs") or {}
        tokens, tops = lp.get("tokens") or [], lp.get("top_logprobs") or []
        shift = self._echo_shift or 0
        generated = int((data.get("usage") or {}).get("completion_tokens", 1))  # 0 when it stopped at once
        end = len(tokens) - generated
        if end - n - shift < 0 or len(tokens) != len(tops):
            raise ServerError(
                f"the LLM server at {self.base_url} echoed {len(tops)} positions for a "
                f"{n}-token answer (is logits_all on?)"
            )
        pieces = tokens[end - n : end]
        # the server re-tokenises the text: its ids are checked against ours before (_check_round_trip),
        # and its count must be ours here too, or the last n positions are not the answer's
        counted = (data.get("usage") or {}).get("prompt_tokens")
        if isinstance(counted, int) and counted != len(prompt) + n:
            raise ServerError(
                f"the LLM server at {self.base_url} tokenised the prompt into {counted} tokens, "
                f"the tokenizer given to grogu into {len(prompt) + n}; pass the served model's "
                "tokenizer="
            )
        logprobs = lp.get("token_logprobs") or []
        steps = []
        for j, piece in enumerate(pieces):
            top = tops[end - n - shift + j]
            values = self._check_top(top)
            if shift == 0:  # the entry is the token's own: its log-probability as the server computed it
                steps.append(Step(float(logprobs[end - n + j]), values))
                continue
            if piece not in top:
                raise ServerCapabilityError(
                    f"the forced answer token {piece!r} is not among the server's top {self.top_logprobs} "
                    "log-probabilities at its position, so its log-probability is unknown (llama-cpp-python's echo "
                    "is one position off without a BOS). Raise top_logprobs, or serve the model with vLLM, "
                    "SGLang or llama-server, which report any forced token's log-probability"
                )
            steps.append(Step(float(top[piece]), values))
        return steps

    async def _probe_echo(self, prompt: list[int]) -> None:
        """Whether llama-cpp-python's echo reports each prompt position's distribution at the token it
        predicts (shift 0) or one entry earlier (shift 1): a greedy token's log-probability from generation
        against the same token forced by echo."""
        if self.api != "llama-cpp" or self._echo_shift is not None:
            return
        gen = (await self.http.post_all([self._gen_body(prompt, 1, None, None)]))[0]
        text, _, steps, _ = self._parse_generation(gen)
        body = {**self._forced_body(prompt, []), "prompt": self._prompt_text(prompt) + text}
        forced = (await self.http.post_all([body]))[0]
        lp = forced["choices"][0]["logprobs"]
        logprobs = lp.get("token_logprobs") or []
        # the forced token's entry: the last one before those generated after it (none when the model stops)
        at = len(logprobs) - int((forced.get("usage") or {}).get("completion_tokens", 1)) - 1
        if not steps or at < 2:
            self._echo_shift = 0
            return
        same = abs(float(logprobs[at]) - steps[0].logprob) < 1e-3
        self._echo_shift = 0 if same else 1

    async def _answer_ids(self, items: list[tuple[list[int], str]]) -> list[list[int]]:
        """llama-cpp-python: the token ids of each answer text as the server reads it after its prompt
        (``/extras/tokenize`` of prompt + answer, the prompt's own tokens taken off), so that the answer
        echoed back under another prompt ending the same way has exactly these tokens."""
        sem = asyncio.Semaphore(self.http.max_concurrency)

        async def tokens(client: Any, text: str) -> list[int]:
            async with sem:
                return await self._server_tokens(client, text)

        async with self.http.client() as client:
            out = []
            for prompt, answer in items:
                text = self._prompt_text(prompt)
                head, full = await asyncio.gather(tokens(client, text), tokens(client, text + answer))
                if full[: len(head)] != head:
                    raise ServerError(
                        f"the LLM server at {self.base_url} reads the answer into its prompt's "
                        "last token; grogu cannot tell the answer's tokens apart"
                    )
                out.append(full[len(head) :])
            return out

    def _http_error(self, resp: Any, url: str) -> Exception:
        """What a refused request means, in this target's terms (:class:`Connection`'s ``explain``)."""
        text = resp.text[:500]
        low = text.lower()
        if resp.status_code == 401 or resp.status_code == 403:
            return ServerError(f"the LLM server at {url} refused the API key ({resp.status_code}): {text}")
        if self.api == "llama-server" and "grammar" in low:
            return ServerCapabilityError(
                f"llama-server at {url} refused the token grammar grogu forces answers with ({text}). A llama.cpp "
                "without token-id grammars (<[id]>) does that: update llama-server, or pass grammar_forcing=False "
                "(grounded-only)"
            )
        if "context" in low and any(w in low for w in ("exceed", "maximum", "too long", "length", "window")):
            cut = (
                "grogu cut the documents with the tokenizer given, whose count differs from the server's: "
                "pass a smaller context_window="
                if getattr(self, "tokenizer", None) is not None
                else "pass tokenizer= (and context_window=) so that grogu cuts the documents to fit"
            )
            return ServerError(
                f"the LLM server at {url} refused a prompt that does not fit the model's context "
                f"window ({resp.status_code}: {text}); {cut}, or give fewer or shorter documents"
            )
        if "logprob" in low or "logits_all" in low:
            return ServerCapabilityError(
                f"the LLM server at {url} refused the log-probabilities grogu asks for (top_logprobs="
                f"{self.top_logprobs}): {text}. vLLM: start it with --max-logprobs {self.top_logprobs} (or "
                f"more), or pass a smaller top_logprobs; llama-cpp-python: keep logits_all on"
            )
        if resp.status_code == 404 or ("model" in low and ("not found" in low or "does not exist" in low)):
            served = [m.get("id") for m in self._models] if self._models else None
            return ServerError(
                f"the LLM server at {url} does not serve model {self.model_name!r} "
                f"(status {resp.status_code}: {text})" + (f"; it serves {served}" if served else "")
            )
        return ServerError(f"the LLM server at {url} answered {resp.status_code}: {text}")
