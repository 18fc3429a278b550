"""Does the selective default hold at every entry point? LangChain and the scoring service, on fresh held-out data.

``langchain``: a real LCEL chain. All paragraphs of the data set sit in an ``InMemoryVectorStore`` with the
packaged all-MiniLM-L6-v2; the top 5 are retrieved; SmolLM2-135M-Instruct answers through ``ChatHuggingFace``
(greedy, 48 tokens) from the chain's ``ChatPromptTemplate``. Three arms per question, one after the other:
  - ``plain``: the retriever's top 3 | prompt | chat model | parser;
  - ``lc_default``: ``GroguRetriever(base_retriever=<top 5>, model=<the chat model>, top_n=3)`` in the same
    chain (no ``qa_prompt``: grogu scores with ``grogu.core.prompts.RAG_QA_TEMPLATE``; the chain answers again);
  - ``lc_qa``: the README's form, ``GroguRetriever(..., qa_prompt=<the chain's prompt>).as_qa_chain()``: the
    answer is the one generated while scoring.
Each record holds each arm's answer, whole-word correctness, token F1, words, seconds, the documents given
(positions in the top 5) and the gate's verdict.

``service``: the same questions' top 5 (``NodeWithScore``) through ``GroguRerank`` in process (on the
pipeline's ``HuggingFaceLLM``) and through ``GroguRerank(model=<grogu serve URL>)`` (one local replica of 1
CPU), one after the other per question: the nodes kept, and the seconds of each.

``report``: the tables, from the records alone.

Fresh held-out samples (``--seed 3``): the tuning split is never drawn from, and every earlier held-out sample
is left out in code before the draw (:func:`earlier_ids`: the frozen samples of the accuracy benchmarks and
of the selective mode's held-out results, ``benchmarks/samples``).

The decision rule, fixed before any record of these samples was collected (the bars of the issue on one
rerank pipeline). LangChain, each form against ``plain``: accuracy at least the plain chain's on every set;
pooled gain at least +3 points with an exact two-sided sign test p < 0.05; the context changed on at most
35 % of questions; mean answer words within ±10 %. The service: the same nodes kept as in process on every
question, and on calm questions (the gate not in doubt) a ratio of mean seconds at most 1.3.

    OMP_NUM_THREADS=1 python benchmarks/entry_points.py langchain --data squad --questions 150 \\
        --out benchmarks/results/entry_langchain_squad.jsonl
    OMP_NUM_THREADS=1 python benchmarks/entry_points.py langchain --data nq --data-file nq-open-oracle.jsonl.gz ...
    OMP_NUM_THREADS=1 python benchmarks/entry_points.py langchain --data hotpotqa-dev --data-file dev_subsampled.jsonl \\
        --questions 100 ...
    OMP_NUM_THREADS=1 python benchmarks/entry_points.py service --data squad --questions 40 \\
        --out benchmarks/results/entry_service_squad.jsonl
    python benchmarks/entry_points.py report benchmarks/results/entry_*.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import held_out  # noqa: E402
import torch  # noqa: E402
from pipeline_accuracy import (  # noqa: E402
    answer_f1,
    answered_words,
    hotpotqa_dev_questions,
    judgeable,
    local_service,
    nq_questions,
    squad_questions,
)
from pipeline_modes import sign_test  # noqa: E402
from record_meta import write_sidecar  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED, EARLIER_SEED = 3, 2
EARLIER_N = {"squad": 150, "nq": 150, "hotpotqa-dev": 100}


def load(data: str, n: int, path: str | None, seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(pool, fresh held-out questions): earlier samples left out (:func:`earlier_ids`), then n drawn."""
    questions = {
        "squad": lambda k, s, ex: squad_questions("held", k, s, ex),
        "nq": lambda k, s, ex: nq_questions("held", k, s, path, ex),
        "hotpotqa-dev": lambda k, s, ex: hotpotqa_dev_questions("held", k, s, path, ex),
    }[data]
    pool, fresh = questions(n, seed, earlier_ids(data, questions))
    return pool, [q for q in fresh if judgeable(q["answers"])]


def earlier_ids(data: str, questions) -> set[str]:
    """The question ids this draw leaves out, as it did when it was first drawn: the frozen samples drawn
    before it (:mod:`held_out`), the accuracy benchmarks' (seeds 0 and 1) and the selective mode's
    (seed 2). A data set whose seed-2 sample is not frozen here (its data is not in ../shared) redraws
    it from the frozen seed-0/1 list, exactly as it was drawn."""
    first = f"{data}_accuracy_seed0_1"
    ids = set(held_out.frozen(first)) if held_out.has(first) else set()
    if held_out.has(f"{data}_selective_seed2"):
        return ids | set(held_out.frozen(f"{data}_selective_seed2"))
    _, before = questions(EARLIER_N[data], EARLIER_SEED, ids or None)
    return ids | {q["qid"] for q in before}


def vector_store(pool: list[dict], cache_dir: str, name: str):
    """An InMemoryVectorStore over the pool with MiniLM vectors (computed once, cached)."""
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_huggingface import HuggingFaceEmbeddings

    from grogu.runtime.models import embedded_embedder_path

    embeddings = HuggingFaceEmbeddings(model_name=embedded_embedder_path())
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"{name}_{len(pool)}_minilm_lc.pt")
    if os.path.exists(path):
        vectors = torch.load(path).tolist()
    else:
        vectors = embeddings.embed_documents([p["text"] for p in pool])
        torch.save(torch.tensor(vectors), path)
    store = InMemoryVectorStore(embeddings)
    store.store = {
        p["id"]: {"id": p["id"], "vector": v, "text": p["text"], "metadata": {"title": p["title"], "id": p["id"]}}
        for p, v in zip(pool, vectors)
    }
    return store


def chat_model(max_new_tokens: int):
    from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline
    from transformers import pipeline

    import grogu

    model, tokenizer = grogu.load_model("smollm2-135m-instruct", device="cpu")
    pipe = pipeline(
        "text-generation",
        model=model,
        tokenizer=tokenizer,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        return_full_text=False,
    )
    return ChatHuggingFace(llm=HuggingFacePipeline(pipeline=pipe), tokenizer=tokenizer, model_id="smollm2")


def judged(answer: str, golds: list[str]) -> dict:
    return {
        "answer": answer,
        "correct": answered_words(answer, golds),
        "f1": round(answer_f1(answer, golds), 4),
        "words": len(answer.split()),
    }


def langchain(args) -> None:
    """The three LangChain arms on each question; one JSON record a line."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_grogu import GroguRetriever

    pool, questions = load(args.data, args.questions, args.data_file)
    store = vector_store(pool, args.cache_dir, args.data)
    base = store.as_retriever(search_kwargs={"k": 5})
    chat = chat_model(args.max_new_tokens)
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer the question using the context. Reply briefly."),
            ("human", "Context:\n{context}\n\nQuestion: {question}"),
        ]
    )

    def fmt(docs):
        return "\n\n".join(d.page_content for d in docs)

    def chain(retriever):
        return {"context": retriever | fmt, "question": RunnablePassthrough()} | prompt | chat | StrOutputParser()

    default = GroguRetriever(base_retriever=base, model=chat, top_n=3)
    qa = GroguRetriever(base_retriever=base, model=chat, top_n=3, qa_prompt=prompt).as_qa_chain()
    assert default.prompt == "rag_qa"
    seen: list[list[str]] = []

    def top3(docs):
        seen.append([d.metadata["id"] for d in docs])
        return docs[:3]

    plain = chain(base | top3)
    out = open(args.out, "a")
    shard, of = map(int, args.shard.split("/"))
    for q in questions[args.skip :][shard::of]:
        rec = {"data": args.data, "qid": q["qid"], "golds": q["answers"]}
        t0 = time.perf_counter()
        rec["plain"] = judged(plain.invoke(q["question"]), q["answers"])
        rec["plain"]["seconds"] = time.perf_counter() - t0
        top5 = seen[-1]
        rec["plain"]["given"] = [0, 1, 2]
        for name, run in (("lc_default", lambda x: _default(chain, default, x)), ("lc_qa", qa.invoke)):
            t0 = time.perf_counter()
            result = run(q["question"])
            rec[name] = judged(result["answer"], q["answers"])
            rec[name]["seconds"] = time.perf_counter() - t0
            rec[name]["given"] = [top5.index(d.metadata["id"]) for d in result["documents"]]
            context = result["documents"][0].metadata["grogu"]["context"] if result["documents"] else {}
            rec[name]["gate"] = context.get("gate")
        print(json.dumps(rec), file=out, flush=True)
        print(
            q["qid"],
            {k: (rec[k]["correct"], round(rec[k]["seconds"], 1)) for k in ("plain", "lc_default", "lc_qa")},
            flush=True,
        )


def _default(chain, retriever, question: str) -> dict:
    """The chain with GroguRetriever in place of the base retriever: its answer and the documents given."""
    kept: list = []

    def keep(docs):
        kept.extend(docs)
        return docs

    answer = chain(retriever | keep).invoke(question)
    return {"answer": answer, "documents": kept}


def service(args) -> None:
    """GroguRerank in process, through a local grogu service and on a llama-cpp-python server
    (``ServerTarget``), on the same top 5 of each question, one arm after the other."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from grogu_research.testing import LlamaCppServer
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import GroguRerank

    import grogu

    pool, questions = load(args.data, args.questions, args.data_file)
    store = vector_store(pool, args.cache_dir, args.data)
    model, tokenizer = grogu.load_model("smollm2-135m-instruct", device="cpu")
    llm = HuggingFaceLLM(
        model=model,
        tokenizer=tokenizer,
        is_chat_model=True,
        max_new_tokens=args.max_new_tokens,
        generate_kwargs={"do_sample": False},
    )
    wanted = args.arms.split(",")
    with contextlib.ExitStack() as stack:
        arms = {"in_process": GroguRerank(model=llm, top_n=3)}
        if "service" in wanted:  # one local Ray, one replica of 1 CPU
            url = local_service(stack)
            arms["service"] = GroguRerank(model=url, top_n=3, max_new_tokens=args.max_new_tokens)
        if "served" in wanted:  # llama-cpp-python's server, one thread
            served = stack.enter_context(LlamaCppServer(n_ctx=4096))
            target = grogu.ServerTarget(served.url, api="llama-cpp", tokenizer="smollm2-135m-instruct")
            arms["served"] = GroguRerank(model=target, top_n=3, max_new_tokens=args.max_new_tokens)
        out = open(args.out, "a")
        for q in questions[args.skip :]:
            hits = store.similarity_search_with_score(q["question"], k=5)
            rec = {"data": args.data, "qid": q["qid"], "golds": q["answers"]}
            for name, reranker in arms.items():
                nodes = [
                    NodeWithScore(node=TextNode(text=d.page_content, id_=d.metadata["id"]), score=float(s))
                    for d, s in hits
                ]
                ids = [n.node.node_id for n in nodes]
                t0 = time.perf_counter()
                kept = reranker.postprocess_nodes(nodes, query_str=q["question"])
                seconds = time.perf_counter() - t0
                context = kept[0].node.metadata["grogu"]["context"]
                rec[name] = {
                    "given": [ids.index(n.node.node_id) for n in kept],
                    "seconds": seconds,
                    "answer": context["answer"],
                    "correct": answered_words(context["answer"], q["answers"]),
                    "gate": context.get("gate"),
                }
            print(json.dumps(rec), file=out, flush=True)
            print(q["qid"], {k: (rec[k]["given"], round(rec[k]["seconds"], 1)) for k in arms})


# ---------------------------------------------------------------------------------------------- report
def auroc(scores: list[float], positive: list[bool]) -> float | None:
    """The probability that a positive scores above a negative (ties count half); None without both."""
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    if not pos or not neg:
        return None
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def arm_table(recs: list[dict], arm: str) -> dict:
    """One arm against ``plain`` on ``recs``."""
    n = len(recs)
    wins = sum(r[arm]["correct"] and not r["plain"]["correct"] for r in recs)
    losses = sum(r["plain"]["correct"] and not r[arm]["correct"] for r in recs)
    changed = [r for r in recs if r[arm]["given"] != [0, 1, 2]]
    ratios = [r[arm]["seconds"] / r["plain"]["seconds"] for r in recs]
    words = (sum(r["plain"]["words"] for r in recs) / n, sum(r[arm]["words"] for r in recs) / n)
    return {
        "n": n,
        "plain": 100 * sum(r["plain"]["correct"] for r in recs) / n,
        "arm": 100 * sum(r[arm]["correct"] for r in recs) / n,
        "wins": wins,
        "losses": losses,
        "p": sign_test(wins, losses),
        "f1": (100 * sum(r["plain"]["f1"] for r in recs) / n, 100 * sum(r[arm]["f1"] for r in recs) / n),
        "words": words,
        "changed": 100 * len(changed) / n,
        "answer_changed": 100 * sum(r[arm]["answer"] != r["plain"]["answer"] for r in recs) / n,
        "precision": wins / (wins + losses) if wins + losses else None,
        "doubt": 100 * sum(bool(r[arm]["gate"] and r[arm]["gate"]["in_doubt"]) for r in recs) / n,
        "cost_median": percentile(ratios, 0.5),
        "cost_ratio_of_means": sum(r[arm]["seconds"] for r in recs) / sum(r["plain"]["seconds"] for r in recs),
        "cost_p90": percentile(ratios, 0.9),
    }


def doubt_table(recs: list[dict], arm: str) -> dict:
    """How well the gate's verdict on the retriever's context predicts a wrong plain answer."""
    wrong = [not r["plain"]["correct"] for r in recs]
    gates = [r[arm]["gate"] or {} for r in recs]
    calm = [r for r, g in zip(recs, gates) if not g.get("in_doubt")]
    doubtful = [r for r, g in zip(recs, gates) if g.get("in_doubt")]
    return {
        "auroc_in_doubt": auroc([float(bool(g.get("in_doubt"))) for g in gates], wrong),
        "auroc_support": auroc([-g.get("support", 0.0) for g in gates], wrong),
        "auroc_confidence": auroc([-g.get("confidence", 0.0) for g in gates], wrong),
        "plain_calm": (len(calm), 100 * sum(r["plain"]["correct"] for r in calm) / max(len(calm), 1)),
        "plain_doubt": (len(doubtful), 100 * sum(r["plain"]["correct"] for r in doubtful) / max(len(doubtful), 1)),
    }


def report(args) -> None:
    recs = [json.loads(line) for path in args.records for line in open(path) if line.strip()]
    lc = [r for r in recs if "plain" in r]
    sv = [r for r in recs if "in_process" in r]
    sets = sorted({r["data"] for r in lc})
    for arm in ("lc_default", "lc_qa") if lc else ():
        print(f"\n## {arm}: accuracy (whole words) against the plain chain")
        print("| data | n | plain | grogu | W / L | p | token F1 | words | changed | answer changed | doubt | cost |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name in sets + ["pooled"]:
            part = lc if name == "pooled" else [r for r in lc if r["data"] == name]
            t = arm_table(part, arm)
            print(
                f"| {name} | {t['n']} | {t['plain']:.1f} % | {t['arm']:.1f} % | {t['wins']} / {t['losses']} | "
                f"{t['p']:.3g} | {t['f1'][0]:.1f} → {t['f1'][1]:.1f} | {t['words'][0]:.1f} → {t['words'][1]:.1f} | "
                f"{t['changed']:.0f} % | {t['answer_changed']:.0f} % | {t['doubt']:.0f} % | "
                f"{t['cost_median']:.2f}× / {t['cost_ratio_of_means']:.2f}× / {t['cost_p90']:.2f}× |"
            )
        print("\ncost: median of per-question ratios / ratio of means / 90th percentile, against the plain chain")
        kept = [r for r in lc if r[arm]["given"] == [0, 1, 2]]
        same = sum(r[arm]["answer"] == r["plain"]["answer"] for r in kept)
        print(f"context kept: the plain chain's answer on {same} / {len(kept)} questions")
        for label, part in (
            ("calm", [r for r in lc if not (r[arm]["gate"] or {}).get("in_doubt")]),
            ("in doubt", [r for r in lc if (r[arm]["gate"] or {}).get("in_doubt")]),
        ):
            if part:
                mean = sum(r[arm]["seconds"] for r in part) / sum(r["plain"]["seconds"] for r in part)
                ratios = [r[arm]["seconds"] / r["plain"]["seconds"] for r in part]
                print(
                    f"cost, {label} (n {len(part)}): ratio of means {mean:.2f}×, median "
                    f"{percentile(ratios, 0.5):.2f}×, p90 {percentile(ratios, 0.9):.2f}×"
                )
        print(f"\n## {arm}: the gate's verdict against a wrong plain answer")
        print(
            "| data | AUROC in doubt | AUROC support | AUROC confidence | plain correct, calm | plain correct, doubt |"
        )
        print("|---|---|---|---|---|---|")
        for name in sets + ["pooled"]:
            part = lc if name == "pooled" else [r for r in lc if r["data"] == name]
            d = doubt_table(part, arm)

            def f(x):
                return "–" if x is None else f"{x:.2f}"

            print(
                f"| {name} | {f(d['auroc_in_doubt'])} | {f(d['auroc_support'])} | {f(d['auroc_confidence'])} | "
                f"{d['plain_calm'][1]:.1f} % (n {d['plain_calm'][0]}) | "
                f"{d['plain_doubt'][1]:.1f} % (n {d['plain_doubt'][0]}) |"
            )
    for arm in ("service", "served"):
        sv = [r for r in recs if arm in r]
        if not sv:
            continue
        same = sum(r[arm]["given"] == r["in_process"]["given"] for r in sv)
        answers = sum(r[arm]["answer"] == r["in_process"]["answer"] for r in sv)
        acc = [100 * sum(r[k]["correct"] for r in sv) / len(sv) for k in ("in_process", arm)]
        print(
            f"\n## {arm}: the same nodes kept on {same} / {len(sv)} questions, the same answer on {answers}; "
            f"accuracy of the chosen context's answer {acc[0]:.1f} % in process, {acc[1]:.1f} % here"
        )
        for label, part in (
            ("calm", [r for r in sv if not (r["in_process"]["gate"] or {}).get("in_doubt")]),
            ("in doubt", [r for r in sv if (r["in_process"]["gate"] or {}).get("in_doubt")]),
            ("all", sv),
        ):
            if part:
                ratios = [r[arm]["seconds"] / r["in_process"]["seconds"] for r in part]
                mean = sum(r[arm]["seconds"] for r in part) / sum(r["in_process"]["seconds"] for r in part)
                print(
                    f"| {label} | n {len(part)} | in process {sum(r['in_process']['seconds'] for r in part) / len(part):.2f} s"
                    f" | {arm} {sum(r[arm]['seconds'] for r in part) / len(part):.2f} s | ratio of means "
                    f"{mean:.2f}× | median {percentile(ratios, 0.5):.2f}× | p90 {percentile(ratios, 0.9):.2f}× |"
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("langchain", "service"):
        c = sub.add_parser(name)
        c.add_argument("--data", choices=["squad", "nq", "hotpotqa-dev"], default="squad")
        c.add_argument("--data-file", default=None, help="nq: nq-open-oracle.jsonl.gz; hotpotqa-dev: its JSONL")
        c.add_argument("--questions", type=int, default=150)
        c.add_argument("--skip", type=int, default=0, help="start after this many questions of the sample")
        c.add_argument("--shard", default="0/1", help="i/n: every n-th question starting at i")
        c.add_argument("--max-new-tokens", type=int, default=48)
        c.add_argument("--out", required=True)
        c.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
        if name == "service":
            c.add_argument("--arms", default="service,served", help="beside in_process: service, served or both")
    r = sub.add_parser("report")
    r.add_argument("records", nargs="+")
    args = p.parse_args()
    if args.cmd != "report":  # the JSONL's meta beside it, as the collection starts (it appends)
        write_sidecar(args.out, {k: v for k, v in vars(args).items() if v != sub.choices[args.cmd].get_default(k)})
    {"langchain": langchain, "service": service, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
