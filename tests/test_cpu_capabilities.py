"""The engine and metric tests again, under each lower ATen CPU capability this machine has.

ATen picks its vectorised kernels by the CPU: ``default`` (no SIMD), ``avx2`` or ``avx512`` on x86. Each
sums in its own order, so a comparison that holds under one may fail under another: bf16 values moved past
a fixed tolerance under AVX-512 only. The main run covers the CPU's own capability. Here each lower one
runs the numeric tests in a subprocess (``ATEN_CPU_CAPABILITY``), so a kernel difference shows up on any
machine that runs the suite.

oneDNN chooses its kernels by the CPU on its own (AMX, AVX-512 BF16, AVX2), and ATen's bf16 attention asks
oneDNN whether to pack its blocks for AMX. Lowering ATen alone on an AVX-512 CPU therefore breaks bf16
``scaled_dot_product_attention`` ("pack_vnni2 is only supported when avx512 is supported", torch 2.13): no
real CPU runs that mix. Each capability is paired with the oneDNN limit of a CPU that has just that much
(``ONEDNN_MAX_CPU_ISA``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

#: ATen's capabilities on x86, lowest first, each with the oneDNN limit of a CPU that stops there
ONEDNN_LIMIT = {"default": "SSE41", "avx2": "AVX2", "avx512": "ALL"}
#: the tests that compare numbers: the engine against the naive loop, kernels, bf16, the four metrics
NUMERIC = [
    "tests/test_engine.py",
    "tests/test_engine_dtypes.py",
    "tests/test_kernels.py",
    "tests/test_metrics.py",
    "tests/test_metrics_small_models.py",
    "tests/test_seper_acu.py",
]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _native() -> str:
    return torch.backends.cpu.get_cpu_capability().lower()


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_numeric_tests_pass_under_a_lower_cpu_capability(capability):
    order = list(ONEDNN_LIMIT)
    native = _native()
    if native not in order:
        pytest.skip(f"ATen's capability here is {native!r}, not an x86 one")
    if order.index(capability) >= order.index(native):
        pytest.skip(f"this CPU's own capability is {native}: the main run covers it")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "ONEDNN_MAX_CPU_ISA": ONEDNN_LIMIT[capability]}
    check = (
        "import sys, torch, pytest\n"
        f"got = torch.backends.cpu.get_cpu_capability().lower()\n"
        f"assert got == {capability!r}, f'asked for {capability}, ATen runs {{got}}'\n"
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-m', 'not slow', *{NUMERIC!r}]))\n"
    )
    run = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = (run.stdout + run.stderr)[-4000:]
    assert run.returncode == 0, f"under ATEN_CPU_CAPABILITY={capability}:\n{tail}"
    assert " passed" in run.stdout and " failed" not in run.stdout, tail
