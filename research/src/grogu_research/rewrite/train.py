"""Train a query rewriter on GROGU-ranked data: SFT warm-up, then DPO (TRL).

    grogu-research rewrite-pairs --turns turns.jsonl --corpus passages.jsonl --out pairs/
    grogu-research train-rewriter --pairs pairs/ --model smollm2-135m-instruct --output rewriter/

Reads ``sft.jsonl`` (``{"prompt", "completion"}``) and ``dpo.jsonl`` (``{"prompt", "chosen",
"rejected"}``) as written by :mod:`grogu_research.rewrite`; runs TRL's ``SFTTrainer`` on the SFT records, then
``DPOTrainer`` on the pairs with the SFT model as policy and (a frozen copy of it) as reference;
saves the final model and tokenizer to ``<output>/final`` and the loss logs to
``<output>/train_log.json``. When the tokenizer has a chat template the records are trained in TRL's
conversational format (the prompt as the user turn, the rewrite as the assistant turn), which is how
:func:`grogu_research.rewrite.generate_candidates` prompted the rewriter.

Needs the ``train`` extra (TRL + datasets): ``pip install -e "research[train]"``. Nothing here is imported
until a function runs, so ``grogu`` itself stays light.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from typing import Any, Sequence

from grogu.runtime.models import DEFAULT_MODEL

TRAIN_EXTRA_HINT = (
    'grogu-research train-rewriter needs TRL and datasets, the "train" extra: pip install -e "research[train]"'
)


def require_trl() -> None:
    """ImportError that says how to install the ``train`` extra when TRL or datasets is missing."""
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{TRAIN_EXTRA_HINT} ({exc})") from exc


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check_records(records: Sequence[dict], keys: tuple[str, ...], what: str) -> list[dict]:
    out = []
    for i, r in enumerate(records):
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in keys):
            raise ValueError(f"{what} record {i} needs string fields {list(keys)}")
        out.append({k: r[k] for k in keys})
    return out


def conversational_sft(records: Sequence[dict]) -> list[dict]:
    """``{"prompt", "completion"}`` strings -> TRL conversational prompt-completion records."""
    return [
        {
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "completion": [{"role": "assistant", "content": r["completion"]}],
        }
        for r in records
    ]


def conversational_dpo(records: Sequence[dict]) -> list[dict]:
    """``{"prompt", "chosen", "rejected"}`` strings -> TRL conversational preference records."""
    return [
        {
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "chosen": [{"role": "assistant", "content": r["chosen"]}],
            "rejected": [{"role": "assistant", "content": r["rejected"]}],
        }
        for r in records
    ]


def _config_kwargs(
    output_dir: str, steps: int, epochs: float, batch_size: int, learning_rate: float, seed: int, on_gpu: bool
) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        gradient_checkpointing=False,
        bf16=on_gpu,
        fp16=False,
        use_cpu=not on_gpu,
        disable_tqdm=True,
    )
    if steps > 0:
        kwargs["max_steps"] = steps
    else:
        kwargs["num_train_epochs"] = epochs
    return kwargs


def detach_gguf_quantizer(model: Any) -> None:
    """Make a model loaded from a .gguf file trainable. transformers de-quantizes such a model to plain
    float weights but leaves its GGUF quantizer attached, and ``Trainer`` then refuses to train it
    ("purely quantized models"). When every parameter is a float tensor the quantizer is only a label:
    drop it (this is what transformers does itself for models it de-quantizes on purpose)."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None or "gguf" not in type(quantizer).__name__.lower():
        return
    if all(p.dtype.is_floating_point for p in model.parameters()):
        quantizer.remove_quantization_config(model)


def _losses(trainer: Any) -> list[float]:
    return [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]


def train_rewriter(
    model: Any,
    sft_records: Sequence[dict],
    dpo_records: Sequence[dict],
    output_dir: str,
    *,
    tokenizer: Any = None,
    sft_steps: int = -1,
    dpo_steps: int = -1,
    sft_epochs: float = 1.0,
    dpo_epochs: float = 1.0,
    batch_size: int = 4,
    sft_learning_rate: float = 2e-5,
    dpo_learning_rate: float = 1e-6,
    beta: float = 0.1,
    max_length: int = 1024,
    chat: bool | None = None,
    seed: int = 0,
    device: str | None = None,
) -> dict[str, Any]:
    """SFT warm-up on ``sft_records`` then DPO on ``dpo_records``; returns the losses and paths.

    Args:
        model: a model spec (embedded alias, path, hub id; see :func:`grogu.runtime.models.load_model`), or a
            loaded causal LM (then pass ``tokenizer``). It is trained in place and saved to
            ``<output_dir>/final`` with its tokenizer.
        sft_records / dpo_records: the rewrite-pairs outputs (string records); either may be empty to
            skip that stage.
        sft_steps / dpo_steps: optimiser steps per stage (-1: ``sft_epochs`` / ``dpo_epochs`` epochs).
        beta: the DPO temperature. max_length: longest tokenised prompt + completion.
        chat: train in the conversational format (default: when the tokenizer has a chat template).
        device: 'cpu' or 'cuda' (default: CUDA when available).
    """
    require_trl()
    import torch
    from trl import DPOConfig, SFTConfig

    sft = check_records(sft_records, ("prompt", "completion"), "SFT")
    dpo = check_records(dpo_records, ("prompt", "chosen", "rejected"), "DPO")
    if not sft and not dpo:
        raise ValueError("nothing to train on: both the SFT and the DPO records are empty")
    on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    model, tokenizer = _trainable(model, tokenizer, on_gpu)
    if chat is None:
        chat = bool(getattr(tokenizer, "chat_template", None))
    if chat:
        sft, dpo = conversational_sft(sft), conversational_dpo(dpo)
    model.train()
    log: dict[str, Any] = {"chat_format": chat, "sft_records": len(sft), "dpo_records": len(dpo)}

    if sft:
        args = SFTConfig(
            **_config_kwargs(
                os.path.join(output_dir, "sft"), sft_steps, sft_epochs, batch_size, sft_learning_rate, seed, on_gpu
            ),
            max_length=max_length,
        )
        model = _train_sft(model, tokenizer, sft, args, log)
    if dpo:
        args = DPOConfig(
            **_config_kwargs(
                os.path.join(output_dir, "dpo"), dpo_steps, dpo_epochs, batch_size, dpo_learning_rate, seed, on_gpu
            ),
            beta=beta,
            max_length=max_length,
        )
        model = _train_dpo(model, tokenizer, dpo, args, log)
    return _save(model, tokenizer, output_dir, log)


def _trainable(model: Any, tokenizer: Any, on_gpu: bool) -> tuple[Any, Any]:
    """The model (loaded from a spec in float32, GGUF quantizer detached) and its tokenizer with a pad token."""
    from grogu.runtime.models import load_model

    if isinstance(model, (str, tuple)):
        model, tokenizer = load_model(model, device="cuda" if on_gpu else "cpu", dtype="float32")
    elif tokenizer is None:
        raise ValueError("pass tokenizer= with a loaded model")
    detach_gguf_quantizer(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _train_sft(model: Any, tokenizer: Any, records: list[dict], args: Any, log: dict[str, Any]) -> Any:
    """The SFT stage; its losses and steps go into ``log``. Returns the trained model."""
    from datasets import Dataset
    from trl import SFTTrainer

    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(records), processing_class=tokenizer)
    trainer.train()
    log["sft_loss"] = _losses(trainer)
    log["sft_steps"] = trainer.state.global_step
    return trainer.model


def _train_dpo(model: Any, tokenizer: Any, records: list[dict], args: Any, log: dict[str, Any]) -> Any:
    """The DPO stage against a frozen copy of the model it starts from (TRL would reload the checkpoint
    from disk instead: the pre-SFT weights, and impossible for a model that came from a .gguf file)."""
    from datasets import Dataset
    from trl import DPOTrainer

    reference = copy.deepcopy(model).eval().requires_grad_(False)
    trainer = DPOTrainer(
        model=model,
        ref_model=reference,
        args=args,
        train_dataset=Dataset.from_list(records),
        processing_class=tokenizer,
    )
    trainer.train()
    log["dpo_loss"] = _losses(trainer)
    log["dpo_steps"] = trainer.state.global_step
    log["dpo_final_metrics"] = {k: v for k, v in trainer.state.log_history[-1].items() if isinstance(v, (int, float))}
    return trainer.model


def _save(model: Any, tokenizer: Any, output_dir: str, log: dict[str, Any]) -> dict[str, Any]:
    """Save the model and tokenizer to ``<output_dir>/final`` and the log to train_log.json."""
    final = os.path.join(output_dir, "final")
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    log["final_model"] = final
    with open(os.path.join(output_dir, "train_log.json"), "w", encoding="utf-8") as f:
        json.dump(log, f, indent=2)
    return log


# ---------------------------------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    """``grogu-research train-rewriter``: SFT warm-up then DPO with TRL (needs the ``train`` extra)."""
    p.description = (
        "Train a query rewriter on grogu-research rewrite-pairs output: SFT on sft.jsonl, then DPO on dpo.jsonl "
        '(TRL; pip install -e "research[train]").'
    )
    p.add_argument("--pairs", help="folder written by grogu-research rewrite-pairs (sft.jsonl, dpo.jsonl)")
    p.add_argument("--sft", help="SFT JSONL ({'prompt','completion'}); overrides --pairs")
    p.add_argument("--dpo", help="DPO JSONL ({'prompt','chosen','rejected'}); overrides --pairs")
    p.add_argument("--model", default=DEFAULT_MODEL, help="rewriter to train (alias, path, .gguf, hub id)")
    p.add_argument("--output", required=True, help="output folder (final model in <output>/final)")
    p.add_argument("--sft-steps", type=int, default=-1, help="optimiser steps (-1: --sft-epochs epochs; 0: skip)")
    p.add_argument("--dpo-steps", type=int, default=-1, help="optimiser steps (-1: --dpo-epochs epochs; 0: skip)")
    p.add_argument("--sft-epochs", type=float, default=1.0)
    p.add_argument("--dpo-epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--sft-lr", type=float, default=2e-5)
    p.add_argument("--dpo-lr", type=float, default=1e-6)
    p.add_argument("--beta", type=float, default=0.1, help="DPO beta")
    p.add_argument("--max-length", type=int, default=1024)
    p.add_argument("--no-chat", action="store_true", help="plain-text records even when a chat template exists")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu or cuda (default: CUDA when available)")


def run(args: argparse.Namespace) -> int:
    try:
        require_trl()
    except ImportError as exc:
        raise SystemExit(str(exc)) from None
    sft_path = args.sft or (os.path.join(args.pairs, "sft.jsonl") if args.pairs else None)
    dpo_path = args.dpo or (os.path.join(args.pairs, "dpo.jsonl") if args.pairs else None)
    if not sft_path and not dpo_path:
        raise SystemExit("give --pairs DIR (from grogu-research rewrite-pairs) or --sft / --dpo files")
    sft = read_jsonl(sft_path) if sft_path and args.sft_steps != 0 else []
    dpo = read_jsonl(dpo_path) if dpo_path and args.dpo_steps != 0 else []
    log = train_rewriter(
        args.model,
        sft,
        dpo,
        args.output,
        sft_steps=args.sft_steps,
        dpo_steps=args.dpo_steps,
        sft_epochs=args.sft_epochs,
        dpo_epochs=args.dpo_epochs,
        batch_size=args.batch_size,
        sft_learning_rate=args.sft_lr,
        dpo_learning_rate=args.dpo_lr,
        beta=args.beta,
        max_length=args.max_length,
        chat=False if args.no_chat else None,
        seed=args.seed,
        device=args.device,
    )
    print(f"SFT: {log.get('sft_steps', 0)} steps on {log['sft_records']} records, loss {log.get('sft_loss')}")
    print(f"DPO: {log.get('dpo_steps', 0)} steps on {log['dpo_records']} pairs, loss {log.get('dpo_loss')}")
    print(f"model: {log['final_model']}   log: {os.path.join(args.output, 'train_log.json')}")
    return 0


__all__ = ["train_rewriter", "require_trl", "conversational_sft", "conversational_dpo", "read_jsonl"]
