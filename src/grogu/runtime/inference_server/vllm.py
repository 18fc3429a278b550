"""vLLM through its OpenAI-compatible ``/v1/completions`` (``api="vllm"``): :class:`VllmAPI`.

Read from vLLM 0.33 (``vllm/entrypoints/openai/completion/protocol.py``, ``vllm/sampling_params.py``):

- Token-id prompts. ``return_token_ids`` gives the answer's ids in ``choices[0].token_ids``;
  ``return_tokens_as_token_ids`` gives the ``token_id:N`` form as a fallback.
- ``prompt_logprobs`` for teacher forcing (start vLLM with ``--max-logprobs`` at least ``top_logprobs``).
- The sampling fields a request leaves out are filled from the model's ``generation_config.json``, so the
  neutral ones are sent explicitly (``repetition_penalty`` 1.0, ``top_k`` -1, ``min_p`` 0.0,
  ``presence_penalty`` and ``frequency_penalty`` 0.0), and ``stop_token_ids``.
- Given next tokens (ACU's label tokens): ``logprob_token_ids`` with ``max_tokens`` 1 returns the raw
  log-probabilities of up to 128 given tokens at the generated position, in
  ``choices[0].logprobs.top_logprobs[0]`` keyed ``"token_id:N"`` (``MAX_LOGPROB_TOKEN_IDS``). An older vLLM
  ignores the field (it keeps unknown fields): the values are then missing, and grogu teacher-forces each
  token instead (:mod:`grogu.runtime.inference_server.next_token`).
"""

from __future__ import annotations

from typing import Any

from ...core.target import ServerCapabilityError
from .completions import CompletionsAPI
from .http import ServerError
from .requests import Step

#: the most token ids vLLM's ``logprob_token_ids`` takes (vllm/sampling_params.py)
VLLM_MAX_TOKEN_IDS = 128


class VllmAPI(CompletionsAPI):
    """vLLM's ``/v1/completions`` with token-id prompts and prompt log-probabilities."""

    name = "vllm"

    def gen_body(self, prompt: list[int], max_new_tokens: int, temperature: float | None, seed: int | None) -> dict:
        s = self.served
        return {
            "model": s.model_name,
            "max_tokens": max_new_tokens,
            "logprobs": s.top_logprobs,
            **s.sampling(temperature, seed),
            "prompt": prompt,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "stop_token_ids": list(s.stop_token_ids),
            # grogu's stop tokens alone: vLLM otherwise adds the generation config's eos_token_id list
            # (vllm/sampling_params.py, update_from_generation_config), which grogu's may lack
            "ignore_eos": True,
        }

    def forced_body(self, prompt: list[int], cont: list[int]) -> dict:
        s = self.served
        return {
            "model": s.model_name,
            "max_tokens": 1,
            **s.sampling(None, None),
            "prompt": prompt + cont,
            "prompt_logprobs": s.top_logprobs,
            "return_tokens_as_token_ids": True,
        }

    def generated_ids(self, choice: dict, tokens: list[str]) -> list[int]:
        """The answer's token ids: ``token_ids`` (``return_token_ids``), else the ``token_id:N`` form of
        the log-probability tokens (``return_tokens_as_token_ids``); an error when neither came back."""
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
            return [int(t) for t in ids]
        if all(isinstance(t, str) and t.startswith("token_id:") and t[9:].lstrip("-").isdigit() for t in tokens):
            return [int(t[9:]) for t in tokens]
        raise ServerCapabilityError(
            f"{self.where()} returned neither the answer's token ids (return_token_ids) nor "
            f"its tokens as 'token_id:N' (return_tokens_as_token_ids), e.g. {tokens[:1]!r}; api='vllm' needs "
            "vLLM's completions API. For another server use api='chat' (grounded-only) or api='llama-cpp'"
        )

    def parse_forced(self, data: Any, prompt: list[int], cont: list[int]) -> list[Step]:
        """The steps of ``cont``'s tokens from ``prompt_logprobs``: one entry per prompt token (the first
        null), each keyed by token id."""
        choice = data["choices"][0]
        n = len(cont)
        entries = choice.get("prompt_logprobs") or data.get("prompt_logprobs") or []
        if not entries and (self.served.llama_server_behind or "content" in (choice.get("logprobs") or {})):
            raise self.llama_server_format(choice.get("text") or "")
        entries = entries[len(prompt) : len(prompt) + n]
        if len(entries) != n:
            raise ServerError(
                f"{self.where()} returned {len(entries)} prompt "
                f"log-probabilities for a {n}-token answer (does it support prompt_logprobs?)"
            )
        steps = []
        for tok, entry in zip(cont, entries):
            entry = {int(str(k).split(":")[-1]): v for k, v in entry.items()}
            if tok not in entry:
                raise ServerError(f"{self.where()} did not return the forced token's log-probability")
            steps.append(Step(float(entry[tok]["logprob"]), self.check_top(list(entry.values()))))
        return steps

    async def next_token_rows(self, prompts: list[list[int]], cols: list[int]) -> list[list[float]] | None:
        """One ``logprob_token_ids`` request per prompt; None when the server did not return every value."""
        if not prompts or len(cols) > VLLM_MAX_TOKEN_IDS:
            return None
        bodies = [{**self.gen_body(list(p), 1, None, None), "logprobs": 1, "logprob_token_ids": cols} for p in prompts]
        replies = await self.http.post_all(bodies, url=self.generate_url)
        rows = []
        for reply in replies:
            try:
                top = reply["choices"][0]["logprobs"]["top_logprobs"][0]
                got = {int(str(k).split("token_id:")[1]): float(v) for k, v in top.items()}
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                return None
            if any(c not in got for c in cols):
                return None
            rows.append([got[c] for c in cols])
        return rows


__all__ = ["VllmAPI", "VLLM_MAX_TOKEN_IDS"]
