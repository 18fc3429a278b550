"""The CUDA default dtype's code path on the CPU: the rerank pipeline in bfloat16 finishes, decodes no more
steps than its answers need, and reaches the float32 verdicts; and the dtype a model spec loads in."""

from __future__ import annotations

import copy

import torch
from grogu_research.testing import squad_paragraphs, tiny_model, with_shared_data

from grogu import Engine, UtilityScorer
from grogu.runtime.models import default_dtype

MAX_NEW = 12


def _queries(n: int = 6) -> list[tuple[str, list[str]]]:
    """n fixed SQuAD questions, each with 5 real paragraphs (its own first) cut to 60 words."""
    paras = with_shared_data(squad_paragraphs, n + 5, 21)
    cut = [" ".join(p["text"].split()[:60]) for p in paras]
    return [(paras[i]["question"], [cut[i], *cut[i + 1 : i + 5]]) for i in range(n)]


def _rerank_all(scorer: UtilityScorer, queries) -> list[tuple]:
    out = []
    for query, docs in queries:
        before = scorer.target.lookup_steps
        kept = scorer.rerank(query, docs, top_n=3)
        gate = kept[0].gate
        out.append(
            (
                [d.index for d in kept],
                gate.in_doubt,
                scorer.target.lookup_steps - before,
            )
        )
    return out


def test_rerank_default_path_in_bfloat16_finishes_with_the_float32_verdicts(tokenizer):
    """The default mode (context, gate 'doubt') on a bf16 copy of a model against its float32 original,
    GPU batch sizes, the same questions: each query ends within the steps its answers can take, keeps
    three documents, and the gate's verdict agrees. The kept documents may differ: the candidates'
    scores are close, and bf16 rounding moves them (on the real SmolLM2, 6 questions, the verdicts agreed
    6 / 6 and the kept sets 3 / 6: bf16 changed the chosen answer on 2 and reordered two candidates with
    the same answer on 1; ``benchmarks/bf16_verdicts.py``)."""
    queries = with_shared_data(_queries)
    f32 = tiny_model("llama", seed=4)
    b16 = copy.deepcopy(f32).to(torch.bfloat16)
    runs = []
    for model in (f32, b16):
        engine = Engine(model, tokenizer, device="cpu", max_batch_size=64)
        runs.append(_rerank_all(UtilityScorer(engine, max_new_tokens=MAX_NEW), queries))
    (ref, got) = runs
    assert [doubt for _, doubt, _ in got] == [doubt for _, doubt, _ in ref]
    assert all(len(set(kept)) == 3 for kept, _, _ in got)
    # one decode batch per answer call (the first context, then the candidates in doubt), MAX_NEW steps each
    assert all(0 < steps <= 2 * MAX_NEW for *_, steps in got)


def test_gguf_models_load_in_float32_by_default():
    """A GGUF file's weights are computed in float32 by transformers, so float32 is its default dtype on a
    GPU too (bf16 cast every matmul: the plain query took twice as long on an H200); other models keep bf16
    on CUDA, and everything is float32 on a CPU."""
    assert default_dtype(torch.device("cuda"), gguf=True) == torch.float32
    assert default_dtype(torch.device("cpu")) == torch.float32
    assert default_dtype(torch.device("cpu"), gguf=True) == torch.float32
