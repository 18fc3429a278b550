"""The decode loop (greedy with prompt-lookup drafts from :mod:`grogu.engine.drafting`, or sampled) and
teacher-forced token statistics."""

from __future__ import annotations


import torch

from .drafting import PromptLookup
from .kvcache import reserve
from .prefixtree import common_prefix
from .types import Generation, TokenStats


def _entropy_logprob(logits: torch.Tensor, chunk_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(entropy, log-softmax) of [n, V] logits in float32, computed chunk by chunk."""
    ents, logps = [], []
    for start in range(0, logits.shape[0], chunk_rows):
        logp = torch.log_softmax(logits[start:start + chunk_rows].float(), dim=-1)
        # p * log p with 0 * log 0 = 0: clamping -inf to the float minimum keeps the product finite
        ents.append(-(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1))
        logps.append(logp)
    return torch.cat(ents), torch.cat(logps)


class Decoding:
    """Engine part: decodes a planned batch, and teacher-forces continuations."""

    def _draft(self, history: list[int], budget: int) -> list[int]:
        """A prompt-lookup draft (:class:`~grogu.engine.drafting.PromptLookup`) under this engine's
        settings: at most ``budget`` tokens, [] when nothing matches."""
        return self._drafter().propose(history, budget)

    def _drafter(self) -> PromptLookup:
        return PromptLookup(self.prompt_lookup, self.prompt_lookup_ngram, self.prompt_lookup_min_ngram)

    @torch.inference_mode()
    def _generate_batch(self, seqs: list[list[int]], max_new_tokens: int, temperature: float | None,
                        generators: list[torch.Generator] | None) -> list[Generation]:
        """Decode a batch. Greedy decoding uses prompt-lookup drafts (answers copy from their documents):
        each step feeds every row its pending token plus up to ``prompt_lookup`` drafted tokens, keeps
        the drafted tokens the model itself would have chosen (so the answer is exactly the greedy one)
        and masks the cache slots of rejected drafts out. Entropies and log-probabilities are read at
        the positions that produced each kept token."""
        n = len(seqs)
        drafter = self._drafter()
        lookup = temperature is None and drafter.max_draft > 0 and self._stackable()  # see _unpadded
        room = max_new_tokens + (drafter.max_draft if lookup else 0)  # decode writes the cache in place
        logits, cache, attention, last_pos = self._prefill(seqs, logits_to_keep=1, room=room)
        reserve(cache, room)  # a cache not stacked from groups (those are reserved already)
        rows = torch.arange(n, device=self.device)
        state = _Answers(seqs)
        drafts: list[list[int]] = [[] for _ in range(n)]  # the drafted tokens fed with each active row
        fed_step = False  # False for the prefill's logits, True after a decode forward
        while True:
            # logits: [active, 1 + D, V]; position j scores the token after (pending, draft[:j])
            active = rows.tolist()
            choice = self._choose(logits, temperature, generators, active)
            accepted = [common_prefix(c, d) for c, d in zip(choice, drafts)]  # drafted tokens the model chose
            keep, pending = self._keep(state, logits, choice, accepted, active, max_new_tokens)
            if drafts and max(map(len, drafts)):
                # cache slots of the rejected drafts (and of draft padding) never count again
                width = 1 + max(map(len, drafts))
                valid = torch.arange(width, device=self.device)[None] <= torch.tensor(accepted, device=self.device)[:, None]
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
            drafts = [drafter.propose(state.history[r], max_new_tokens - len(state.tokens[r]) - 1) if lookup
                      else [] for r in rows.tolist()]
            logits, attention = self._feed(pending, drafts, cache, attention, last_pos)
            fed_step = True
        return state.generations(self.decode)

    def _choose(self, logits: torch.Tensor, temperature: float | None, generators, active: list[int]) -> list:
        """Per active row, the token chosen at each fed position (greedy), or one sample at the first."""
        if temperature is None:
            return logits.argmax(-1).tolist()
        probs = torch.softmax(logits[:, 0].float() / temperature, dim=-1).cpu()
        # one generator per prompt: a row's samples do not depend on the other rows of the batch
        return [torch.multinomial(probs[j], 1, generator=generators[r]).tolist() for j, r in enumerate(active)]

    def _keep(self, state: "_Answers", logits: torch.Tensor, choice: list, accepted: list[int], active: list[int],
              max_new_tokens: int) -> tuple[list[bool], list[int]]:
        """Append each row's kept tokens with their statistics (read only at the kept positions); returns
        which rows go on and each row's pending token (its last chosen one)."""
        pick_row = torch.tensor([j for j, a in enumerate(accepted) for _ in range(a + 1)], device=self.device)
        pick_pos = torch.tensor([p for a in accepted for p in range(a + 1)], device=self.device)
        picked = torch.tensor([choice[j][p] for j, a in enumerate(accepted) for p in range(a + 1)],
                              device=self.device)
        entropy, logp = _entropy_logprob(logits[pick_row, pick_pos], self.entropy_chunk_rows)
        tok_lp = logp.gather(1, picked[:, None])[:, 0].tolist()
        entropy = entropy.tolist()
        keep, pending, cursor = [], [], 0
        for j, (r, a) in enumerate(zip(active, accepted)):
            alive = True
            for p in range(a + 1):
                if alive:
                    alive = state.add(r, choice[j][p], entropy[cursor + p], tok_lp[cursor + p], self._stop_set,
                                      max_new_tokens)
            cursor += a + 1
            keep.append(alive)
            pending.append(choice[j][a])
        return keep, pending

    def _feed(self, pending: list[int], drafts: list[list[int]], cache, attention: torch.Tensor,
              last_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode forward: every row's pending token and its draft, padded to the widest; returns the
        logits and the attention mask grown by the fed slots."""
        width = 1 + max(map(len, drafts))
        ids = torch.full((len(pending), width), self.pad_token_id, dtype=torch.long)
        fed = torch.zeros((len(pending), width), dtype=torch.long)
        for j, (t, d) in enumerate(zip(pending, drafts)):
            ids[j, : 1 + len(d)] = torch.tensor([t, *d], dtype=torch.long)
            fed[j, : 1 + len(d)] = 1
        ids, fed = ids.to(self.device), fed.to(self.device)
        attention = torch.cat([attention, fed], dim=1)
        positions = last_pos[:, None] + 1 + torch.arange(width, device=self.device)[None]
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                         past_key_values=cache, use_cache=True)
        self.lookup_steps += 1
        self.lookup_drafted += sum(map(len, drafts))
        return out.logits, attention

    @torch.inference_mode()
    def _token_stats_batch(self, prompts: list[list[int]], conts: list[list[int]]) -> list[TokenStats]:
        keep = max(len(c) for c in conts)
        seqs = [p + c[:-1] for p, c in zip(prompts, conts)]
        logits = self._prefill_logits(seqs, logits_to_keep=keep, limits=[len(p) - 1 for p in prompts])
        out = []
        for i, cont in enumerate(conts):
            row_logits = logits[i][-len(cont):]
            entropy, logp = _entropy_logprob(row_logits, self.entropy_chunk_rows)
            target = torch.tensor(cont, device=logp.device)
            out.append(TokenStats(list(cont), entropy.cpu(), logp.gather(1, target[:, None])[:, 0].cpu()))
        return out


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

    def add(self, r: int, token: int, entropy: float, logprob: float, stop_set: set[int], max_new_tokens: int) -> bool:
        """Row r's next token; False once the row is done (a stop token, or max_new_tokens reached)."""
        if token in stop_set:
            self.stops[r] = (token, entropy, logprob)
            return False
        self.tokens[r].append(token)
        self.history[r].append(token)
        self.ents[r].append(entropy)
        self.lps[r].append(logprob)
        return len(self.tokens[r]) < max_new_tokens

    def generations(self, decode) -> list[Generation]:
        out = []
        for tokens, ents, lps, stop in zip(self.tokens, self.ents, self.lps, self.stops):
            stop_info = stop or (None, None, None)
            out.append(Generation(
                token_ids=tokens, entropy=torch.tensor(ents, dtype=torch.float32),
                logprob=torch.tensor(lps, dtype=torch.float32), stop_token_id=stop_info[0],
                stop_entropy=stop_info[1], stop_logprob=stop_info[2], text=decode(tokens),
            ))
        return out
