"""The clients' rerank API (``/v2/rerank``) against grogu's own ``/rerank`` and the in-process rerank.

30 fixed held-out SQuAD questions (``--seed 0``), each with the 5 paragraphs the embedded MiniLM
retrieves from the pool; the embedded SmolLM2 reranks them to 3 (the default selective mode) in
process, through ``POST /rerank`` and through ``POST /v2/rerank`` of one local ``grogu serve``
(one replica). It reports how many questions reach the same kept documents, in the same order, with
the same gate verdict, and the time of ``/v2/rerank`` against ``/rerank`` (the two alternate which goes
first). Per-question records: ``--out``; the summary is printed and written next to them.

  OMP_NUM_THREADS=1 python benchmarks/compat_routes.py --out benchmarks/results/compat_routes.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_accuracy import build_index, squad_questions  # noqa: E402
from record_meta import meta, write_sidecar  # noqa: E402

TOP_N, TOP_K = 3, 5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/compat_routes.jsonl")
    p.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
    args = p.parse_args()
    warnings.filterwarnings("ignore")

    import httpx
    import torch
    from grogu_research import testing
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    import grogu
    from grogu.apps.serve.config import ServeConfig
    from grogu.runtime.models import DEFAULT_MODEL, embedded_embedder_path

    torch.set_num_threads(1)
    pool, questions = squad_questions("held", args.questions, args.seed)
    embed = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    retriever = build_index(pool, embed, args.cache_dir, "squad").as_retriever(similarity_top_k=TOP_K)
    local = grogu.UtilityScorer(DEFAULT_MODEL, device="cpu")
    records = []
    config = ServeConfig(model=DEFAULT_MODEL, device="cpu")
    with testing.local_service(config) as url, httpx.Client(base_url=url, timeout=600) as http:
        name = http.get("/info").json()["model"]

        def timed(path: str, body: dict) -> tuple[dict, float]:
            start = time.perf_counter()
            r = http.post(path, json=body)
            elapsed = time.perf_counter() - start
            r.raise_for_status()
            return r.json(), elapsed

        own_body = {"query": questions[0]["question"], "documents": ["warm-up"], "top_n": 1}
        timed("/rerank", own_body), timed("/v2/rerank", {**own_body, "model": name})  # the scorer is built
        for i, q in enumerate(questions):
            docs = [n.node.get_content() for n in retriever.retrieve(q["question"])]
            want = local.rerank(q["question"], docs, top_n=TOP_N)
            own_body = {"query": q["question"], "documents": docs, "top_n": TOP_N}
            compat_body = {"model": name, **own_body}
            if i % 2 == 0:
                own, own_s = timed("/rerank", own_body)
                compat, compat_s = timed("/v2/rerank", compat_body)
            else:
                compat, compat_s = timed("/v2/rerank", compat_body)
                own, own_s = timed("/rerank", own_body)
            record = {
                "qid": q["qid"],
                "question": q["question"],
                "in_process": [r.index for r in want],
                "rerank": [r["index"] for r in own["results"]],
                "v2_rerank": [r["index"] for r in compat["results"]],
                "gate_in_process": want[0].gate.as_dict() if want and want[0].gate else None,
                "gate_rerank": own["gate"],
                "gate_v2_rerank": compat["grogu"]["gate"],
                "relevance_score": [r["relevance_score"] for r in compat["results"]],
                "utility_rerank": [r["score"] for r in own["results"]],
                "usage": compat["usage"],
                "rerank_s": own_s,
                "v2_rerank_s": compat_s,
                "first": "rerank" if i % 2 == 0 else "v2_rerank",
            }
            records.append(record)
            print(
                f"{i + 1}/{len(questions)} same={record['rerank'] == record['v2_rerank'] == record['in_process']} "
                f"/rerank {own_s:.2f} s  /v2/rerank {compat_s:.2f} s",
                flush=True,
            )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
    write_sidecar(args.out, settings)
    summary = summarize(records)
    summary["command"] = "OMP_NUM_THREADS=1 python benchmarks/compat_routes.py " + " ".join(sys.argv[1:])
    with open(os.path.splitext(args.out)[0] + "_summary.json", "w") as f:
        json.dump({**summary, "meta": meta(settings=settings)}, f, indent=1)
    print(json.dumps(summary, indent=1))


def _verdict(gate: dict | None) -> tuple | None:
    return None if gate is None else (gate["in_doubt"], tuple(gate["reasons"]), gate["candidates"], gate["changed"])


def summarize(records: list[dict]) -> dict:
    """Agreement counts and the time of /v2/rerank against /rerank (per question, and of the means)."""
    ratios = sorted(r["v2_rerank_s"] / r["rerank_s"] for r in records)
    own = [r["rerank_s"] for r in records]
    compat = [r["v2_rerank_s"] for r in records]
    return {
        "questions": len(records),
        "same_documents_all_three": sum(r["in_process"] == r["rerank"] == r["v2_rerank"] for r in records),
        "same_documents_v2_and_rerank": sum(r["rerank"] == r["v2_rerank"] for r in records),
        "same_gate_all_three": sum(
            _verdict(r["gate_in_process"]) == _verdict(r["gate_rerank"]) == _verdict(r["gate_v2_rerank"])
            for r in records
        ),
        "in_doubt": sum(bool(r["gate_rerank"] and r["gate_rerank"]["in_doubt"]) for r in records),
        "rerank_mean_s": statistics.mean(own),
        "v2_rerank_mean_s": statistics.mean(compat),
        "ratio_of_means": statistics.mean(compat) / statistics.mean(own),
        "median_ratio": statistics.median(ratios),
        "p90_ratio": ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))],
        "max_ratio": ratios[-1],
    }


if __name__ == "__main__":
    main()
