"""What the API classes share: a target's settings (:class:`Settings`), the served model an API is bound
to (:class:`Served`), and the reading of top-k log-probabilities into statistics (:class:`BaseAPI`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...core.target import GENERATE, NEXT_TOKEN, TEACHER_FORCE, ServerCapabilityError
from ...core.types import Generation, TokenStats
from .http import Connection
from .requests import Step, openai_sampling
from .topk import topk_entropy


@dataclass(frozen=True)
class Settings:
    """A target's settings as given (checked when the target is made)."""

    #: the OpenAI-compatible base URL, ending in ``/v1``
    base_url: str
    api: str
    model: str | None
    tokenizer: Any
    top_logprobs: int
    tail: str | None
    vocab_size: int | None
    context_window: int | None
    stop_token_ids: Sequence[int] | None
    grammar_forcing: bool | None
    hosted_openai: bool


@dataclass
class Served:
    """The served model as a connected target knows it: what an API class reads."""

    http: Connection
    #: the OpenAI-compatible base URL, ending in ``/v1``
    base_url: str
    model_name: str
    top_logprobs: int
    tokenizer: Any
    stop_token_ids: list[int]
    vocab_size: int | None
    tail: str
    hosted_openai: bool = False
    #: the neutral sampling fields of the server behind the URL (:func:`~.apis.server_sampling`)
    sampling: Callable[[float | None, int | None], dict[str, Any]] = openai_sampling
    #: the server behind the URL is llama.cpp's llama-server (told from ``/v1/models``)
    llama_server_behind: bool = False
    #: the ``grammar_forcing`` setting (None: the API's default)
    grammar_forcing: bool | None = None

    @property
    def root(self) -> str:
        """The server's root URL, where the native routes are (``/generate``, ``/completion``, ``/api/...``)."""
        return self.base_url[: -len("/v1")]

    @property
    def end_of_turn(self) -> int:
        """The token an answer ends with: the tokenizer's EOS when it is a stop token, else the first one."""
        eos = self.tokenizer.eos_token_id
        return int(eos) if eos in self.stop_token_ids else self.stop_token_ids[0]


#: why the ``"uniform"`` tail needs the vocabulary size
UNIFORM_NEEDS_VOCAB = (
    "tail='uniform' spreads the mass outside the top k over the rest of the vocabulary, "
    "whose size is unknown here: pass vocab_size= (or tokenizer=), or tail='min'"
)
#: why a chat API cannot teacher-force
CHAT_WHY = "a chat API returns log-probabilities of the tokens it generates only, no prompt log-probabilities"


def no_teacher_forcing(target: str, why: str, what: str) -> str:
    """Why ``what`` fails on a grounded-only target, what works through it, and how to get the rest."""
    return (
        f"{what} needs teacher forcing (a given answer's log-probabilities under another prompt), which "
        f"{target} cannot do: {why}. Through this target choose metric='entropy' or metric='ppl' "
        "(UtilityScorer and the integrations' rerankers: the grounded answer's mean token entropy or "
        "perplexity), InfluenceScorer with method='exact', 'ablation' or 'auto', or SePerScorer. For the "
        "other metrics serve the model with vLLM (api='vllm'), SGLang (api='sglang') or llama-cpp-python's "
        "server (api='llama-cpp'), which return prompt log-probabilities"
    )


class BaseAPI:
    """The members every API class shares. A subclass sets :attr:`name` and implements :meth:`generate`, and
    :meth:`forced_steps` when it teacher-forces."""

    name: str = ""
    #: a completions API generates and teacher-forces (prompt log-probabilities), and so gives given next
    #: tokens' log-probabilities (:mod:`.next_token`); a chat API only generates
    capabilities: frozenset[str] = frozenset({GENERATE, TEACHER_FORCE, NEXT_TOKEN})
    takes_messages: bool = False
    #: teacher forcing through a token grammar (llama-server's)
    grammar_forcing: bool = False

    def __init__(self, served: Served) -> None:
        self.served = served
        self.http = served.http

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        """Refuse the target's settings that do not apply to this API (before any request)."""
        if settings.grammar_forcing:
            raise ValueError(f"grammar_forcing applies to api='llama-server' only; this target's api is {cls.name!r}")

    @property
    def grounded_only(self) -> bool:
        return TEACHER_FORCE not in self.capabilities

    @property
    def generate_url(self) -> str:
        return self.served.base_url + "/completions"

    def why_grounded_only(self) -> str:
        return CHAT_WHY

    async def start(self) -> list[str]:
        return []

    async def forced_steps(self, prompts: list[list[int]], conts: list[list[int]]) -> list[list[Step]]:
        raise ServerCapabilityError(no_teacher_forcing(f"api={self.name!r}", self.why_grounded_only(), "token_stats"))

    async def next_token_rows(self, prompts: list[list[int]], cols: list[int]) -> list[list[float]] | None:
        return None

    def refusal(self, status: int, text: str, url: str) -> Exception | None:
        return None

    # ------------------------------------------------------------------ reading answers
    def where(self) -> str:
        return f"the LLM server at {self.served.base_url}"

    def entropy(self, top: list[float]) -> float:
        return topk_entropy(top, self.served.vocab_size or 0, self.served.tail)

    def no_logprobs(self) -> ServerCapabilityError:
        k = self.served.top_logprobs
        return ServerCapabilityError(
            f"{self.where()} returned no top log-probabilities; grogu needs "
            f"top_logprobs={k} (vLLM: --max-logprobs; llama-cpp-python: logits_all on)"
        )

    def check_top(self, top: Any) -> list[float]:
        """The k largest log-probabilities of a top-k entry (a list, or a dict by token)."""
        if not top:
            raise self.no_logprobs()
        values = [
            float(v["logprob"]) if isinstance(v, dict) else float(v)
            for v in (top.values() if isinstance(top, dict) else top)
        ]
        # the k largest: vLLM adds the sampled or forced token to its top k when it ranks below (k + 1 entries)
        return sorted(values, reverse=True)[: self.served.top_logprobs]

    def statistics(self, ids: list[int], steps: list[Step]) -> TokenStats:
        """The tokens ``ids`` with each step's top-k entropy and log-probability."""
        import torch

        ent = torch.tensor([self.entropy(s.top) for s in steps], dtype=torch.float32)
        lp = torch.tensor([s.logprob for s in steps], dtype=torch.float32)
        return TokenStats(ids, ent, lp)

    def generation(self, ids: list[int], steps: list[Step], finish: str | None) -> Generation:
        """The answer ``ids`` with each step's entropy and log-probability; ``finish`` "stop" when it ended
        with an end-of-turn token (not returned: its statistics only when needed)."""
        st = self.statistics(ids, steps)
        text = self.served.tokenizer.decode(list(ids), skip_special_tokens=True).strip()
        gen = Generation(ids, st.entropy, st.logprob, text=text)
        if finish == "stop":
            gen.stop_token_id = self.served.end_of_turn
            gen.stop_entropy = gen.stop_logprob = None
        return gen

    def stopped_generation(self, ids: list[int], steps: list[Step], on_stop: bool) -> Generation:
        """Generated ids ended at their first stop token (greedy decoding is causal, so the cut is exact),
        or at the last token when the server says it stopped on an end-of-generation token (``on_stop``)."""
        cut = next((i for i, t in enumerate(ids) if t in self.served.stop_token_ids), None)
        if cut is None and on_stop and ids:
            cut = len(ids) - 1
        if cut is None:
            return self.generation(ids, steps, "length")
        gen = self.generation(ids[:cut], steps[:cut], None)
        gen.stop_token_id = ids[cut]
        gen.stop_entropy, gen.stop_logprob = self.entropy(steps[cut].top), steps[cut].logprob
        return gen


__all__ = ["Settings", "Served", "BaseAPI", "CHAT_WHY", "UNIFORM_NEEDS_VOCAB", "no_teacher_forcing"]
