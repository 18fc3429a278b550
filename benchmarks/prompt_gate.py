"""A gate fitted to the user's prompt: the selective default's gate under several QA prompts.

The selective default answers the retriever's top 3 first and tries other contexts only when that answer
is in doubt. Its thresholds (support >= 0.8, confidence >= 0.4) were tuned under LlamaIndex's chat QA
prompt. This benchmark asks how gates behave under other prompts a user brings.

``collect``: for each question, the top 5 retrieved (the packaged MiniLM, LlamaIndex's vector index), and
for each prompt, every candidate of the default family (``swap_orders``: the top 3, two swaps, each
reversed) answered by SmolLM2-135M-Instruct under that prompt (greedy, 48 tokens), scored by grogu's
engine exactly as the context mode scores them. Also, for the retriever's own answer, its teacher-forced
mean log-probability with the top 3 reversed and with no document (a cheap relative reading: no decoding).
A record per question and prompt; any gate is then replayed exactly from the records
(``pipeline_modes.mode_context``).

Prompts (``PROMPTS``):
  - ``llamaindex``: LlamaIndex's chat QA prompt, the documents with their title (``MetadataMode.LLM``);
  - ``terse``: a LangChain ``ChatPromptTemplate`` asking for a few words;
  - ``readme``: the README's LangChain prompt ("Answer the question using only the documents.").
A LangChain prompt reads the documents' text alone (``page_content``) and is rendered through the chat
template exactly as ``ChatHuggingFace`` renders it (``langchain_grogu.template_from_langchain``).
``--verify N`` checks the first N questions' first answer against the real chain or synthesizer.

``--contexts gated GATES.json``: a held-out pass scores the other candidates only where one of the gates
in the file is in doubt (the first answer is always scored).

    OMP_NUM_THREADS=1 python benchmarks/prompt_gate.py collect --data squad --split tune --questions 60 \\
        --out benchmarks/results/prompt_gate/squad_tune.jsonl
    python benchmarks/prompt_gate.py choose benchmarks/results/prompt_gate/*_tune.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from pipeline_accuracy import (  # noqa: E402
    build_index,
    hotpotqa_dev_questions,
    load_data,
    nq_questions,
    result_row,
    squad_questions,
)
from pipeline_modes import key  # noqa: E402
from record_meta import write_sidecar  # noqa: E402

from grogu.rerank.selection import context_candidates  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_K, TOP_N, MAX_NEW_TOKENS = 5, 3, 48
#: the LangChain prompts: (system, human); the documents joined by blank lines go in {context}
LANGCHAIN_PROMPTS = {
    "terse": ("Answer in a few words, using the context.", "Context:\n{context}\n\nQuestion: {question}"),
    "readme": ("Answer the question using only the documents.", "{context}\n\nQuestion: {question}"),
}
PROMPTS = ("llamaindex", *LANGCHAIN_PROMPTS)


def chat_prompt(name: str):
    from langchain_core.prompts import ChatPromptTemplate

    system, human = LANGCHAIN_PROMPTS[name]
    return ChatPromptTemplate.from_messages([("system", system), ("human", human)])


def chat_model(model, tokenizer):
    """SmolLM2 as the chain's ``ChatHuggingFace``: greedy, ``MAX_NEW_TOKENS`` answer tokens."""
    from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline
    from transformers import pipeline

    pipe = pipeline(
        "text-generation",
        model=model,
        tokenizer=tokenizer,
        max_new_tokens=MAX_NEW_TOKENS,
        do_sample=False,
        return_full_text=False,
    )
    return ChatHuggingFace(llm=HuggingFacePipeline(pipeline=pipe), tokenizer=tokenizer, model_id="smollm2")


def candidates() -> list[list[int]]:
    return context_candidates(TOP_K, TOP_N, "swap_orders", 2)


def mean_logprob(stats) -> float | None:
    lp = stats.logprob
    return float(lp.mean()) if len(lp) else None


class Prompted:
    """One prompt: its grogu template, a scorer on the shared engine, and the real chain to verify with."""

    def __init__(self, name: str, engine, model, tokenizer):
        import grogu
        from grogu.core.prompts import PromptBuilder

        self.name = name
        if name == "llamaindex":
            from llama_index.core import get_response_synthesizer
            from llama_index.llms.huggingface import HuggingFaceLLM
            from llama_index.postprocessor.grogu import template_from_llama_index

            stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
            llm = HuggingFaceLLM(
                model=model,
                tokenizer=tokenizer,
                model_name="smollm2",
                context_window=8192,
                max_new_tokens=MAX_NEW_TOKENS,
                is_chat_model=True,
                generate_kwargs={"do_sample": False},
                stopping_ids=[stop],
            )
            synth = get_response_synthesizer(llm=llm, response_mode="compact")
            template = template_from_llama_index(synth, llm)
            self._real = lambda q, nodes: str(synth.synthesize(q, nodes))
        else:
            from langchain_core.output_parsers import StrOutputParser
            from langchain_grogu import template_from_langchain

            chat = chat_model(model, tokenizer)
            prompt = chat_prompt(name)
            template = template_from_langchain(prompt, chat)
            chain = prompt | chat | StrOutputParser()
            self._real = lambda q, nodes: chain.invoke(
                {"context": "\n\n".join(n.node.get_content() for n in nodes), "question": q}
            )
        self.scorer = grogu.UtilityScorer(engine, max_new_tokens=MAX_NEW_TOKENS, template=template)
        self.builder = PromptBuilder.for_target(engine, MAX_NEW_TOKENS, template)
        self.engine = engine

    def texts(self, retrieved) -> list[str]:
        from llama_index.core.schema import MetadataMode

        mode = MetadataMode.LLM if self.name == "llamaindex" else MetadataMode.NONE
        return [n.node.get_content(metadata_mode=mode) for n in retrieved]

    def forced(self, question: str, docs: list[str], answer: str) -> float | None:
        """The answer's teacher-forced mean log-probability after the grounded prompt of ``docs``
        (no document: the ungrounded prompt)."""
        from grogu.core.prompts import as_document

        ids = (
            self.builder.grounded_ids(question, [as_document(d) for d in docs])
            if docs
            else self.builder.ungrounded_ids(question)
        )
        [stats] = self.engine.token_stats([ids], [self.engine.encode(answer)])
        return mean_logprob(stats)

    def real(self, question: str, retrieved) -> str:
        return self._real(question, retrieved)


def held_gates(chosen_path: str, tune_paths: list[str]) -> list[dict]:
    """The gates a held-out pass replays: the shipped one and the one ``gates.py choose`` saved (a quantile
    gate fitted on the tuning records' first answers)."""
    import gates

    chosen = json.load(open(chosen_path))["chosen"]
    return [gates.SHIPPED, gates.with_fitted(chosen, gates.load(tune_paths))]


def gated_doubt(gate_list: list[dict], rec: dict) -> bool:
    """Whether any of the gates is in doubt on a record holding the first context alone."""
    import gates

    return any(gates.in_doubt(g, rec) for g in gate_list)


def earlier_held_ids(data: str, path: str | None) -> set[str]:
    """Every question of ``data`` an earlier held-out sample used: the frozen samples drawn before this one
    (``held_out.drawn_before``; a sample frozen later does not change this draw) and the
    draws ``entry_points.earlier_ids`` left out (for HotpotQA, the seed-2 sample, redrawn exactly)."""
    import entry_points
    import held_out

    draws = {
        "squad": lambda k, s, ex: squad_questions("held", k, s, ex),
        "nq": lambda k, s, ex: nq_questions("held", k, s, path, ex),
        "hotpotqa-dev": lambda k, s, ex: hotpotqa_dev_questions("held", k, s, path, ex),
    }
    frozen = set().union(*(held_out.frozen(n) for n in held_out.drawn_before(data, "prompt_gate_seed6")))
    return frozen | entry_points.earlier_ids(data, draws[data])


def questions_of(args) -> tuple[list[dict], list[dict]]:
    """(pool, questions): a held-out draw leaves every earlier held-out sample out, in code."""
    if args.split == "held":
        exclude = earlier_held_ids(args.data, args.data_file)
        draw = {
            "squad": lambda: squad_questions("held", args.questions, args.seed, exclude),
            "nq": lambda: nq_questions("held", args.questions, args.seed, args.data_file, exclude),
            "hotpotqa-dev": lambda: hotpotqa_dev_questions("held", args.questions, args.seed, args.data_file, exclude),
        }
        return draw[args.data]()
    return load_data(args)


def collect(args) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    import grogu
    from grogu.runtime.models import embedded_embedder_path

    pool, questions = questions_of(args)
    shard, shards = map(int, args.shard.split("/"))
    questions = questions[shard::shards]
    embed_model = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    retriever = build_index(pool, embed_model, args.cache_dir, args.data).as_retriever(similarity_top_k=TOP_K)
    model, tokenizer = grogu.load_model(grogu.runtime.models.DEFAULT_MODEL, device="cpu")
    engine = grogu.get_engine((model, tokenizer))
    prompts = [Prompted(name, engine, model, tokenizer) for name in args.prompts]
    gates = held_gates(args.gates, args.tune) if args.contexts == "gated" else None
    done = set()
    if os.path.exists(args.out):
        done = {(r["qid"], r["prompt"]) for r in map(json.loads, open(args.out))}
    cands = candidates()
    for n_q, q in enumerate(questions, 1):
        retrieved = retriever.retrieve(q["question"])
        for p in prompts:
            if (q["qid"], p.name) in done:
                continue
            texts = p.texts(retrieved)
            rec = dict(
                q,
                data=args.data,
                split=args.split,
                prompt=p.name,
                top_k=TOP_K,
                texts=texts,
                retrieved=[{"id": n.node.node_id, "score": float(n.score)} for n in retrieved],
            )
            t0 = time.perf_counter()
            first = cands[0]
            [r0] = p.scorer.score_contexts(q["question"], [[texts[i] for i in first]])
            rec["contexts"] = {key(first): result_row(r0, q["answers"])}
            rec["first_s"] = time.perf_counter() - t0
            rec["forced"] = {
                "first": p.forced(q["question"], [texts[i] for i in first], r0.answer),
                "reversed": p.forced(q["question"], [texts[i] for i in first[::-1]], r0.answer),
                "none": p.forced(q["question"], [], r0.answer),
            }
            rec["doubt"] = gates is None or gated_doubt(gates, rec)
            t0 = time.perf_counter()
            if rec["doubt"]:
                rest = cands[1:]
                scored = p.scorer.score_contexts(q["question"], [[texts[i] for i in c] for c in rest])
                rec["contexts"].update({key(c): result_row(r, q["answers"]) for c, r in zip(rest, scored)})
            rec["rest_s"] = time.perf_counter() - t0
            if n_q <= args.verify:
                real = p.real(q["question"], retrieved[:TOP_N])
                rec["real_answer"] = real
                rec["agree"] = real.strip() == r0.answer.strip()
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(
                f"{n_q}/{len(questions)} {q['qid']} {p.name} first {rec['first_s']:.1f}s rest {rec['rest_s']:.1f}s "
                f"doubt={rec['doubt']} agree={rec.get('agree')}",
                file=sys.stderr,
                flush=True,
            )


def check(args) -> None:
    """The front end on recorded questions: ``GroguRetriever(qa_prompt=<the prompt>, **settings).as_qa_chain()``
    over the record's top 5, with the chosen gate's settings. Its verdict (support, entropy change, in doubt)
    and answer against the replay of the records (``gates.py``)."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import gates
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_grogu import GroguRetriever

    import grogu

    records = [r for r in gates.load(args.records) if r["prompt"] in LANGCHAIN_PROMPTS][: args.limit]
    model, tokenizer = grogu.load_model(grogu.runtime.models.DEFAULT_MODEL, device="cpu")
    chat = chat_model(model, tokenizer)
    gate = json.load(open(args.chosen))["chosen"]
    floors = gate["floors"]
    settings = {
        "gate_support": floors.get("support", 0.0),
        "gate_confidence": floors.get("confidence", 0.0),
        "gate_entropy_change": floors.get("entropy_change"),
    }

    class Fixed(BaseRetriever):
        docs: list

        def _get_relevant_documents(self, query, *, run_manager=None):
            return self.docs

    out = []
    for rec in records:
        base = Fixed(docs=[Document(page_content=t) for t in rec["texts"]])
        chain = GroguRetriever(
            base_retriever=base,
            model=chat,
            top_n=TOP_N,
            qa_prompt=chat_prompt(rec["prompt"]),
            max_new_tokens=MAX_NEW_TOKENS,
            **settings,
        ).as_qa_chain()
        got = chain.invoke(rec["question"])
        verdict = got["documents"][0].metadata["grogu"]["context"]["gate"]
        sig = gates.signals(rec)
        replay = gates.handed(gate, rec)
        row = {
            "qid": rec["qid"],
            "prompt": rec["prompt"],
            "support": [verdict["support"], sig["support"]],
            "entropy_change": [verdict["entropy_change"], sig["entropy_change"]],
            "in_doubt": [verdict["in_doubt"], gates.in_doubt(gate, rec)],
            "same_answer": got["answer"] == rec["contexts"][key(replay)]["answer"]
            if key(replay) in rec["contexts"]
            else None,
        }
        out.append(row)
        print(json.dumps(row), flush=True)
    agree = sum(r["in_doubt"][0] == r["in_doubt"][1] for r in out)
    same = sum(bool(r["same_answer"]) for r in out)
    print(f"verdicts agree on {agree} / {len(out)}; answers equal on {same} / {len(out)}")
    if args.save:
        json.dump(out, open(args.save, "w"), indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--data", choices=["squad", "nq", "hotpotqa-dev"], default="squad")
    c.add_argument("--data-file", default=None)
    c.add_argument("--split", choices=["tune", "held"], default="tune")
    c.add_argument("--questions", type=int, default=60)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--exclude", nargs="*", default=[], help="tune: files of question ids to leave out")
    c.add_argument("--prompts", nargs="+", choices=PROMPTS, default=list(PROMPTS))
    c.add_argument("--contexts", choices=["all", "gated"], default="all")
    c.add_argument("--gates", default=None, help="--contexts gated: the JSON of gates.py choose --save")
    c.add_argument("--tune", nargs="*", default=[], help="--contexts gated: the tuning records (quantile floors)")
    c.add_argument("--verify", type=int, default=3)
    c.add_argument("--shard", default="0/1")
    c.add_argument("--out", required=True)
    c.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
    k = sub.add_parser("check")
    k.add_argument("records", nargs="+")
    k.add_argument("--chosen", required=True)
    k.add_argument("--limit", type=int, default=6)
    k.add_argument("--save", default=None)
    args = parser.parse_args()
    settings = {k: v for k, v in vars(args).items() if v != sub.choices[args.cmd].get_default(k)}
    if args.cmd == "check":
        check(args)
        if args.save:  # a JSON list: its meta beside it
            write_sidecar(args.save, settings)
    elif args.cmd == "collect":
        if args.contexts == "gated" and not args.gates:
            parser.error("--contexts gated needs --gates")
        write_sidecar(args.out, settings)  # it appends (a run resumes): its meta as the collection starts
        collect(args)


if __name__ == "__main__":
    main()
