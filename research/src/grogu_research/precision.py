"""How far a bfloat16 run of a model may land from its float32 run, measured by Monte Carlo arithmetic.

Tests compare a bf16 path (the engine, or transformers' own loop) with the float32 forward pass of the
same tokens through the same weights (bf16 weights are exact in float32). The bound comes from two facts:

- **bf16's precision.** bf16 keeps an 8-bit significand. Rounding a value to it moves it by a relative
  error of at most u = 2**-8. A bf16 forward pass rounds each tensor a module writes: projections, norms,
  activations, attention outputs, the residual stream after each layer, the logits.
- **The model's depth and conditioning.** Each rounding is carried through every later layer, grown or
  shrunk by that layer's sensitivity. A hand-made worst case over a 2-layer random model exceeds 1 nat:
  useless as a test bound. So the carrying is measured, not guessed.

Monte Carlo arithmetic (Parker, 1997; the method of Verificarlo) measures it. Run the float32 model
``samples`` times. In each run, multiply every module's output by ``1 + u * U(-1, 1)``, drawn per element:
one rounding per write, of random sign and size. The spread of a statistic across runs (its standard
deviation ``sd``) is the noise bf16's roundings put on it through this model's depth.

- U(-u, u) has a standard deviation of 0.577 u. Real round-to-nearest into bf16 has 0.425 u (measured on
  values spread over many binades). So each modelled rounding is 1.36x too strong: conservative.
- A few roundings sit inside modules and are not modelled: the first residual add of a layer, rotary
  embeddings, attention's bf16 probabilities. A module whose output is its last child's output is
  perturbed twice. The measurements below show the net is conservative.
- The error of a statistic is a sum of many small rounding errors, so it is close to normal. A test allows
  ``K_SIGMA = 8`` sds. With ``sd`` estimated from 32 runs, |error| / sd follows Student's t with 31
  degrees of freedom; P(|t| > 8) is about 5e-9 a value, so 1,000 compared values give a false failure
  about once in 200,000 runs. Measured on 5 tiny architectures (llama with 64 and 49,152 tokens, qwen2,
  gpt2, gemma3; 40-token answers, with and without drafts), the engine's and transformers' bf16 errors
  reach 4.3 sd at most, under ATen's default, AVX2 and AVX-512 kernels, with and without oneDNN's AMX.
- A real bug falls far outside. A prompt missing its first token moves the statistics by 19 to 600 sd
  on llama, qwen2 and gpt2 (the tiny gemma3's answers hardly depend on that token: 0.5 to 3.5 sd).
  Decode positions off by one, or attention to padding, fail the engine's bf16 test.

Values whose ``sd`` is tiny (a token the model is sure of) still get ``FLOOR``, the float32 tests' own
tolerance, because the statistics are computed in float32 from the logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

#: bf16's unit roundoff: an 8-bit significand, round to nearest.
BF16_UNIT_ROUNDOFF = 2.0**-8
#: how many Monte Carlo standard deviations a bf16 value may be from its float32 reference.
K_SIGMA = 8.0
#: the smallest allowed difference (the float32 tests' tolerance).
FLOOR = 1e-4


@dataclass
class Bf16Reference:
    """Float32 statistics of a continuation and their bf16 noise: one value per continuation token.

    ``gap_sd`` is the noise on the log-probability gap between the two best tokens at each step: greedy
    decoding in bf16 may pick another token than float32 only where that gap is within the noise."""

    entropy: torch.Tensor
    logprob: torch.Tensor
    entropy_sd: torch.Tensor
    logprob_sd: torch.Tensor
    gap_sd: torch.Tensor

    def bound(self, sd: torch.Tensor, k: float = K_SIGMA) -> torch.Tensor:
        return torch.clamp(k * sd, min=FLOOR)

    def excess(self, entropy: torch.Tensor, logprob: torch.Tensor) -> float:
        """The largest |value - reference| / allowed bound over both statistics (<= 1 passes)."""
        n = len(self.entropy)
        e = (entropy[:n].float() - self.entropy).abs() / self.bound(self.entropy_sd)
        lp = (logprob[:n].float() - self.logprob).abs() / self.bound(self.logprob_sd)
        return float(torch.cat([e, lp]).max()) if n else 0.0

    def assert_close(self, entropy: torch.Tensor, logprob: torch.Tensor, what: str = "bf16") -> None:
        """Each value within K_SIGMA Monte Carlo sds (at least FLOOR) of the float32 reference."""
        for name, got, want, sd in (
            ("entropy", entropy, self.entropy, self.entropy_sd),
            ("logprob", logprob, self.logprob, self.logprob_sd),
        ):
            assert got.shape == want.shape, f"{what} {name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
            diff = (got.float() - want).abs()
            bound = self.bound(sd)
            bad = (diff > bound).nonzero().flatten().tolist()
            assert not bad, (
                f"{what} {name} outside bf16's noise at tokens {bad}: |diff| {diff[bad].tolist()} > "
                f"{K_SIGMA} sd = {bound[bad].tolist()}"
            )

    def head(self, n: int) -> "Bf16Reference":
        """The first ``n`` tokens' reference (an answer without its stop token)."""
        return Bf16Reference(*(getattr(self, f)[:n] for f in self.__dataclass_fields__))

    def assert_same_greedy(
        self, model32: Any, prompt: Sequence[int], got: Sequence[int], want: Sequence[int], what: str = "bf16"
    ) -> None:
        """``got`` (this reference's tokens) and ``want`` are the same greedy answer, or part where a
        float32 near-tie lets bf16 pick either token: their log-probabilities there are within bf16's
        noise of each other. After that step the two answers continue from different prefixes."""
        s = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if s is None:
            assert len(got) == len(want), f"{what}: one answer stops early: {list(got)} vs {list(want)}"
            return
        with torch.inference_mode():
            dev = next(model32.parameters()).device
            ids = torch.tensor([list(prompt) + list(got[:s])], device=dev)
            logp = torch.log_softmax(model32(input_ids=ids, logits_to_keep=1).logits[0, -1].float(), -1)
        gap = float((logp[got[s]] - logp[want[s]]).abs())
        bound = float(self.bound(self.gap_sd[s]))
        assert gap <= bound, (
            f"{what}: the answers part at token {s} ({got[s]} vs {want[s]}), and float32 puts them "
            f"{gap:.4f} apart in log-probability, more than bf16's noise there ({bound:.4f})"
        )


def _stats(logits: torch.Tensor, continuation: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Entropy, log-probability of the continuation and the top-2 gap, from [..., T, V] logits."""
    logp = torch.log_softmax(logits.float(), -1)
    ent = -torch.special.xlogy(logp.exp(), logp.exp()).sum(-1)
    lp = logp.gather(-1, continuation.expand(*logp.shape[:-1])[..., None])[..., 0]
    top2 = logp.topk(2, dim=-1).values
    return ent, lp, top2[..., 0] - top2[..., 1]


def _perturb_hook(gen: torch.Generator):
    def perturb(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            scale = torch.rand(t.shape, generator=gen, dtype=t.dtype).to(t.device)  # 1 + u * U(-1, 1)
            return t * scale.mul_(2 * BF16_UNIT_ROUNDOFF).add_(1 - BF16_UNIT_ROUNDOFF)
        return t

    def hook(module: Any, args: Any, out: Any) -> Any:
        if isinstance(out, torch.Tensor):
            return perturb(out)
        if isinstance(out, tuple):
            return tuple(perturb(t) for t in out)
        return out

    return hook


@torch.inference_mode()
def bf16_reference(
    model32: Any, prompt: Sequence[int], continuation: Sequence[int], samples: int = 32, seed: int = 0
) -> Bf16Reference:
    """The float32 statistics of ``continuation`` after ``prompt`` and their bf16 noise (module docstring).

    ``model32`` is a float32 model whose weights are bf16 values (``copy.deepcopy(bf16_model).float()``),
    so the reference and the bf16 run share their weights exactly."""
    if not continuation:
        raise ValueError("an empty continuation has no statistics")
    if next(model32.parameters()).dtype != torch.float32:
        raise ValueError("bf16_reference needs the float32 copy of the model")
    dev = next(model32.parameters()).device
    n = len(continuation)
    ids = torch.tensor([list(prompt) + list(continuation)], device=dev)
    cont = torch.tensor(list(continuation), device=dev)
    keep = n + 1  # the logits that predict the continuation (and one after it, dropped)
    entropy, logprob, _ = _stats(model32(input_ids=ids, logits_to_keep=keep).logits[0, :n], cont)
    gen = torch.Generator().manual_seed(seed)
    hooks = [
        m.register_forward_hook(_perturb_hook(gen))
        for m in model32.modules()
        if m is not model32 and not isinstance(m, torch.nn.Embedding)  # a lookup of bf16 weights is exact
    ]
    runs: list[tuple[torch.Tensor, ...]] = []
    try:
        for start in range(0, samples, 8):  # 8 noisy copies a forward pass: each row draws its own noise
            rows = min(8, samples - start)
            logits = model32(input_ids=ids.expand(rows, -1), logits_to_keep=keep).logits[:, :n]
            runs.append(_stats(logits, cont))
    finally:
        for h in hooks:
            h.remove()
    sd = [torch.cat([r[i] for r in runs]).std(0) for i in range(3)]
    return Bf16Reference(entropy.cpu(), logprob.cpu(), *(t.cpu() for t in sd))
