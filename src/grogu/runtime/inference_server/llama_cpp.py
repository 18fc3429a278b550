"""llama-cpp-python's server (``python -m llama_cpp.server``, ``api="llama-cpp"``): :class:`LlamaCppAPI`.

Read from llama-cpp-python 0.3.36. Its ``/v1/completions`` takes text prompts only: grogu sends each
token-id prompt's text, checked to read back as those ids (:mod:`grogu.runtime.inference_server.bos`).
``echo`` with ``logprobs`` gives the prompt's log-probabilities (``logits_all`` on, its default). Its
answers come as text: their token ids are the server's reading of them after their prompt
(``/extras/tokenize``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...core.target import ServerCapabilityError
from .base import Served
from .bos import TextPrompts
from .completions import CompletionsAPI, Parsed
from .http import ServerError
from .requests import Step


class LlamaCppAPI(CompletionsAPI):
    """llama-cpp-python's ``/v1/completions`` with text prompts and ``echo``."""

    name = "llama-cpp"

    def __init__(self, served: Served) -> None:
        super().__init__(served)
        self.prompts = TextPrompts(served)
        #: where echo reports a prompt token's distribution: 0 at the token, 1 one entry earlier (probed once)
        self.echo_shift: int | None = None

    def gen_body(self, prompt: list[int], max_new_tokens: int, temperature: float | None, seed: int | None) -> dict:
        s = self.served
        return {
            "model": s.model_name,
            "max_tokens": max_new_tokens,
            "logprobs": s.top_logprobs,
            **s.sampling(temperature, seed),
            "prompt": self.prompts.text(prompt),
        }

    def forced_body(self, prompt: list[int], cont: list[int]) -> dict:
        s = self.served
        return {
            "model": s.model_name,
            "max_tokens": 1,
            **s.sampling(None, None),
            "prompt": self.prompts.text(prompt + cont),
            "echo": True,
            "logprobs": s.top_logprobs,
        }

    async def prepare(self, prompts: list[list[int]]) -> None:
        await self.prompts.prepare(prompts)

    async def before_forcing(self, prompt: list[int]) -> None:
        """Whether llama-cpp-python's echo reports each prompt position's distribution at the token it
        predicts (shift 0) or one entry earlier (shift 1): a greedy token's log-probability from generation
        against the same token forced by echo."""
        if self.echo_shift is not None:
            return
        gen = (await self.http.post_all([self.gen_body(prompt, 1, None, None)], url=self.generate_url))[0]
        text, _, steps, _ = self.parse_generation(gen)
        body = {**self.forced_body(prompt, []), "prompt": self.prompts.text(prompt) + text}
        forced = (await self.http.post_all([body], url=self.generate_url))[0]
        lp = forced["choices"][0]["logprobs"]
        logprobs = lp.get("token_logprobs") or []
        # the forced token's entry: the last one before those generated after it (none when the model stops)
        at = len(logprobs) - int((forced.get("usage") or {}).get("completion_tokens", 1)) - 1
        if not steps or at < 2:
            self.echo_shift = 0
            return
        self.echo_shift = 0 if abs(float(logprobs[at]) - steps[0].logprob) < 1e-3 else 1

    async def answer_ids(self, prompts: list[list[int]], parsed: list[Parsed]) -> list[Parsed]:
        """Each answer with the token ids of its text as the server reads it after its prompt
        (``/extras/tokenize`` of prompt + answer, the prompt's own tokens taken off), so that the answer
        echoed back under another prompt ending the same way has exactly these tokens."""
        sem = asyncio.Semaphore(self.http.max_concurrency)

        async def tokens(text: str) -> list[int]:
            async with sem:
                return await self.prompts.server_tokens(text)

        out = []
        for prompt, (answer, finish, steps, _) in zip(prompts, parsed):
            text = self.prompts.text(prompt)
            head, full = await asyncio.gather(tokens(text), tokens(text + answer))
            if full[: len(head)] != head:
                raise ServerError(
                    f"{self.where()} reads the answer into its prompt's last token; grogu cannot tell the "
                    "answer's tokens apart"
                )
            out.append((answer, finish, steps, full[len(head) :]))
        return out

    def parse_forced(self, data: Any, prompt: list[int], cont: list[int]) -> list[Step]:
        """The steps of ``cont``'s tokens from llama-cpp-python's echo: one entry per prompt token, the
        generated token last. Entry i holds the distribution that predicts token i when the prompt starts
        with the BOS token (it drops that token), else the one after token i (:attr:`echo_shift` 1)."""
        choice = data["choices"][0]
        n = len(cont)
        lp = choice.get("logprobs") or {}
        tokens, tops = lp.get("tokens") or [], lp.get("top_logprobs") or []
        shift = self.echo_shift or 0
        generated = int((data.get("usage") or {}).get("completion_tokens", 1))  # 0 when it stopped at once
        end = len(tokens) - generated
        if end - n - shift < 0 or len(tokens) != len(tops):
            raise ServerError(f"{self.where()} echoed {len(tops)} positions for a {n}-token answer (is logits_all on?)")
        pieces = tokens[end - n : end]
        # the server re-tokenises the text: its ids are checked against ours before (the round trip), and
        # its count must be ours here too, or the last n positions are not the answer's
        counted = (data.get("usage") or {}).get("prompt_tokens")
        if isinstance(counted, int) and counted != len(prompt) + n:
            raise ServerError(
                f"{self.where()} tokenised the prompt into {counted} tokens, the tokenizer given to grogu "
                f"into {len(prompt) + n}; pass the served model's tokenizer="
            )
        logprobs = lp.get("token_logprobs") or []
        steps = []
        for j, piece in enumerate(pieces):
            top = tops[end - n - shift + j]
            values = self.check_top(top)
            if shift == 0:  # the entry is the token's own: its log-probability as the server computed it
                steps.append(Step(float(logprobs[end - n + j]), values))
                continue
            if piece not in top:
                raise ServerCapabilityError(
                    f"the forced answer token {piece!r} is not among the server's top {self.served.top_logprobs} "
                    "log-probabilities at its position, so its log-probability is unknown (llama-cpp-python's echo "
                    "is one position off without a BOS). Raise top_logprobs, or serve the model with vLLM, "
                    "SGLang or llama-server, which report any forced token's log-probability"
                )
            steps.append(Step(float(top[piece]), values))
        return steps


__all__ = ["LlamaCppAPI"]
