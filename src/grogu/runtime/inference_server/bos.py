"""What llama-cpp-python's server (``api="llama-cpp"``) adds to a text prompt, and the prompt's round trip.

llama-cpp-python 0.3.36 takes text prompts only (``/v1/completions``; ``llama.py``, ``_create_completion``).
It tokenizes the text with the special tokens parsed, and adds tokens of its own:

- a BOS token in front when the GGUF's ``tokenizer.ggml.add_bos_token`` is true;
- an EOS token at the end when its ``tokenizer.ggml.add_eos_token`` is true (or a SEP token, when the
  vocabulary has one).

grogu scores token ids. The model must read exactly those ids, as it does in process. So:

- :meth:`TextPrompts.probe` asks the server once per target. ``/extras/tokenize`` reads a text as a completion
  prompt is read, BOS and EOS included. The BOS is decided on the first token alone: is it the BOS id?
  The rest of the text may tokenize otherwise without changing that.
- A server that appends a token to every prompt (EOS or SEP) is refused: the model would read the
  prompt with that token after it. The probe sees a trailing EOS, or a one-token completion that
  counts more prompt tokens than ``/extras/tokenize``.
- :meth:`TextPrompts.text`: when the server adds a BOS, the prompt's own leading BOS is left out of the
  text. The model then reads one BOS, as in process. A prompt without a leading BOS cannot be sent
  then: the model would read a BOS that grogu's prompt does not hold. That is an error.
- :meth:`TextPrompts.check_round_trip`: the server's tokenization of each prompt's text must give grogu's ids
  exactly (each distinct prompt checked once per target). Otherwise an error names the first differing
  position.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from ...core.target import ServerCapabilityError
from .base import Served
from .http import ServerError

#: the text the probe tokenizes (its tokens do not matter: only the ones the server adds)
PROBE = "Hello world"
#: prompts whose round trip was checked, at most this many remembered per target
VERIFIED_MAX = 4096


def leading(ids: Sequence[int], token: Any) -> int:
    """How many times ``token`` starts ``ids``."""
    n = 0
    while n < len(ids) and ids[n] == token:
        n += 1
    return n


class TextPrompts:
    """The text prompts of ``api="llama-cpp"`` for one served model (see the module docstring)."""

    def __init__(self, served: Served) -> None:
        self.served = served
        #: the server adds a BOS token to every text prompt (None until probed, once per target)
        self.server_bos: bool | None = None
        self.verified: set[tuple[int, ...]] = set()

    def where(self) -> str:
        return f"the LLM server at {self.served.base_url}"

    async def server_tokens(self, text: str) -> list[int]:
        """The token ids llama-cpp-python reads ``text`` as, the tokens it adds included."""
        s = self.served
        data = await s.http.request("POST", "", {"input": text, "model": s.model_name}, url=s.root + "/extras/tokenize")
        return [int(t) for t in data["tokens"]]

    async def probe(self) -> None:
        """Whether llama-cpp-python adds a BOS token to a text prompt: the first token of its
        ``/extras/tokenize`` answer, and nothing else of it. Refuses a server that appends a token to
        every prompt (the GGUF's ``add_eos_token``). Asked once per target."""
        if self.server_bos is not None:
            return
        s = self.served
        body = {"model": s.model_name, "prompt": PROBE, "max_tokens": 1, **s.sampling(None, None)}
        try:
            theirs = await self.server_tokens(PROBE)
        except (ServerError, KeyError, TypeError, ValueError) as exc:  # owned_by "me" is generic
            raise ServerCapabilityError(
                f"{self.where()} has no llama-cpp-python /extras/tokenize route ({exc}); "
                "api='llama-cpp' needs llama-cpp-python's server: pass api='vllm' or api='chat' for another"
            ) from exc
        completion = (await s.http.post_all([body], url=s.base_url + "/completions"))[0]
        counted = (completion.get("usage") or {}).get("prompt_tokens")
        bos = getattr(s.tokenizer, "bos_token_id", None)
        server_bos = isinstance(bos, int) and theirs[:1] == [bos]
        rest = theirs[1:] if server_bos else theirs
        ends = {t for t in (getattr(s.tokenizer, "eos_token_id", None), *s.stop_token_ids) if isinstance(t, int)}
        if (rest and rest[-1] in ends) or (isinstance(counted, int) and counted > len(theirs)):
            seen = f"id {rest[-1]}, last" if rest and rest[-1] in ends else "not shown by /extras/tokenize"
            raise ServerCapabilityError(
                f"{self.where()} appends a token to every prompt ({seen}: it reads "
                f"{PROBE!r} as {theirs}, {counted} prompt tokens in a completion): the served GGUF's "
                "tokenizer.ggml.add_eos_token is true, or its vocabulary has a SEP token. The model would "
                "read each prompt with an end token after it, so grogu cannot score through it. Set the flag "
                "false in a copy of the GGUF (gguf-py's gguf_set_metadata.py FILE tokenizer.ggml.add_eos_token "
                "0), or serve the model with llama.cpp's llama-server (api='llama-server', token-id prompts)"
            )
        self.server_bos = server_bos

    def text(self, ids: list[int]) -> str:
        """A token-id prompt as llama-cpp-python's text prompt: without its leading BOS when the server
        adds one itself (:meth:`probe`), so that the model reads exactly ``ids``, one BOS as in
        process. A prompt without a leading BOS is refused then."""
        ids = list(ids)
        tokenizer = self.served.tokenizer
        if self.server_bos:
            bos = tokenizer.bos_token_id
            if not ids or ids[0] != bos:
                raise ServerCapabilityError(
                    f"{self.where()} puts a BOS token (id {bos}) in front of every text "
                    "prompt (the served GGUF's tokenizer.ggml.add_bos_token is true), and this prompt does not "
                    f"start with one (it starts with {ids[:3]}; the chat template renders no BOS). The model "
                    "would read a BOS that grogu's prompt does not hold. Pass a tokenizer= whose chat template "
                    "starts with the BOS token, set the flag false in a copy of the GGUF (gguf-py's "
                    "gguf_set_metadata.py FILE tokenizer.ggml.add_bos_token 0), or serve the model with "
                    "llama.cpp's llama-server (api='llama-server', token-id prompts)"
                )
            ids = ids[1:]
        return tokenizer.decode(ids, skip_special_tokens=False)

    async def prepare(self, prompts: Sequence[list[int]]) -> None:
        """Before sending token-id prompts to llama-cpp-python: the BOS probe, then each prompt's round
        trip (:meth:`check_round_trip`)."""
        await self.probe()
        await self.check_round_trip(prompts)

    async def check_round_trip(self, prompts: Sequence[list[int]]) -> None:
        """Raise unless the server reads the text of each prompt as exactly its ids (BOS included); each
        distinct prompt is checked once per target."""
        if len(self.verified) > VERIFIED_MAX:
            self.verified = set()
        todo = list(dict.fromkeys(tuple(p) for p in prompts if tuple(p) not in self.verified))
        if not todo:
            return
        texts = [self.text(list(p)) for p in todo]
        sem = asyncio.Semaphore(self.served.http.max_concurrency)

        async def one(text: str) -> list[int]:
            async with sem:
                return await self.server_tokens(text)

        read = await asyncio.gather(*(one(t) for t in texts))
        for ids, theirs in zip(todo, read):
            if list(ids) != theirs:
                raise ServerError(self.round_trip_error(list(ids), theirs))
            self.verified.add(ids)

    def round_trip_error(self, ids: list[int], theirs: list[int]) -> str:
        at = next((i for i, (a, b) in enumerate(zip(ids, theirs)) if a != b), min(len(ids), len(theirs)))
        tokenizer = self.served.tokenizer

        def show(seq: list[int]) -> str:
            if at >= len(seq):
                return "nothing (the end)"
            return f"{seq[at]} {tokenizer.decode([seq[at]], skip_special_tokens=False)!r}"

        bos = getattr(tokenizer, "bos_token_id", None)
        return (
            f"{self.where()} reads the prompt's text as other token ids than grogu's: "
            f"first difference at position {at} of {len(ids)} (grogu: {show(ids)}; server: {show(theirs)}). "
            f"The server's reading starts with {leading(theirs, bos)} BOS token(s), grogu's prompt with "
            f"{leading(ids, bos)}. The statistics would be another prompt's: pass the served model's "
            "tokenizer=, and token ids that its tokenizer gives back from their text"
        )


__all__ = ["TextPrompts", "PROBE", "leading"]
