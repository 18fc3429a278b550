"""``grogu tune`` validated: tune on 50 labelled questions, evaluate on 100 others, per QA prompt and data set.

The question this answers: does the setting ``grogu tune`` fits to a user's own prompt beat the retriever's
order, and the shipped default, on questions it was not fitted on?

``examples``: a fresh held-out sample per data set (SQuAD, NQ-open): 150 questions of the held-out split, in
a fixed permutation (seed 7) with every earlier held-out sample left out in code (``held_out.stable_draw``).
The first 50 tune, the next 100 evaluate. Each question's top 5 come from the packaged MiniLM over the data
set's passages (LlamaIndex's vector index). One examples file per prompt: the documents as that prompt's
pipeline shows them (LlamaIndex: the node's text with its title; LangChain: the page content).

``collect``: every candidate of every question answered once by SmolLM2-135M-Instruct (greedy, 48 tokens)
under the prompt, through ``grogu.apps.tune``'s own collection (the evaluation questions' records hold
every candidate, so each comparison is a replay).

``evaluate``: ``grogu.tune`` on the 50 (its own cross-validation and guard), then the tuned setting, the
shipped default and the retriever's order replayed on the 100, with the exact sign test. The decision rule
(``EVAL_RULE``) is committed before any evaluation record exists.

Prompts: ``llamaindex`` (LlamaIndex's chat QA prompt, through its synthesizer) and ``readme`` (the README's
LangChain prompt, "Answer the question using only the documents.").

    python benchmarks/tune_validation.py examples --data squad --data-file ...   # writes the examples files
    OMP_NUM_THREADS=1 python benchmarks/tune_validation.py collect --data squad --prompt llamaindex
    python benchmarks/tune_validation.py evaluate

``TUNE_VALIDATION_SEED`` picks the sample (``RULES``): 7 judged the first rule, 8 the second, 9 (the
default) the third: tune's defaults since (the small grid, chosen by the dense judge, ``EVAL_RULE_DENSE``),
on SQuAD alone. Each was drawn after its rule was committed. Their outputs: ``results/tune_validation``,
``results/tune_validation_seed8`` and ``results/tune_validation_seed9``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
N_TUNE, N_EVAL, TOP_K, TOP_N, MAX_NEW_TOKENS = 50, 100, 5, 3, 48
#: the samples: seed 7 judged the first rule (keep as the incumbent), seed 8 the second (the shipped
#: default as the incumbent), each drawn after its rule was committed
#: seed 9 the third (tune's defaults since: the shipped default as the incumbent, the small grid, chosen by
#: the dense judge with whole words as a check)
RULES = {7: "keep", 8: "shipped", 9: "dense"}
SEED = int(os.environ.get("TUNE_VALIDATION_SEED", "9"))
OUT = os.path.join(HERE, "results", "tune_validation" if SEED == 7 else f"tune_validation_seed{SEED}")
PROMPTS = ("llamaindex", "readme")
#: seed 9 draws SQuAD alone: the NQ-open and HotpotQA files are not on the machine that ran it
DATA = ("squad", "nq") if SEED < 9 else ("squad",)
#: the evaluation's verdict, fixed before any evaluation record: on each (data set, prompt) the tuned
#: setting must not lose to the retriever's order (losses <= wins on the 100); pooled over all four, it
#: must do at least as well as the shipped default (wins >= losses), reported with the exact sign test.
EVAL_RULE = "per set: tuned losses <= wins against the retriever's order; pooled: tuned wins >= losses against the shipped default"
#: seed 9's verdict, fixed before its sample was drawn. (1) Per set, on the 100: the tuned setting wins at
#: least as often as it loses, by whole words, against the better of the retriever's order and the shipped
#: default there. (2) Per set where the retriever's order beats the default on the 100: tune kept that
#: order, or the 90 % interval of the default's gain over it on the 50 includes 0 (tune says it cannot
#: tell). (3) Reported, not a bar: the 90 % interval of the default's gain over the retriever's order on the
#: 50, by each judge, its width and its width over the absolute mean (the dense judge is the tighter when
#: that ratio is smaller).
EVAL_RULE_DENSE = (
    "per set: tuned W >= L against the better of keep and the shipped default on the 100; where keep beats the "
    "default on the 100, tune kept keep or the default's 90 % interval on the 50 includes 0; reported: both "
    "judges' 90 % intervals of the default's gain over keep on the 50, widths and width / |mean|"
)


def sample_name(data: str) -> str:
    return f"{data}_tune_validation_seed{SEED}"


def earlier_held_ids(data: str, path: str | None) -> set[str]:
    """Every question an earlier held-out sample of ``data`` used: the frozen samples drawn before this one
    (``held_out.drawn_before``) and the draws ``entry_points.earlier_ids`` leaves out."""
    import entry_points
    import held_out
    from pipeline_accuracy import nq_questions, squad_questions

    draws = {
        "squad": lambda k, s, ex: squad_questions("held", k, s, ex),
        "nq": lambda k, s, ex: nq_questions("held", k, s, path, ex),
    }
    frozen = set().union(*(held_out.frozen(n) for n in held_out.drawn_before(data, f"tune_validation_seed{SEED}")))
    return frozen | entry_points.earlier_ids(data, draws[data])


def draw(data: str, path: str | None) -> tuple[list[dict], list[dict]]:
    """(pool, the 150 questions): a stable draw of the held-out split leaving every earlier sample out."""
    import held_out
    from pipeline_accuracy import nq_questions, squad_questions

    everything = 10**9
    pool, permuted = (
        squad_questions("held", everything, SEED) if data == "squad" else nq_questions("held", everything, SEED, path)
    )
    return pool, held_out.stable_draw(permuted, N_TUNE + N_EVAL, earlier_held_ids(data, path))


def examples(args) -> None:
    """The examples files of one data set (one per prompt), and its frozen sample."""
    warnings.filterwarnings("ignore")
    import held_out
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from pipeline_accuracy import build_index

    from grogu.runtime.models import embedded_embedder_path

    pool, questions = draw(args.data, args.data_file)
    ids = [q["qid"] for q in questions]
    path = os.path.join(held_out.SAMPLES, f"{sample_name(args.data)}.txt")
    if held_out.has(sample_name(args.data)):
        if held_out.frozen(sample_name(args.data)) != ids:
            raise SystemExit(f"{path} is frozen and differs from this draw")
    else:
        with open(path, "w") as f:
            f.write(f"# tune_validation.py: seed {SEED}, held-out split, earlier samples left out\n")
            f.write("\n".join(ids) + "\n")
    embed = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    retriever = build_index(pool, embed, args.cache_dir, args.data).as_retriever(similarity_top_k=TOP_K)
    os.makedirs(OUT, exist_ok=True)
    files = {p: open(os.path.join(OUT, f"examples_{args.data}_{p}.jsonl"), "w") for p in PROMPTS}
    for i, q in enumerate(questions):
        nodes = retriever.retrieve(q["question"])
        for p, f in files.items():
            mode = MetadataMode.LLM if p == "llamaindex" else MetadataMode.NONE
            ex = {
                "id": q["qid"],
                "question": q["question"],
                "answers": q["answers"],
                "documents": [n.node.get_content(metadata_mode=mode) for n in nodes],
            }
            f.write(json.dumps({**ex, "split": "tune" if i < N_TUNE else "eval"}, ensure_ascii=False) + "\n")
    for f in files.values():
        f.close()
    print(f"{args.data}: {len(questions)} questions ({N_TUNE} tune, {N_EVAL} eval) -> {OUT}")


def template(prompt: str, model, tokenizer):
    """The grogu template that renders what the prompt's real pipeline sends SmolLM2."""
    if prompt == "llamaindex":
        from llama_index.core import get_response_synthesizer
        from llama_index.llms.huggingface import HuggingFaceLLM
        from llama_index.postprocessor.grogu import template_from_llama_index

        llm = HuggingFaceLLM(
            model=model,
            tokenizer=tokenizer,
            model_name="smollm2",
            context_window=8192,
            max_new_tokens=MAX_NEW_TOKENS,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
            stopping_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")],
        )
        return template_from_llama_index(get_response_synthesizer(llm=llm, response_mode="compact"), llm)
    from langchain_grogu import template_from_langchain
    from prompt_gate import chat_model, chat_prompt

    return template_from_langchain(chat_prompt(prompt), chat_model(model, tokenizer))


def read_examples(data: str, prompt: str, split: str) -> list[dict]:
    rows = [json.loads(line) for line in open(os.path.join(OUT, f"examples_{data}_{prompt}.jsonl"))]
    return [{k: v for k, v in r.items() if k != "split"} for r in rows if r["split"] == split]


def collect(args) -> None:
    """Every candidate of the data set's 150 questions under one prompt (tune and eval records apart)."""
    warnings.filterwarnings("ignore")
    import torch

    import grogu
    from grogu.apps.tune import collect_records

    torch.set_num_threads(1)
    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    engine = grogu.get_engine((model, tokenizer))
    tpl = template(args.prompt, model, tokenizer)
    for split in ("tune", "eval"):
        path = os.path.join(OUT, f"records_{args.data}_{args.prompt}_{split}.jsonl")
        collect_records(
            read_examples(args.data, args.prompt, split),
            engine,
            tpl,
            top_n=TOP_N,
            max_new_tokens=MAX_NEW_TOKENS,
            records=path,
            batch=args.batch,
        )


def set_dir(data: str, prompt: str) -> str:
    return os.path.join(OUT, f"{data}_{prompt}")


def records(data: str, prompt: str, split: str) -> list[dict]:
    path = os.path.join(OUT, f"records_{data}_{prompt}_{split}.jsonl")
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def tune_set(data: str, prompt: str, engine, model, tokenizer, max_cost: float | None = None):
    """``grogu.tune`` on the set's 50 tuning questions, from their records (nothing is answered again): the
    settings file, report.html and report.txt land in ``results/tune_validation/<data>_<prompt>[_cap]/``."""
    import shutil

    import grogu

    out = set_dir(data, prompt) + ("" if max_cost is None else f"_cap{max_cost:g}")
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(os.path.join(OUT, f"records_{data}_{prompt}_tune.jsonl"), os.path.join(out, "records.jsonl"))
    tuned = grogu.tune(
        read_examples(data, prompt, "tune"),
        model=engine,
        qa_prompt=template(prompt, model, tokenizer),
        top_n=TOP_N,
        out=out,
        max_new_tokens=MAX_NEW_TOKENS,
        max_cost=max_cost,
        progress=False,
        # seeds 7 and 8 ran with the full grid and whole words; seed 9 with tune's defaults (small, dense)
        **(
            {"incumbent": "shipped"}
            if RULES[SEED] == "dense"
            else {"incumbent": RULES[SEED], "grid": "full", "choose_by": "words"}
        ),
    )
    os.remove(os.path.join(out, "records.jsonl"))  # the same file as records_<set>_tune.jsonl
    return tuned


def compare(out, rows: list[int], a: int, b: int) -> dict:
    """Wins and losses of arm ``a`` against arm ``b`` on ``rows``, with the exact two-sided sign test."""
    from grogu.apps.audit.stats import exact_sign_test

    wins = sum(out.correct[a][r] and not out.correct[b][r] for r in rows)
    losses = sum(out.correct[b][r] and not out.correct[a][r] for r in rows)
    return {"wins": wins, "losses": losses, "p": exact_sign_test(wins, losses)}


def interval_of(diffs: list[float]) -> dict:
    """The paired mean with its 90 % interval (tune's own bootstrap), its width and width / |mean|."""
    from grogu.apps.tune.gain import paired

    g = paired(diffs)
    if g["n"] == 0 or g["low"] is None:
        return {**g, "width": None, "width_over_mean": None}
    width = g["high"] - g["low"]
    return {**g, "width": width, "width_over_mean": width / abs(g["mean"]) if g["mean"] else None}


def dense_checks(data: str, prompt: str, tuned, out, rows: list[int]) -> dict:
    """Seed 9's checks (``EVAL_RULE_DENSE``) of one set: against the better of keep and the default on the
    100 (arms 0 and 1 of ``out``; the tuned setting is arm 2), and the default's gain over keep on the 50 by
    each judge."""
    from grogu.apps.tune.judging import answered_words
    from grogu.apps.tune.replay import KEEP, SHIPPED, outcomes

    acc = {i: sum(out.correct[i][r] for r in rows) for i in (0, 1)}
    best = [i for i in (0, 1) if acc[i] == max(acc.values())]
    against = {("keep", "shipped")[i]: compare(out, rows, 2, i) for i in best}
    tune_recs = records(data, prompt, "tune")
    t = outcomes(tune_recs, answered_words, [KEEP, SHIPPED])
    t_rows = list(range(len(tune_recs)))
    words50 = interval_of([int(t.correct[1][r]) - int(t.correct[0][r]) for r in t_rows])
    dense50 = interval_of([t.loglik[1][r] - t.loglik[0][r] for r in t_rows]) if t.dense else None
    dense100 = (
        {
            name: interval_of([out.loglik[i][r] - out.loglik[0][r] for r in rows])
            for name, i in (("shipped", 1), ("tuned", 2))
        }
        if out.dense
        else None
    )
    keep_beats_default = acc[0] > acc[1]
    says_cannot_tell = words50["low"] is not None and words50["low"] <= 0 <= words50["high"]
    if dense50 is not None:
        says_cannot_tell = says_cannot_tell or (dense50["low"] <= 0 <= dense50["high"])
    return {
        "better_on_100": [("keep", "shipped")[i] for i in best],
        "tuned_vs_better": against,
        "never_loses_to_better": all(x["wins"] >= x["losses"] for x in against.values()),
        "keep_beats_default_on_100": keep_beats_default,
        "kept_keep_or_cannot_tell": (not keep_beats_default) or tuned.decision == "keep" or says_cannot_tell,
        "default_vs_keep_on_50": {"words": words50, "dense": dense50},
        "dense_on_100": dense100,
        "choose_by": tuned.evidence.get("choose_by"),
        "gain_line": (tuned.evidence.get("gain") or {}).get("line"),
    }


def evaluate(args) -> None:
    """Tune on each set's 50, replay keep / shipped / tuned on its 100, judge by words; the report and the
    per-record results (``eval_results.jsonl``)."""
    warnings.filterwarnings("ignore")
    import torch

    import grogu
    from grogu.apps.tune.judging import answered_words, judgeable
    from grogu.apps.tune.replay import KEEP, SHIPPED, outcomes, setting_name

    torch.set_num_threads(1)
    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    engine = grogu.get_engine((model, tokenizer))
    report, rows_out, pooled = (
        {"rule": EVAL_RULE, "sets": []},
        [],
        {"tuned_vs_keep": [0, 0], "tuned_vs_shipped": [0, 0], "shipped_vs_keep": [0, 0]},
    )
    for data in DATA:
        for prompt in PROMPTS:
            tuned = tune_set(data, prompt, engine, model, tokenizer)
            capped = tune_set(data, prompt, engine, model, tokenizer, max_cost=1.5)
            recs = records(data, prompt, "eval")
            arms = [KEEP, SHIPPED, tuned.settings, capped.settings]
            out = outcomes(recs, answered_words, arms)
            rows = [r for r, rec in enumerate(recs) if judgeable(rec["answers"])]
            n = len(rows)

            def arm(i: int) -> dict:
                plain = sum(out.plain[r] for r in rows)
                return {
                    "accuracy": sum(out.correct[i][r] for r in rows) / n,
                    "f1": sum(out.f1[i][r] for r in rows) / n,
                    "words": sum(out.words[i][r] for r in rows) / n,
                    "changed": sum(out.changed[i][r] for r in rows) / n,
                    "cost": sum(out.seconds[i][r] for r in rows) / plain,
                }

            entry = {
                "data": data,
                "prompt": prompt,
                "n": n,
                "tuned": {
                    "decision": tuned.decision,
                    "setting": setting_name(tuned.settings),
                    **tuned.evidence["cross_validation"],
                },
                "capped": {"decision": capped.decision, "setting": setting_name(capped.settings)},
                "arms": {name: arm(i) for i, name in enumerate(("keep", "shipped", "tuned", "tuned_cap1.5"))},
                "tuned_vs_keep": compare(out, rows, 2, 0),
                "tuned_vs_shipped": compare(out, rows, 2, 1),
                "shipped_vs_keep": compare(out, rows, 1, 0),
                "capped_vs_keep": compare(out, rows, 3, 0),
                "seconds_per_question": sum(
                    sum(rec["seconds"].values()) for rec in records(data, prompt, "tune") + recs
                )
                / (N_TUNE + N_EVAL),
            }
            if RULES[SEED] == "dense":
                entry["dense_checks"] = dense_checks(data, prompt, tuned, out, rows)
            for key in pooled:
                pooled[key][0] += entry[key]["wins"]
                pooled[key][1] += entry[key]["losses"]
            report["sets"].append(entry)
            for r, rec in enumerate(recs):
                rows_out.append(
                    {
                        "data": data,
                        "prompt": prompt,
                        "id": rec["id"],
                        "judged": r in rows,
                        **{
                            name: {
                                "answer": rec["scored"][out_choice]["answer"],
                                "correct": out.correct[i][r],
                                "changed": out.changed[i][r],
                            }
                            for i, name in enumerate(("keep", "shipped", "tuned", "tuned_cap1.5"))
                            for out_choice in [_choice(out, i, r, rec)]
                        },
                    }
                )
            print(
                json.dumps(
                    {
                        k: entry[k]
                        for k in ("data", "prompt", "n", "tuned_vs_keep", "tuned_vs_shipped", "shipped_vs_keep")
                    }
                )
            )
    from grogu.apps.audit.stats import exact_sign_test

    report["pooled"] = {k: {"wins": w, "losses": lo, "p": exact_sign_test(w, lo)} for k, (w, lo) in pooled.items()}
    if RULES[SEED] == "dense":
        report["rule"] = EVAL_RULE_DENSE
        report["verdict"] = {
            "tuned_never_loses_to_the_better": all(e["dense_checks"]["never_loses_to_better"] for e in report["sets"]),
            "keep_kept_or_cannot_tell": all(e["dense_checks"]["kept_keep_or_cannot_tell"] for e in report["sets"]),
        }
    else:
        report["verdict"] = {
            "tuned_never_loses_to_keep": all(
                e["tuned_vs_keep"]["losses"] <= e["tuned_vs_keep"]["wins"] for e in report["sets"]
            ),
            "tuned_at_least_shipped_pooled": pooled["tuned_vs_shipped"][0] >= pooled["tuned_vs_shipped"][1],
        }
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(OUT, "eval_results.jsonl"), "w") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows_out)
    print(json.dumps({"pooled": report["pooled"], "verdict": report["verdict"]}, indent=1))


def _choice(out, arm: int, r: int, rec: dict) -> int:
    """The candidate arm ``arm`` chose on record ``r`` (by its answer's place in the record)."""
    from grogu.apps.tune.replay import replay

    return replay(out.settings[arm].for_target(False), rec).candidate


def frontends(args) -> None:
    """The real front ends on 5 evaluation questions with the set's tuned settings file: LlamaIndex's query
    engine (GroguRerank) under its chat prompt, LangChain's chain (GroguRetriever.as_qa_chain) under the
    README's prompt. Each answer against the replay's."""
    warnings.filterwarnings("ignore")
    import torch
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_grogu import GroguRetriever
    from llama_index.core import Settings, get_response_synthesizer
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever as LIRetriever
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import GroguRerank
    from prompt_gate import chat_model, chat_prompt

    import grogu
    from grogu.apps.tune.replay import replay

    torch.set_num_threads(1)
    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    Settings.tokenizer = tokenizer.encode
    out = []
    for data in DATA:
        for prompt in PROMPTS:
            path = os.path.join(set_dir(data, prompt), "settings.json")
            tuned = grogu.load_tuned(path)
            recs = records(data, prompt, "eval")[: args.questions]
            exs = {e["id"]: e for e in read_examples(data, prompt, "eval")}
            for rec in recs:
                ex = exs[rec["id"]]
                want = rec["scored"][replay(tuned.settings.for_target(False), rec).candidate]["answer"]
                if prompt == "llamaindex":
                    llm = HuggingFaceLLM(
                        model=model,
                        tokenizer=tokenizer,
                        model_name="smollm2",
                        context_window=8192,
                        max_new_tokens=MAX_NEW_TOKENS,
                        is_chat_model=True,
                        generate_kwargs={"do_sample": False},
                        stopping_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")],
                    )
                    nodes = [
                        NodeWithScore(node=TextNode(text=t), score=1.0 - i / 10) for i, t in enumerate(ex["documents"])
                    ]

                    class Fixed(LIRetriever):
                        def _retrieve(self, query_bundle):
                            return nodes

                    engine = RetrieverQueryEngine(
                        retriever=Fixed(),
                        response_synthesizer=get_response_synthesizer(llm=llm, response_mode="compact"),
                        node_postprocessors=[GroguRerank(model=llm, top_n=TOP_N, settings=path)],
                    )
                    got = str(engine.query(ex["question"]))
                else:
                    chat = chat_model(model, tokenizer)

                    class FixedLC(BaseRetriever):
                        docs: list

                        def _get_relevant_documents(self, query, *, run_manager=None):
                            return self.docs

                    docs = [Document(page_content=t) for t in ex["documents"]]
                    chain = GroguRetriever(
                        base_retriever=FixedLC(docs=docs),
                        model=chat,
                        top_n=TOP_N,
                        qa_prompt=chat_prompt(prompt),
                        settings=path,
                    ).as_qa_chain()
                    got = chain.invoke(ex["question"])["answer"]
                row = {
                    "data": data,
                    "prompt": prompt,
                    "id": rec["id"],
                    "same": got.strip() == want.strip(),
                    "answer": got,
                    "replay": want,
                }
                out.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
    with open(os.path.join(OUT, "frontends.jsonl"), "w") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in out)
    print(f"same answer as the replay: {sum(r['same'] for r in out)} / {len(out)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("examples")
    e.add_argument("--data", choices=DATA, required=True)
    e.add_argument("--data-file", default=None, help="NQ-open: nq-open-oracle.jsonl.gz")
    e.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "grogu-bench"))
    c = sub.add_parser("collect")
    c.add_argument("--data", choices=DATA, required=True)
    c.add_argument("--prompt", choices=PROMPTS, required=True)
    c.add_argument("--batch", type=int, default=4)
    sub.add_parser("evaluate")
    f = sub.add_parser("frontends")
    f.add_argument("--questions", type=int, default=5)
    args = ap.parse_args()
    {"examples": examples, "collect": collect, "evaluate": evaluate, "frontends": frontends}[args.cmd](args)


if __name__ == "__main__":
    main()
