"""Does GroguRerank help the LLM answer? Retriever top-3 vs GroguRerank top-3 on SQuAD, with SmolLM2.

Protocol (issue 3): index every SQuAD v1.1 dev paragraph (2,067) with the packaged all-MiniLM-L6-v2;
for N questions (the first question of N paragraphs drawn with a fixed seed) retrieve the top-5 from
the whole set, then answer with the packaged SmolLM2-135M-Instruct through LlamaIndex's response
synthesizer from (a) the retriever's top-3 and (b) GroguRerank(top_n=3)'s choice among the top-5.
A question counts as answered when a gold answer string (SQuAD normalisation: lower case, no
punctuation or articles) occurs in the output. Also reported: how often the gold paragraph is among the
3 nodes given to the LLM, and the latency GroguRerank adds per query (its postprocess call).

    python benchmarks/llamaindex_rerank_accuracy.py --questions 100 --out /tmp/grogu_li_bench.jsonl

Per-question rows go to --out (JSONL; a rerun resumes from it); the summary is printed as JSON.
The document embeddings are cached in --cache-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import string
import sys
import time
import warnings

import torch


def normalize(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answered(output: str, golds: list[str]) -> bool:
    out = normalize(output)
    return any(normalize(g) and normalize(g) in out for g in golds)


def build_index(paragraphs: list[dict], embed_model, cache_dir: str):
    """VectorStoreIndex over all paragraphs; embeddings computed once and cached."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=p["text"], id_=f"squad-{i}", metadata={"title": p["title"]},
                      excluded_embed_metadata_keys=["title"]) for i, p in enumerate(paragraphs)]
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"squad_dev_{len(nodes)}_minilm.pt")
    if os.path.exists(path):
        vectors = torch.load(path)
    else:
        start = time.perf_counter()
        vectors = torch.tensor(embed_model.get_text_embedding_batch(
            [n.get_content(metadata_mode="embed") for n in nodes], show_progress=False))
        torch.save(vectors, path)
        print(f"embedded {len(nodes)} paragraphs in {time.perf_counter() - start:.0f}s", file=sys.stderr)
    for n, v in zip(nodes, vectors.tolist()):
        n.embedding = v
    return VectorStoreIndex(nodes, embed_model=embed_model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--top-n", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48, help="answer length for both arms")
    parser.add_argument("--score-tokens", type=int, default=64, help="GroguRerank's grounded answer budget")
    parser.add_argument("--metric", default="key_entropy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default="llamaindex_rerank_accuracy.jsonl", help="per-question JSONL (resumable)")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")

    import grogu
    from grogu.models import embedded_embedder_path
    from grogu.testing import squad_paragraphs
    from llama_index.core import get_response_synthesizer
    from llama_index.core.schema import NodeWithScore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import GroguRerank

    paragraphs = squad_paragraphs()
    embed_model = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    retriever = build_index(paragraphs, embed_model, args.cache_dir).as_retriever(similarity_top_k=args.top_k)

    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    llm = HuggingFaceLLM(model=model, tokenizer=tokenizer, model_name=grogu.DEFAULT_MODEL, context_window=8192,
                         max_new_tokens=args.max_new_tokens, is_chat_model=True,
                         generate_kwargs={"do_sample": False},
                         stopping_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")])
    synthesizer = get_response_synthesizer(llm=llm, response_mode="compact")
    rerank = GroguRerank(top_n=args.top_n, model=llm, metric=args.metric, max_new_tokens=args.score_tokens)

    picked = random.Random(args.seed).sample(range(len(paragraphs)), args.questions)
    done = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            done = {row["paragraph"]: row for row in map(json.loads, f)}
    rows = []
    for n_done, i in enumerate(picked, 1):
        if i in done:
            rows.append(done[i])
            continue
        p = paragraphs[i]
        query, gold_id = p["question"], f"squad-{i}"
        retrieved = retriever.retrieve(query)
        baseline_nodes = [NodeWithScore(node=n.node, score=n.score) for n in retrieved[:args.top_n]]

        t0 = time.perf_counter()
        reranked = rerank.postprocess_nodes([NodeWithScore(node=n.node, score=n.score) for n in retrieved],
                                            query_str=query)
        rerank_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        baseline = str(synthesizer.synthesize(query, baseline_nodes))
        answer_s = time.perf_counter() - t0
        same_order = [n.node.node_id for n in reranked] == [n.node.node_id for n in baseline_nodes]
        grogu_answer = baseline if same_order else str(synthesizer.synthesize(query, reranked))  # greedy: identical

        row = {
            "paragraph": i, "question": query, "answers": p["answers"],
            "gold_in_top_k": any(n.node.node_id == gold_id for n in retrieved),
            "baseline": {"answer": baseline, "correct": answered(baseline, p["answers"]),
                         "gold_given": any(n.node.node_id == gold_id for n in baseline_nodes),
                         "nodes": [n.node.node_id for n in baseline_nodes]},
            "grogu": {"answer": grogu_answer, "correct": answered(grogu_answer, p["answers"]),
                      "gold_given": any(n.node.node_id == gold_id for n in reranked),
                      "nodes": [n.node.node_id for n in reranked],
                      "utilities": [n.score for n in reranked]},
            "rerank_s": rerank_s, "answer_s": answer_s,
        }
        rows.append(row)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        if n_done % 10 == 0:
            acc_b = sum(r["baseline"]["correct"] for r in rows) / len(rows)
            acc_g = sum(r["grogu"]["correct"] for r in rows) / len(rows)
            print(f"{n_done}/{len(picked)}: baseline {acc_b:.3f}  grogu {acc_g:.3f}  "
                  f"rerank {statistics.mean(r['rerank_s'] for r in rows):.2f}s/query", file=sys.stderr, flush=True)

    n = len(rows)
    rerank_times = sorted(r["rerank_s"] for r in rows)
    both = sum(r["baseline"]["correct"] and r["grogu"]["correct"] for r in rows)
    summary = {
        "questions": n, "model": grogu.DEFAULT_MODEL, "metric": args.metric, "top_k": args.top_k,
        "top_n": args.top_n, "answer_tokens": args.max_new_tokens, "score_tokens": args.score_tokens,
        "torch_threads": torch.get_num_threads(),
        "accuracy": {"retriever_top_n": sum(r["baseline"]["correct"] for r in rows) / n,
                     "grogu_top_n": sum(r["grogu"]["correct"] for r in rows) / n},
        "wins_losses": {"grogu_only": sum(r["grogu"]["correct"] and not r["baseline"]["correct"] for r in rows),
                        "retriever_only": sum(r["baseline"]["correct"] and not r["grogu"]["correct"] for r in rows),
                        "both": both},
        "gold_paragraph_given": {"retriever_top_n": sum(r["baseline"]["gold_given"] for r in rows) / n,
                                 "grogu_top_n": sum(r["grogu"]["gold_given"] for r in rows) / n,
                                 "in_top_k": sum(r["gold_in_top_k"] for r in rows) / n},
        "gold_paragraph_first": {arm: sum(r[arm]["nodes"][:1] == [f"squad-{r['paragraph']}"] for r in rows) / n
                                 for arm in ("baseline", "grogu")},
        "same_nodes_and_order": sum(r["baseline"]["nodes"] == r["grogu"]["nodes"] for r in rows) / n,
        "extra_latency_s_per_query": {"mean": statistics.mean(rerank_times), "median": statistics.median(rerank_times),
                                      "p90": rerank_times[int(0.9 * (n - 1))]},
        "answer_latency_s_per_query": statistics.mean(r["answer_s"] for r in rows),
        "device": "cpu",
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
