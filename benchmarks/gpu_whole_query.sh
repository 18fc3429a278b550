#!/usr/bin/env bash
# The default (selective) and the always-gated context mode's whole query against the plain query engine on a GPU (CUDA): the embedded
# SmolLM2 in float32, one question after the other, 30 held-out questions each of SQuAD and NQ-open.
# Prints benchmarks/pipeline_accuracy.py latency --whole-only's JSON per data set: the median of the
# per-question ratios, the ratio of means, the 90th percentile, the doubt rate, calm and doubtful
# queries apart, where the time goes, encoded tokens and decode steps. Needs the project installed with CUDA torch, ../shared/data, and the NQ-open file:
#   NQ_FILE=path/to/nq-open-oracle.jsonl.gz bash benchmarks/gpu_whole_query.sh   (under 8 minutes on an H100)
set -euo pipefail
cd "$(dirname "$0")"
settings=${SETTINGS:-selective_latency_settings.json}
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
python pipeline_accuracy.py latency --whole-only --device cuda --data squad --questions 30 --settings "$settings"
if [ -n "${NQ_FILE:-}" ]; then
  python pipeline_accuracy.py latency --whole-only --device cuda --data nq --data-file "$NQ_FILE" --questions 30 \
    --settings "$settings"
fi
