#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama.cpp that llama-cpp-python 0.3.36 vendors, so the server
# and the in-process reference (llama_cpp.Llama) run the same llama.cpp. Same CPU flags as the README's
# test set-up (AVX2, no llamafile). About 5 minutes on 2 cores (4 min 49 s, download included). Needs cmake and a C++ compiler.
#   bash benchmarks/build_llama_server.sh /tmp/llama-server-build
#   -> /tmp/llama-server-build/bin/llama-server (pass it to benchmarks/llama_server_real.py --binary)
set -euo pipefail
out="$(realpath -m "${1:-/tmp/llama-server-build}")"
src="$(mktemp -d)"
python -m pip download --no-deps --no-binary :all: "llama-cpp-python==0.3.36" -d "$src" >/dev/null
tar xzf "$src"/llama_cpp_python-0.3.36.tar.gz -C "$src"
cmake -S "$src/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$out" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_LLAMAFILE=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
cmake --build "$out" --target llama-server -j "$(nproc)"
"$out/bin/llama-server" --version
