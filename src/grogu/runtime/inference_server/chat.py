"""A chat API, grounded-only (``api="chat"``): :class:`ChatAPI`, for the hosted OpenAI API, Ollama's OpenAI
route and the chat endpoint of any OpenAI-compatible server.

``/v1/chat/completions`` with the prompt as messages, ``logprobs: true``, ``top_logprobs: k`` (at most 20),
``temperature: 0``, and the answer budget as ``max_completion_tokens`` for the hosted OpenAI API,
``max_tokens`` for every other server. Every request carries the penalties at 0; the sampling fields of
the server behind the URL are sent neutral too (llama-server's chat route passes all its sampler fields
through). A chat API returns the log-probabilities of the tokens it generates only: no teacher forcing.
"""

from __future__ import annotations

from typing import Any

from ...core.prompts import ChatPrompt
from ...core.target import GENERATE, ServerCapabilityError
from ...core.types import UNKNOWN_TOKEN_ID, Generation
from .base import UNIFORM_NEEDS_VOCAB, BaseAPI, Settings
from .http import ServerError
from .requests import STOP_TOKEN_NAMES, Step

#: the most alternatives per token the OpenAI chat API returns (``top_logprobs`` 0..20); Ollama's too
CHAT_MAX_TOP_LOGPROBS = 20


def check_chat_settings(tokenizer: Any, context_window: Any, stop_token_ids: Any) -> None:
    """Refuse the settings that do not apply to a chat API (``api="chat"`` or ``"ollama"``)."""
    if context_window is not None and tokenizer is None:
        raise ValueError(
            "context_window is used to cut documents to fit, which needs the model's tokenizer: "
            "pass tokenizer= too, or leave context_window out (the server then refuses a prompt "
            "that does not fit, with its own message)"
        )
    if stop_token_ids is not None:
        raise ValueError(
            "stop_token_ids do not apply to api='chat': the server ends the answer at the end of its chat turn"
        )


class ChatAPI(BaseAPI):
    """``/v1/chat/completions`` with messages; grounded-only."""

    name = "chat"
    capabilities = frozenset({GENERATE})
    takes_messages = True

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        super().check_settings(settings)
        check_chat_settings(settings.tokenizer, settings.context_window, settings.stop_token_ids)
        if settings.top_logprobs > CHAT_MAX_TOP_LOGPROBS:
            raise ValueError(
                f"top_logprobs must be at most {CHAT_MAX_TOP_LOGPROBS} with api={cls.name!r} (the "
                f"OpenAI chat API's range, which Ollama follows), got {settings.top_logprobs}"
            )
        if settings.hosted_openai and settings.tokenizer is None and settings.vocab_size is None:
            if settings.tail == "uniform":  # the hosted API gives no vocabulary size
                raise ValueError(UNIFORM_NEEDS_VOCAB)

    @property
    def generate_url(self) -> str:
        return self.served.base_url + "/chat/completions"

    def body(self, prompt: ChatPrompt, max_new_tokens: int, temperature: float | None, seed: int | None) -> dict:
        s = self.served
        # the hosted OpenAI API wants max_completion_tokens (its newer models refuse max_tokens); the
        # OpenAI-compatible servers read max_tokens (llama-cpp-python ignores max_completion_tokens)
        budget = "max_completion_tokens" if s.hosted_openai else "max_tokens"
        return {
            "model": s.model_name,
            "messages": prompt.messages(),
            "logprobs": True,
            "top_logprobs": s.top_logprobs,
            budget: max_new_tokens,
            **s.sampling(temperature, seed),
        }

    def as_chat(self, data: Any) -> Any:
        """An answer in the chat completions' shape (it is one here)."""
        return data

    async def generate(
        self, prompts: list[Any], max_new_tokens: int, temperature: float | None, seeds: list[int | None]
    ) -> list[Generation]:
        bodies = [self.body(p, max_new_tokens, temperature, s) for p, s in zip(prompts, seeds)]
        replies = await self.http.post_all(bodies, url=self.generate_url)
        return [self.parse(self.as_chat(r)) for r in replies]

    def no_logprobs(self) -> ServerCapabilityError:
        return ServerCapabilityError(
            f"{self.where()} answered the chat request without log-probabilities (it "
            f"ignored logprobs=true, top_logprobs={self.served.top_logprobs}); grogu needs each generated token's "
            "top log-probabilities, which OpenAI's chat API, Ollama from version 0.12.11, vLLM, SGLang and "
            "llama-cpp-python (logits_all on) return on request. Update or "
            "reconfigure the server, or serve the model with one that does"
        )

    def parse(self, data: Any) -> Generation:
        """A chat completion's answer: its text, and each generated token's text, log-probability and
        top-k entropy from ``choices[0].logprobs.content``."""
        import torch

        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError) as exc:
            raise ServerError(f"{self.where()} answered the chat request without a choice: {str(data)[:200]}") from exc
        text = (choice.get("message") or {}).get("content") or ""
        lp = choice.get("logprobs")
        entries = lp.get("content") if isinstance(lp, dict) else None
        if entries is None or (not entries and text.strip()):
            raise self.no_logprobs()
        tokens, steps = [], []
        for e in entries:
            if not isinstance(e, dict) or not isinstance(e.get("logprob"), (int, float)):
                raise self.no_logprobs()
            tokens.append(str(e.get("token", "")))
            steps.append(Step(float(e["logprob"]), self.check_top(e.get("top_logprobs"))))
        finish = choice.get("finish_reason")
        stop = None
        if finish == "stop" and tokens and tokens[-1] in STOP_TOKEN_NAMES:  # a server that reports the end token
            tokens.pop()
            stop = steps.pop()
        gen = Generation(
            [UNKNOWN_TOKEN_ID] * len(steps),
            torch.tensor([self.entropy(st.top) for st in steps], dtype=torch.float32),
            torch.tensor([st.logprob for st in steps], dtype=torch.float32),
            text=text.strip(),
            tokens=tokens,
        )
        if finish == "stop":  # ended its turn; the end token's statistics only where the server reported them
            gen.stop_token_id = UNKNOWN_TOKEN_ID
            if stop is not None:
                gen.stop_entropy, gen.stop_logprob = self.entropy(stop.top), stop.logprob
        return gen


__all__ = ["ChatAPI", "CHAT_MAX_TOP_LOGPROBS", "check_chat_settings"]
