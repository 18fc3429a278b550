"""OpenAI's ``/v1/completions`` as vLLM and llama-cpp-python serve it: what their two API classes share.

Generation reads each token's log-probability and top k from ``choices[0].logprobs``. Teacher forcing
reads the prompt's log-probabilities (vLLM's ``prompt_logprobs``, llama-cpp-python's ``echo``). An answer
whose token ids the server reads back otherwise than it generated them is teacher-forced in the server's
reading, so that its statistics are those of the ids returned.
"""

from __future__ import annotations

from typing import Any

from ...core.target import ServerCapabilityError
from ...core.types import Generation
from .base import BaseAPI
from .http import ServerError
from .requests import Step

#: one parsed answer: (text, finish_reason, per-token steps, token ids when known)
Parsed = tuple[str, Any, list[Step], Any]


class CompletionsAPI(BaseAPI):
    """The ``/v1/completions`` flow. A subclass writes the bodies (:meth:`gen_body`, :meth:`forced_body`),
    reads a forced answer (:meth:`parse_forced`) and says how an answer's ids are known (:meth:`answer_ids`)."""

    def gen_body(self, prompt: list[int], max_new_tokens: int, temperature: float | None, seed: int | None) -> dict:
        raise NotImplementedError

    def forced_body(self, prompt: list[int], cont: list[int]) -> dict:
        raise NotImplementedError

    def parse_forced(self, data: Any, prompt: list[int], cont: list[int]) -> list[Step]:
        raise NotImplementedError

    def generated_ids(self, choice: dict, tokens: list[str]) -> list[int] | None:
        """The answer's token ids when the answer carries them, else None."""
        return None

    async def prepare(self, prompts: list[list[int]]) -> None:
        """What must hold before token-id prompts are sent (nothing here)."""

    async def before_forcing(self, prompt: list[int]) -> None:
        """What a teacher-forcing request needs to know first (nothing here)."""

    async def answer_ids(self, prompts: list[list[int]], parsed: list[Parsed]) -> list[Parsed]:
        """Each answer with its token ids (as parsed here)."""
        return parsed

    # ------------------------------------------------------------------ the protocol
    async def generate(
        self, prompts: list[Any], max_new_tokens: int, temperature: float | None, seeds: list[int | None]
    ) -> list[Generation]:
        await self.prepare(prompts)
        bodies = [self.gen_body(p, max_new_tokens, temperature, s) for p, s in zip(prompts, seeds)]
        replies = await self.http.post_all(bodies, url=self.generate_url)
        parsed = await self.answer_ids(prompts, [self.parse_generation(r) for r in replies])
        stops = self.served.stop_token_ids
        gens: list[Generation | None] = []
        refit: list[int] = []
        for i, (text, finish, steps, ids) in enumerate(parsed):
            if len(ids) != len(steps):
                refit.append(i)  # generated tokens the server reads back otherwise: teacher-force its reading
            while ids and ids[-1] in stops:  # a stop token the server kept in the text
                ids, steps = ids[:-1], steps[:-1]
            gens.append(self.generation(ids, steps, finish) if i not in refit else None)
        empty = [i for i, g in enumerate(gens) if g is not None and not g.token_ids and g.finished]
        todo = refit + empty
        if todo:  # statistics by teacher forcing: re-tokenised answers, and the stop token of empty ones
            conts = [parsed[i][3] if i in refit else [self.served.end_of_turn] for i in todo]
            full = [k for k, c in enumerate(conts) if c]
            forced = dict(
                zip(full, await self.forced_steps([prompts[todo[k]] for k in full], [conts[k] for k in full]))
            )
            for k, (i, cont) in enumerate(zip(todo, conts)):
                g, steps = gens[i], forced.get(k, [])
                if g is None:
                    gens[i] = self.generation(cont, steps, parsed[i][1])
                else:
                    g.stop_entropy, g.stop_logprob = self.entropy(steps[0].top), steps[0].logprob
        return [g for g in gens if g is not None]

    async def forced_steps(self, prompts: list[list[int]], conts: list[list[int]]) -> list[list[Step]]:
        if not prompts:
            return []
        await self.prepare([p + c for p, c in zip(prompts, conts)])
        await self.before_forcing(prompts[0])
        bodies = [self.forced_body(p, c) for p, c in zip(prompts, conts)]
        replies = await self.http.post_all(bodies, url=self.generate_url)
        return [self.parse_forced(r, p, c) for r, p, c in zip(replies, prompts, conts)]

    # ------------------------------------------------------------------ reading answers
    def parse_generation(self, data: Any) -> Parsed:
        """(text, finish_reason, per-token steps, token ids when the server gives them)."""
        choice = data["choices"][0]
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        logprobs = lp.get("token_logprobs") or []
        tops = lp.get("top_logprobs") or []
        if len(tokens) != len(logprobs) or (tokens and len(tops) != len(tokens)):
            raise ServerError(
                f"{self.where()} returned log-probabilities that do not match "
                f"its tokens ({len(tokens)} tokens, {len(logprobs)} log-probabilities)"
            )
        if not tokens and "content" in lp:  # llama-server's format: an error, never an empty answer
            raise self.llama_server_format(choice.get("text") or "")
        if not tokens and (choice.get("text") or "").strip():  # an answer without its statistics: never empty ones
            raise self.no_logprobs()
        steps = [Step(float(l), self.check_top(t)) for l, t in zip(logprobs, tops)]
        return choice.get("text") or "", choice.get("finish_reason"), steps, self.generated_ids(choice, tokens)

    def llama_server_format(self, text: str) -> ServerCapabilityError:
        return ServerCapabilityError(
            f"{self.where()} answered {text[:40]!r} as llama.cpp's llama-server does: without "
            "the completions API's per-token log-probabilities (logprobs.tokens; it gives {'content': [...]}) "
            "and without prompt log-probabilities. Use api='llama-server' for it"
        )


__all__ = ["CompletionsAPI", "Parsed"]
