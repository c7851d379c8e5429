#!/usr/bin/env bash
# llm.c (karpathy/llm.c's GPU trainer) as the side-by-side peer of a device
# call, from the folder ../shared/tools/llmc-gpu/prepare.sh makes
# (build-peers/llmc: its sources with the CUDA 13 port, cudnn-frontend's
# headers, random-token shards; ignored by git, carried to the device).
# The build and the timing are apart so that run_all.sh can compile in the
# background while the GPU tests run (the compile needs no GPU), and time
# later with the GPU to itself. Flags, libraries and the run line are those
# of the prepare.sh folder's run.sh, at its best: -O3, fast math, cuDNN
# attention, no recompute, B 64 x T 1024 bf16, GPT-2 124M (d12) from random.
#
#   llmc_peer.sh build SRC BIN
#       builds BIN/train_gpt2cu (llm.c's own attention) and
#       BIN/train_gpt2cu_cudnn (cuDNN attention) in parallel; a binary
#       already in BIN is kept (a warm machine's earlier call built it)
#   llmc_peer.sh time SRC BIN cudnn|own STEPS --json FILE
#       runs STEPS steps and writes the tokens/s of steps 6.. to FILE
#
# Needs nvcc, and for cuDNN python3's nvidia-cudnn wheel (the device image's).
set -u -o pipefail
arch=${GPTX_GPU_ARCH:-90}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cudnn=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)/nvidia/cudnn
flags=(--threads=0 -t=0 --use_fast_math -std=c++17 -O3
       --generate-code "arch=compute_$arch,code=[compute_$arch,sm_$arch]" -DENABLE_BF16)
libs=(-lcublas -lcublasLt -lnvrtc -lcuda -L/usr/local/cuda/lib64/stubs -L/usr/local/nvidia/lib64
      -lnvidia-ml)

usage() {
    echo "usage: llmc_peer.sh build SRC BIN | time SRC BIN cudnn|own STEPS --json FILE" >&2
    exit 2
}

build() {
    local src=$1 bin=$2
    if [ ! -f "$src/train_gpt2.cu" ] || [ ! -d "$src/llmc" ] || [ ! -d "$src/cfe/include" ]; then
        echo "llmc_peer: $src is not a prepared llm.c folder (prepare.sh)"
        return 2
    fi
    mkdir -p "$bin"
    bin=$(cd "$bin" && pwd)
    cd "$src" || return 2
    local own=0 dnn=0 pid_own='' pid_att=''
    if [ -x "$bin/train_gpt2cu" ]; then
        echo "llmc_peer: $bin/train_gpt2cu already built"
    else
        "$nvcc" "${flags[@]}" train_gpt2.cu "${libs[@]}" -o "$bin/train_gpt2cu" &
        pid_own=$!
    fi
    if [ -x "$bin/train_gpt2cu_cudnn" ]; then
        echo "llmc_peer: $bin/train_gpt2cu_cudnn already built"
    else
        "$nvcc" -c "${flags[@]}" -DENABLE_CUDNN -Icfe/include -I"$cudnn/include" \
            llmc/cudnn_att.cpp -o "$bin/cudnn_att.o" &&
            "$nvcc" "${flags[@]}" -DENABLE_CUDNN -Icfe/include -I"$cudnn/include" train_gpt2.cu \
                "$bin/cudnn_att.o" -L"$cudnn/lib" -l:libcudnn.so.9 "${libs[@]}" \
                -o "$bin/train_gpt2cu_cudnn" &
        pid_att=$!
    fi
    [ -z "$pid_own" ] || wait "$pid_own" || own=$?
    [ -z "$pid_att" ] || wait "$pid_att" || dnn=$?
    echo "llmc_peer: build: own attention exit $own, cuDNN attention exit $dnn"
    [ $own = 0 ] && [ $dnn = 0 ]
}

# Steps 6.. of llm.c's "step k/n | ... | X ms | ... | Y tok/s" lines: tokens/s
# from their mean time (llm.c's own Y is an average over the steps so far,
# bias-corrected; the mean of those, prepare.sh's run.sh figure, is kept too).
summarize() { # LOG VARIANT STEPS JSON
    awk -v v="$2" -v steps="$3" '
        /^step/ { n++; ms = tok = "";
                  for (j = 2; j <= NF; j++) { if ($j == "ms") ms = $(j - 1); if ($j == "tok/s") tok = $(j - 1) }
                  if (n > 5 && ms != "" && tok != "") { s += tok; t += ms; k++ } }
        END { if (!k) exit 1
              printf "{\"implementation\": \"llm.c\", \"attention\": \"%s\", \"batch\": 64, \"seq\": 1024, " \
                     "\"precision\": \"bf16\", \"steps\": %d, \"steps_averaged\": %d, " \
                     "\"step_ms_mean\": %.3f, \"tokens_per_s\": %.1f, \"tokens_per_s_ema_mean\": %.1f}\n",
                     v, steps, k, t / k, 65536 * 1000 / (t / k), s / k }' "$1" >"$4"
}

timing() {
    local src=$1 bin=$2 variant=$3 steps=$4 json=$6 exe=train_gpt2cu
    [ "$variant" = cudnn ] && exe=train_gpt2cu_cudnn
    [ -x "$bin/$exe" ] || { echo "llmc_peer: $bin/$exe not built"; return 1; }
    bin=$(cd "$bin" && pwd)
    cd "$src" || return 2
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    local log
    log=$(mktemp)
    "$bin/$exe" -i train_000001.bin -j val_000000.bin -e d12 -b 64 -t 1024 -d 65536 -x "$steps" \
        -v 100000 -m 1 -s 0 -h 0 -r 0 >"$log" 2>&1
    local rc=$?
    grep -E "^step|total average|error|Error" "$log"
    if [ $rc != 0 ] || ! summarize "$log" "$variant" "$steps" "$json"; then
        echo "llmc_peer: $exe exit $rc, no step timings; its last lines:"
        tail -n 20 "$log"
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
    echo "llmc_peer: $(cat "$json")"
}

case ${1:-} in
build) [ $# = 3 ] || usage; build "$2" "$3" ;;
time)
    if [ $# != 7 ] || [ "$6" != --json ] || { [ "$4" != cudnn ] && [ "$4" != own ]; }; then usage; fi
    timing "$2" "$3" "$4" "$5" "$6" "$7" ;;
*) usage ;;
esac
