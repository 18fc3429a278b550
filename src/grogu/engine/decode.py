"""The decode loop: from a prefilled batch (:class:`~grogu.engine.prefill.PrefilledBatch`) to one
answer per row, greedy with optional prompt-lookup drafts (:mod:`grogu.engine.drafting`), or sampled
(:class:`Sampling`); each answer token's entropy and log-probability are read from the decode steps
themselves."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from .drafting import PromptLookup
from .prefill import PrefilledBatch
from .prefixtree import common_prefix
from .stats import entropy_logprob
from .types import Generation


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding of a batch: ``temperature`` and one CPU generator per row, so that a row's
    samples do not depend on the other rows of the batch."""

    temperature: float
    generators: list[torch.Generator]  # one per row of the batch


def row_generators(
    prompts: Sequence[Sequence[int]], seed: int, numbers: Sequence[int] | None = None
) -> list[torch.Generator]:
    """One CPU generator per prompt (for :class:`Sampling`), seeded from (seed, the prompt's tokens, how
    many identical prompts come before it, or ``numbers[i]`` when given): each prompt's samples are
    reproducible whatever else is in the call, and whatever batches the call is split into."""
    if numbers is not None and len(numbers) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(numbers)} sample numbers")
    seen: dict[tuple[int, ...], int] = {}
    out = []
    for i, p in enumerate(prompts):
        key = tuple(p)
        nth = seen.get(key, 0) if numbers is None else int(numbers[i])
        seen[key] = nth + 1
        digest = hashlib.blake2b(repr((int(seed), key, nth)).encode(), digest_size=8).digest()
        out.append(torch.Generator(device="cpu").manual_seed(int.from_bytes(digest, "little") & (2**63 - 1)))
    return out


class Decoder:
    """Decodes prefilled batches with ``model`` (see the module docstring). Runs ``model`` as it is:
    the caller provides the context (kernels).

    Args:
        model: the causal LM.
        pad_token_id: the token fed in padding slots of a decode step (masked).
        stop_token_ids: tokens that end an answer (not part of it; their statistics are kept apart).
        detokenize: token ids to an answer's text (:attr:`Generation.text`).

    Attributes:
        steps: decode forward passes run so far (diagnostics; may be reset).
        drafted: drafted tokens fed so far (diagnostics; may be reset).
    """

    def __init__(
        self, model: Any, *, pad_token_id: int, stop_token_ids: Sequence[int], detokenize: Callable[[list[int]], str]
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.stop_token_ids = frozenset(stop_token_ids)
        self.detokenize = detokenize
        self.steps = self.drafted = 0

    @torch.inference_mode()
    def decode(
        self,
        start: PrefilledBatch,
        histories: list[list[int]],
        max_new_tokens: int,
        *,
        sampling: Sampling | None = None,
        drafter: PromptLookup | None = None,
        entropy_chunk_rows: int = 64,
    ) -> list[Generation]:
        """Decode a batch from ``start`` (whose cache must have room for ``max_new_tokens`` plus
        ``drafter.max_draft`` positions; its tensors are consumed): ``histories[i]`` is row i's prompt,
        where ``drafter`` looks for drafts. Greedy (``sampling`` None) with a drafter, each step feeds
        every row its pending token plus up to ``drafter.max_draft`` drafted tokens, keeps the drafted
        tokens the model itself would have chosen (so the answer is exactly the greedy one) and masks
        the cache slots of rejected drafts out. Entropies and log-probabilities (float32, chunks of
        ``entropy_chunk_rows`` rows) are read at the positions that produced each kept token. Rows
        leave the batch when they finish."""
        n = len(histories)
        logits, cache, attention, last_pos = start.logits, start.cache, start.attention, start.last_pos
        rows = torch.arange(n, device=self.device)  # [active]: the batch row of each active row
        state = _Answers(histories)
        drafts: list[list[int]] = [[] for _ in range(n)]  # the drafted tokens fed with each active row
        fed_step = False  # False for the prefill's logits, True after a decode forward
        while True:
            # logits: [active, 1 + D, vocab]; position j scores the token after (pending, draft[:j])
            active = rows.tolist()
            choice = self._choose(logits, sampling, active)
            accepted = [common_prefix(c, d) for c, d in zip(choice, drafts)]  # drafted tokens the model chose
            keep, pending = self._keep(state, logits, choice, accepted, active, max_new_tokens, entropy_chunk_rows)
            if drafts and max(map(len, drafts)):
                # cache slots of the rejected drafts (and of draft padding) never count again
                width = 1 + max(map(len, drafts))
                valid = (
                    torch.arange(width, device=self.device)[None] <= torch.tensor(accepted, device=self.device)[:, None]
                )
                attention[:, -width:] = valid.to(attention.dtype)
            if fed_step:  # the pending token and the accepted drafts are now in the cache
                last_pos = last_pos + torch.tensor([a + 1 for a in accepted], device=last_pos.device)
            if not any(keep):
                break
            if not all(keep):
                idx = torch.tensor([j for j, k in enumerate(keep) if k], device=self.device)
                cache.batch_select_indices(idx)
                attention, last_pos, rows = attention[idx], last_pos[idx], rows[idx]
                pending = [t for t, k in zip(pending, keep) if k]
            drafts = [
                drafter.propose(state.history[r], max_new_tokens - len(state.tokens[r]) - 1)
                if drafter is not None
                else []
                for r in rows.tolist()
            ]
            logits, attention = self._feed(pending, drafts, cache, attention, last_pos)
            fed_step = True
        return state.generations(self.detokenize)

    @staticmethod
    def _choose(logits: torch.Tensor, sampling: Sampling | None, active: list[int]) -> list:
        """Per active row, the token chosen at each fed position (greedy), or one sample at the first."""
        if sampling is None:
            return logits.argmax(-1).tolist()
        probs = torch.softmax(logits[:, 0].float() / sampling.temperature, dim=-1).cpu()  # [active, vocab]
        return [torch.multinomial(probs[j], 1, generator=sampling.generators[r]).tolist() for j, r in enumerate(active)]

    def _keep(
        self,
        state: "_Answers",
        logits: torch.Tensor,
        choice: list,
        accepted: list[int],
        active: list[int],
        max_new_tokens: int,
        chunk_rows: int,
    ) -> tuple[list[bool], list[int]]:
        """Append each row's kept tokens with their statistics (read only at the kept positions); returns
        which rows go on and each row's pending token (its last chosen one)."""
        pick_row = torch.tensor([j for j, a in enumerate(accepted) for _ in range(a + 1)], device=self.device)
        pick_pos = torch.tensor([p for a in accepted for p in range(a + 1)], device=self.device)
        picked = torch.tensor(
            [choice[j][p] for j, a in enumerate(accepted) for p in range(a + 1)], device=self.device
        )  # [kept]
        entropy, logp = entropy_logprob(logits[pick_row, pick_pos], chunk_rows)  # [kept], [kept, vocab]
        tok_lp = logp.gather(1, picked[:, None])[:, 0].tolist()
        entropy = entropy.tolist()
        keep, pending, cursor = [], [], 0
        for j, (r, a) in enumerate(zip(active, accepted)):
            alive = True
            for p in range(a + 1):
                if alive:
                    alive = state.add(
                        r, choice[j][p], entropy[cursor + p], tok_lp[cursor + p], self.stop_token_ids, max_new_tokens
                    )
            cursor += a + 1
            keep.append(alive)
            pending.append(choice[j][a])
        return keep, pending

    def _feed(
        self, pending: list[int], drafts: list[list[int]], cache, attention: torch.Tensor, last_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode forward: every row's pending token and its draft, padded to the widest; returns the
        logits [active, 1 + D, vocab] and the attention mask grown by the fed slots [active, width + 1 + D]."""
        width = 1 + max(map(len, drafts))
        ids = torch.full((len(pending), width), self.pad_token_id, dtype=torch.long)  # [active, 1 + D]
        fed = torch.zeros((len(pending), width), dtype=torch.long)  # [active, 1 + D]
        for j, (t, d) in enumerate(zip(pending, drafts)):
            ids[j, : 1 + len(d)] = torch.tensor([t, *d], dtype=torch.long)
            fed[j, : 1 + len(d)] = 1
        ids, fed = ids.to(self.device), fed.to(self.device)
        attention = torch.cat([attention, fed], dim=1)
        positions = last_pos[:, None] + 1 + torch.arange(width, device=self.device)[None]  # [active, 1 + D]
        out = self.model(
            input_ids=ids, attention_mask=attention, position_ids=positions, past_key_values=cache, use_cache=True
        )
        self.steps += 1
        self.drafted += sum(map(len, drafts))
        return out.logits, attention


class _Answers:
    """The answers of a decoding batch so far: per row its tokens, their entropies and log-probabilities,
    the stop token with its statistics, and the prompt plus answer (for prompt-lookup drafts)."""

    def __init__(self, seqs: list[list[int]]) -> None:
        n = len(seqs)
        self.history = [list(s) for s in seqs]
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.ents: list[list[float]] = [[] for _ in range(n)]
        self.lps: list[list[float]] = [[] for _ in range(n)]
        self.stops: list[tuple[int, float, float] | None] = [None] * n

    def add(self, r: int, token: int, entropy: float, logprob: float, stop_set, max_new_tokens: int) -> bool:
        """Row r's next token; False once the row is done (a stop token, or max_new_tokens reached)."""
        if token in stop_set:
            self.stops[r] = (token, entropy, logprob)
            return False
        self.tokens[r].append(token)
        self.history[r].append(token)
        self.ents[r].append(entropy)
        self.lps[r].append(logprob)
        return len(self.tokens[r]) < max_new_tokens

    def generations(self, detokenize: Callable[[list[int]], str]) -> list[Generation]:
        out = []
        for tokens, ents, lps, stop in zip(self.tokens, self.ents, self.lps, self.stops):
            stop_info = stop or (None, None, None)
            out.append(
                Generation(
                    token_ids=tokens,
                    entropy=torch.tensor(ents, dtype=torch.float32),
                    logprob=torch.tensor(lps, dtype=torch.float32),
                    stop_token_id=stop_info[0],
                    stop_entropy=stop_info[1],
                    stop_logprob=stop_info[2],
                    text=detokenize(tokens),
                )
            )
        return out
