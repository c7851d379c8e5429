#!/usr/bin/env bash
# The one call a GPU session makes (docs/cuda.md, "Running on a GPU"): build,
# test and benchmark the CUDA backend on a fresh, bare machine in about six
# minutes, writing at most 8 files into $OUT.
#
#   bash tests/gpu/run_all.sh [--dry-run] [--budget SECONDS]
#
# The plan (seconds from the start; a group may use what the one before left,
# never more than up to its own end):
#   build  until 150  first the warp-level matrix instructions alone: nvcc
#                     compiles tests/gpu/test_mma_fragments.cu by itself and
#                     runs it, so a wrong fragment layout shows in seconds;
#                     then configure (Ninja, Release, CUDA on,
#                     GPTX_CUDA_ARCHITECTURES = $GPTX_GPU_ARCH, default 90; ptxas
#                     -v; NCCL from the system or python3's nvidia-nccl wheel,
#                     oneDNN from the system or build-gpu-deps/dnnl) and build
#                     only the GPU test binaries and the GPU programs
#   tests  until 270  each test binary once, directly, under its own timeout
#                     (60 s; the training comparison and the sampler 90 s): the
#                     tensor-core attention first, the one-rank NCCL smoke, the
#                     sampler equivalence test last
#   bench  until the  the attention microbenchmark (tensor-core vs CUDA-core
#          budget     kernels), compute-sanitizer racecheck on a tiny attention
#          (360)      shape (when the tool is there and accepts the device), the
#                     per-op profile of a GPT-2 124M step, gptx-bench-gpu bf16 at
#                     batch 64 with CUDA graphs off and on, the largest batch that
#                     fits, fp32 and tf32 at batch 64, PyTorch eager at batch 64;
#                     torch.compile only when 120 s are left
# A stage starts only with at least 10 s left in its group, and runs under
# min(its limit, the time left). A stage is PASSED, FAILED (exit code or
# timeout), SKIPPED (no device: the tests exit 77, and the benchmarks are then
# not run; torch.compile without its 120 s; racecheck without compute-sanitizer
# or refused by it) or NOT REACHED (time budget, not built, or what it needs
# failed).
#
# Files in $OUT (the device tool's output folder; $BUILD/out elsewhere):
#   summary.txt     first lines: the result, then what passed, failed, was not
#                   reached and skipped, whether the CUDA-bf16 vs CPU-bf16
#                   comparison ran, where NCCL and oneDNN came from; the stage
#                   table with times; figures
#   build.log       the fragment test's compile, configure and build output
#                   (ptxas -v for every kernel)
#   tests.log       every test's output, the fragment test and racecheck included
#   bench.log       ptxas lines of the attention kernels, then the attention
#                   benchmark, the op profile and gptx-bench-gpu output
#   torch.log       the PyTorch benchmark's output
#   bench.json      one JSON line per benchmark run
#   nvidia-smi.txt  nvidia-smi -q before, clocks and memory after the benchmarks
# summary.txt is rewritten after every stage, so a call cut short still says
# where it stopped.
#
# --dry-run: no build, no device. Every stage's command is recorded (with its
# timeout) in $BUILD/dry-run-plan.txt instead of run, and the clock is
# simulated: a stage takes its expected time, or what GPTX_GPU_DRY_SIM says:
# a comma-separated list of PATTERN=OUTCOME[:SECONDS] (first match wins;
# PATTERN a shell glob on the stage name; OUTCOME ok, fail, timeout, nodevice
# or exitN). The dry run's machine is the bare device image: no system NCCL or
# oneDNN, python3's NCCL wheel at its usual place, compute-sanitizer present
# (GPTX_GPU_SANITIZER names another program, to simulate its absence), and the
# packages in $GPTX_GPU_DEPS_DIR (default build-gpu-deps/) as carried.
# tests/gpu/test_run_all_dry.sh checks the plan that way.
#
# Exit status: 0 when every stage passed, 1 otherwise.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
root=$PWD

DRY=0
BUDGET=${GPTX_GPU_BUDGET_S:-360}
while [ $# -gt 0 ]; do
    case $1 in
    --dry-run) DRY=1 ;;
    --budget) BUDGET=$2; shift ;;
    *) echo "usage: tests/gpu/run_all.sh [--dry-run] [--budget SECONDS]" >&2; exit 2 ;;
    esac
    shift
done
BUILD=${GPTX_GPU_BUILD:-$root/build-gpu}
OUT=${OUT:-$BUILD/out}
JOBS=${GPTX_JOBS:-$(nproc 2>/dev/null || echo 8)}
DEPS_DIR=${GPTX_GPU_DEPS_DIR:-$root/build-gpu-deps}
export PYTHONUNBUFFERED=1 # the PyTorch benchmark's lines reach its log as they come
# the test programs link libgptx.a: they find the cuda module of this build here
export GPTX_MODULE_PATH=$BUILD
ARCH=${GPTX_GPU_ARCH:-90}
PLANFILE=$BUILD/dry-run-plan.txt
mkdir -p "$OUT" "$BUILD/json" "$BUILD/mma"
# a local rerun starts its logs afresh ($OUT is emptied before each device call)
(cd "$OUT" && rm -f summary.txt build.log tests.log bench.log torch.log bench.json nvidia-smi.txt)
[ $DRY = 1 ] && : >"$PLANFILE"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

# GPTX_GPU_TIME_SCALE (an integer, default 1) multiplies every limit and group
# end: for a machine slower than the H200's 16 cores (the build here, 2 cores)
SCALE=${GPTX_GPU_TIME_SCALE:-1}
BUDGET=$((BUDGET * SCALE))
BUILD_END=$((150 * SCALE))
TESTS_END=$((270 * SCALE))
MIN_STAGE=10    # a stage with less time left in its group is not started
COMPILE_MIN=120 # torch.compile starts only with this much left
KILL_AFTER=5    # SIGKILL this long after the limit's SIGTERM
RACE_EXIT=86    # compute-sanitizer's exit status when racecheck reports a hazard

# name | group | limit in s (0: what is left, optional) | expected s on an H200 | log
PLAN=(
    "mma_nvcc|build|60|4|build.log"
    "test_mma_fragments|build|30|2|tests.log"
    "configure|build|60|10|build.log"
    "build|build|150|25|build.log"
    "test_cuda_flash|tests|60|5|tests.log"
    "test_cuda_kernels|tests|60|8|tests.log"
    "test_cuda_model|tests|60|10|tests.log"
    "test_reference_cuda|tests|60|5|tests.log"
    "test_cuda_train|tests|90|10|tests.log"
    "test_cuda_pure|tests|60|8|tests.log"
    "test_cuda_graphs|tests|60|6|tests.log"
    "test_cuda_timer|tests|60|3|tests.log"
    "test_nccl_single|tests|60|6|tests.log"
    "test_sampler_device|tests|90|15|tests.log"
    "bench_attention|bench|45|8|bench.log"
    "racecheck_attention|bench|60|25|tests.log"
    "op_profile_bf16|bench|30|15|bench.log"
    "bench_bf16_b64|bench|60|12|bench.log"
    "bench_bf16_b64_graphs|bench|60|12|bench.log"
    "bench_bf16_largest|bench|90|30|bench.log"
    "bench_fp32_b64|bench|60|15|bench.log"
    "bench_tf32_b64|bench|45|12|bench.log"
    "torch_eager_b64|bench|60|25|torch.log"
    "torch_compile_b64|bench|0|100|torch.log"
)
NST=${#PLAN[@]}
declare -a S_NAME S_GROUP S_LIMIT S_EXPECT S_LOG S_STATUS S_TIME S_RUNLIMIT S_FIG
for ((i = 0; i < NST; i++)); do
    IFS='|' read -r "S_NAME[i]" "S_GROUP[i]" "S_LIMIT[i]" "S_EXPECT[i]" "S_LOG[i]" <<<"${PLAN[i]}"
    S_STATUS[i]=pending
    S_TIME[i]=
    S_RUNLIMIT[i]=
    S_FIG[i]=
done

T0=$SECONDS
VCLOCK=0
now() { if [ $DRY = 1 ]; then echo $VCLOCK; else echo $((SECONDS - T0)); fi; }
group_end() {
    case $1 in build) echo $BUILD_END ;; tests) echo $TESTS_END ;; *) echo "$BUDGET" ;; esac
}
NODEVICE=0
MACHINE=
NCCL_NOTE="not looked for yet"
DNNL_NOTE="not looked for yet"

# ---- the summary ----------------------------------------------------------------

list_of() { # STATUS-PREFIX: "name (detail), ..." of the stages whose status starts so
    local i out=
    for ((i = 0; i < NST; i++)); do
        case ${S_STATUS[i]} in
        "$1"*) out+="${out:+, }${S_NAME[i]}${S_STATUS[i]#"$1"}" ;;
        esac
    done
    echo "${out:-none}"
}

count_of() {
    local i n=0
    for ((i = 0; i < NST; i++)); do case ${S_STATUS[i]} in "$1"*) n=$((n + 1)) ;; esac; done
    echo $n
}

# The log lines of stage INDEX's last run (from its "=====" header on).
stage_log() {
    local name=${S_NAME[$1]} log=$OUT/${S_LOG[$1]}
    [ -f "$log" ] || return 0
    awk -v h="===== $name (limit" 'index($0, h) == 1 { keep = 1; buf = "" } keep { buf = buf $0 "\n" }
        END { printf "%s", buf }' "$log"
}

# Whether test_cuda_model compared the CUDA bf16 policy with the CPU's
# (compare_bf16_implementations prints one of two lines).
bf16_comparison() {
    local i out
    i=$(index_of test_cuda_model)
    case ${S_STATUS[i]} in
    PASSED | FAILED*) ;;
    pending) echo "not run yet"; return ;;
    *) echo "not run (test_cuda_model ${S_STATUS[i]})"; return ;;
    esac
    [ $DRY = 1 ] && { echo "(dry run; the build decides: oneDNN $DNNL_NOTE)"; return; }
    out=$(stage_log "$i")
    if grep -q 'bf16 policy: cuda vs cpu fp32' <<<"$out"; then
        echo "ran (test_cuda_model: 'bf16 policy: cuda vs cpu fp32 / cpu bf16 vs cpu fp32 / cuda vs cpu bf16' in tests.log)"
    elif grep -q 'no CPU bf16 policy in this build' <<<"$out"; then
        echo "not run: no CPU bf16 policy in this build (oneDNN $DNNL_NOTE)"
    else
        echo "not run: test_cuda_model stopped before it (see tests.log)"
    fi
}

write_summary() { # [final]
    local result nf nr np ns npend
    np=$(count_of PASSED)
    nf=$(count_of FAILED)
    nr=$(count_of "NOT REACHED")
    ns=$(count_of SKIPPED)
    npend=$(count_of pending)
    if [ -z "${1:-}" ] && [ "$npend" -gt 0 ]; then result="IN PROGRESS (or cut short)"
    elif [ "$nf" -gt 0 ]; then result=FAILED
    elif [ $NODEVICE = 1 ]; then result="NO DEVICE (the tests exited 77: no usable CUDA device; benchmarks not run)"
    elif [ "$nr" -gt 0 ]; then result=INCOMPLETE
    else result=PASSED; fi
    {
        echo "gptx GPU check: $result, $(now) s of the $BUDGET s budget"
        echo "passed ($np): $(list_of PASSED)"
        echo "failed ($nf): $(list_of FAILED)"
        echo "not reached ($nr): $(list_of "NOT REACHED")"
        echo "skipped ($ns): $(list_of SKIPPED)"
        [ "$npend" -gt 0 ] && echo "pending ($npend): $(list_of pending)"
        echo "CUDA bf16 vs CPU bf16 comparison: $(bf16_comparison)"
        echo "dependencies: NCCL $NCCL_NOTE; oneDNN $DNNL_NOTE"
        echo
        echo "plan: build until ${BUILD_END} s, tests until ${TESTS_END} s, bench until ${BUDGET} s" \
            "(groups ${BUILD_END} + $((TESTS_END - BUILD_END)) + $((BUDGET - TESTS_END)) s);" \
            "$JOBS jobs, CUDA architectures $ARCH$([ $DRY = 1 ] && echo ', DRY RUN')"
        printf '%-24s %-6s %6s %6s %6s  %s\n' stage group limit expect time result
        local i
        for ((i = 0; i < NST; i++)); do
            printf '%-24s %-6s %6s %6s %6s  %s\n' "${S_NAME[i]}" "${S_GROUP[i]}" \
                "${S_RUNLIMIT[i]:-${S_LIMIT[i]}}" "${S_EXPECT[i]}" "${S_TIME[i]:--}" "${S_STATUS[i]}"
        done
        echo
        echo "figures:"
        for ((i = 0; i < NST; i++)); do
            [ -n "${S_FIG[i]}" ] && printf '  %-24s %s\n' "${S_NAME[i]}" "${S_FIG[i]}"
        done
        [ -n "$MACHINE" ] && echo "machine: $MACHINE"
    } >"$OUT/summary.txt"
}

# ---- running a stage --------------------------------------------------------------

# The simulated outcome of stage $1 in a dry run: "OUTCOME SECONDS".
dry_outcome() {
    local name=$1 expect=$2 entry pat rest outcome secs
    local IFS=,
    for entry in ${GPTX_GPU_DRY_SIM:-}; do
        pat=${entry%%=*}
        rest=${entry#*=}
        # shellcheck disable=SC2053 # the pattern is a glob on purpose
        if [[ $name == $pat ]]; then
            outcome=${rest%%:*}
            secs=$expect
            [ "$rest" != "$outcome" ] && secs=${rest#*:}
            echo "$outcome $secs"
            return
        fi
    done
    echo "ok $expect"
}

# run_stage INDEX COMMAND...: under min(limit, time left in its group).
run_stage() {
    local i=$1
    shift
    local name=${S_NAME[i]} log=$OUT/${S_LOG[i]}
    local left=$(($(group_end "${S_GROUP[i]}") - $(now)))
    local limit=$((S_LIMIT[i] * SCALE))
    [ "$limit" = 0 ] && limit=$left
    [ "$limit" -gt $((left - KILL_AFTER)) ] && limit=$((left - KILL_AFTER))
    if [ "${S_LIMIT[i]}" = 0 ] && [ "$left" -lt $COMPILE_MIN ]; then # optional
        S_STATUS[i]="SKIPPED (optional, needs ${COMPILE_MIN} s: ${left} s left)"
        write_summary
        return 1
    fi
    if [ "$limit" -lt $MIN_STAGE ]; then
        S_STATUS[i]="NOT REACHED (time budget: ${left} s left)"
        write_summary
        return 1
    fi
    S_RUNLIMIT[i]=$limit
    echo "===== $name (limit ${limit} s, at $(now) s): $*" >>"$log"
    local start rc
    start=$(now)
    if [ $DRY = 1 ]; then
        echo "$name|${S_GROUP[i]}|$limit|timeout --kill-after=$KILL_AFTER $limit $*" >>"$PLANFILE"
        local outcome secs
        read -r outcome secs <<<"$(dry_outcome "$name" "${S_EXPECT[i]}")"
        [ "$secs" -gt "$limit" ] && outcome=timeout # would have been stopped
        case $outcome in
        ok) rc=0 ;;
        fail) rc=1 ;;
        nodevice) rc=77 ;;
        timeout) rc=124; secs=$limit ;;
        exit[0-9]*) rc=$((${outcome#exit})) ;;
        *) echo "GPTX_GPU_DRY_SIM: unknown outcome '$outcome'" >&2; rc=2 ;;
        esac
        VCLOCK=$((VCLOCK + secs))
        echo "(dry run: $outcome after $secs s)" >>"$log"
    else
        timeout --kill-after=$KILL_AFTER "$limit" "$@" >>"$log" 2>&1
        rc=$?
    fi
    S_TIME[i]=$(($(now) - start))
    if [ "$rc" -eq 0 ]; then S_STATUS[i]=PASSED
    elif { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "${S_LIMIT[i]}" = 0 ]; then
        S_STATUS[i]="SKIPPED (optional, stopped at the budget after ${limit} s)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then S_STATUS[i]="FAILED (timeout after ${limit} s)"
    elif [ "$rc" -eq 77 ]; then S_STATUS[i]="SKIPPED (exit 77: no device)"; NODEVICE=1
    else S_STATUS[i]="FAILED (exit $rc)"; fi
    echo "===== $name: ${S_STATUS[i]} in ${S_TIME[i]} s" >>"$log"
    write_summary
    return "$rc"
}

not_reached() { # INDEX REASON
    S_STATUS[$1]="NOT REACHED ($2)"
    write_summary
}

skipped() { # INDEX REASON
    S_STATUS[$1]="SKIPPED ($2)"
    write_summary
}

index_of() {
    local i
    for ((i = 0; i < NST; i++)); do [ "${S_NAME[i]}" = "$1" ] && { echo $i; return; }; done
    echo "run_all.sh: no stage $1" >&2
    exit 2
}

# ---- the machine and the build dependencies ----------------------------------------------

machine_info() {
    if [ $DRY = 1 ]; then
        MACHINE="(dry run)"
        echo "(dry run: nvidia-smi -q, nvcc --version, cmake --version)" >>"$OUT/nvidia-smi.txt"
        return
    fi
    local smi=nvidia-smi
    command -v nvidia-smi >/dev/null 2>&1 || smi=false
    {
        date -u +%FT%TZ
        $smi -q 2>&1 || echo "nvidia-smi: not available"
        "$NVCC" --version 2>&1 | tail -n 2
        cmake --version 2>&1 | head -n 1
        ninja --version 2>&1 | sed 's/^/ninja /'
        python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -n 1
        echo "compute-sanitizer: $(sanitizer_path || echo none)"
        echo "cores: $(nproc)"
    } >>"$OUT/nvidia-smi.txt"
    local gpu
    gpu=$($smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
    MACHINE="${gpu:-no nvidia-smi}, $(nproc) cores, nvcc $("$NVCC" --version 2>/dev/null |
        grep -o 'release [0-9.]*')"
}

# compute-sanitizer's path; fails when there is none. GPTX_GPU_SANITIZER
# names another program (a dry run assumes the tool is there).
sanitizer_path() {
    if [ -n "${GPTX_GPU_SANITIZER:-}" ]; then command -v "$GPTX_GPU_SANITIZER"; return; fi
    [ $DRY = 1 ] && { echo compute-sanitizer; return 0; }
    command -v compute-sanitizer && return 0
    local beside
    beside=$(dirname "$NVCC")/compute-sanitizer
    [ -x "$beside" ] && echo "$beside"
}

cmake_extra=()
deps_prefix=${GPTX_GPU_DEPS_PREFIX:-/opt/gptx-deps}
deps_lib=$deps_prefix/usr/lib/x86_64-linux-gnu

unpack_deb() { # DEB: into $deps_prefix
    if command -v dpkg-deb >/dev/null 2>&1; then
        dpkg-deb -x "$1" "$deps_prefix"
    else
        (cd "$(mktemp -d)" && ar x "$1" && tar -xf data.tar.* -C "$deps_prefix")
    fi
}

# Whether the dynamic loader finds library $1 (e.g. libgomp.so.1) by itself
# (a dry run's machine is bare: it does not).
loader_has() {
    [ $DRY = 1 ] && return 1
    if command -v ldconfig >/dev/null 2>&1; then
        ldconfig -p 2>/dev/null | grep -q "^[[:space:]]$1 ("
    else
        ls /usr/lib/x86_64-linux-gnu/"$1" /lib/x86_64-linux-gnu/"$1" /usr/lib64/"$1" >/dev/null 2>&1
    fi
}

# When the machine lacks OpenBLAS / jansson / PCRE2 / pkg-config, the .deb
# files of build-gpu-deps/ (tests/gpu/fetch_deps.sh; carry the folder) are
# unpacked into a private prefix and CMake and the loader pointed there.
setup_deps() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    if command -v pkg-config >/dev/null 2>&1; then
        pkg-config --exists jansson || missing+=(jansson)
        pkg-config --exists libpcre2-8 || missing+=(pcre2)
    fi
    local h found=
    for h in /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h /usr/include/x86_64-linux-gnu/cblas.h \
             /usr/include/cblas.h /usr/include/openblas/cblas.h; do
        [ -e "$h" ] && found=1
    done
    [ -n "$found" ] || missing+=(openblas)
    if [ ${#missing[@]} -eq 0 ] && [ -z "${GPTX_GPU_FORCE_DEPS:-}" ]; then
        echo "dependencies: from the system"
        return 0
    fi
    echo "dependencies missing on this machine: ${missing[*]:-none (forced)}"
    if ! ls "$DEPS_DIR"/*.deb >/dev/null 2>&1; then
        echo "no $DEPS_DIR/*.deb to unpack: run tests/gpu/fetch_deps.sh and carry build-gpu-deps"
        return 1
    fi
    mkdir -p "$deps_prefix"
    local deb
    for deb in "$DEPS_DIR"/*.deb; do unpack_deb "$deb" || return 1; done
    export PATH=$deps_prefix/usr/bin:$PATH
    export PKG_CONFIG_LIBDIR=$deps_lib/pkgconfig:$deps_prefix/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$deps_prefix
    export LD_LIBRARY_PATH=$deps_lib:$deps_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [ -e "$deps_prefix/usr/bin/pkg-config" ] || ln -sf pkgconf "$deps_prefix/usr/bin/pkg-config"
    cmake_extra+=(-DCMAKE_PREFIX_PATH="$deps_prefix/usr"
                  -DGPTX_CBLAS_INCLUDE_DIR="$deps_prefix/usr/include/x86_64-linux-gnu/openblas-pthread"
                  -DBLAS_LIBRARIES="$deps_lib/openblas-pthread/libopenblas.so")
    echo "dependencies: unpacked into $deps_prefix"
}

# oneDNN for the CPU backend's bf16 policy (test_cuda_model compares the CUDA
# bf16 policy with it): the system's, else build-gpu-deps/dnnl/*.deb unpacked
# (libOpenCL.so.1 and libgomp.so.1, which libdnnl.so.2 loads, only where the
# loader has none, or forced), else none (-DGPTX_DNNL=OFF: no comparison).
setup_dnnl() {
    if [ $DRY = 0 ] && [ -z "${GPTX_GPU_FORCE_DEPS:-}" ] &&
        [ -e /usr/include/oneapi/dnnl/dnnl.h ] && loader_has libdnnl.so; then
        DNNL_NOTE="from the system"
        cmake_extra+=(-DGPTX_DNNL=ON)
        return 0
    fi
    if ! ls "$DEPS_DIR"/dnnl/libdnnl2_*.deb "$DEPS_DIR"/dnnl/libdnnl-dev_*.deb >/dev/null 2>&1; then
        DNNL_NOTE="none (not on the machine, no $(basename "$DEPS_DIR")/dnnl/*.deb carried)"
        cmake_extra+=(-DGPTX_DNNL=OFF)
        return 0
    fi
    local deb pkg unpacked=()
    for deb in "$DEPS_DIR"/dnnl/*.deb; do
        pkg=$(basename "$deb")
        pkg=${pkg%%_*}
        case $pkg in
        ocl-icd-libopencl1) loader_has libOpenCL.so.1 && [ -z "${GPTX_GPU_FORCE_DEPS:-}" ] && continue ;;
        libgomp1) loader_has libgomp.so.1 && [ -z "${GPTX_GPU_FORCE_DEPS:-}" ] && continue ;;
        esac
        if [ $DRY = 0 ]; then
            mkdir -p "$deps_prefix" && unpack_deb "$deb" || return 1
        fi
        unpacked+=("$pkg")
    done
    cmake_extra+=(-DGPTX_DNNL=ON -DGPTX_DNNL_INCLUDE_DIR="$deps_prefix/usr/include"
                  -DGPTX_DNNL_LIBRARY="$deps_lib/libdnnl.so")
    case " ${unpacked[*]} " in
    *" libgomp1 "*) cmake_extra+=(-DGPTX_OPENMP_RUNTIME="$deps_lib/libgomp.so.1") ;;
    esac
    case ":${LD_LIBRARY_PATH:-}:" in
    *":$deps_lib:"*) ;;
    *) export LD_LIBRARY_PATH=$deps_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
    esac
    DNNL_NOTE="unpacked into $deps_prefix (${unpacked[*]})"
    echo "oneDNN: $DNNL_NOTE"
}

# A folder with include/nccl.h and lib*/libnccl.so*: prints "INCLUDE LIBRARY".
nccl_in() {
    local d=$1 l
    [ -e "$d/include/nccl.h" ] || return 1
    for l in "$d"/lib/libnccl.so.2 "$d"/lib/libnccl.so "$d"/lib64/libnccl.so.2 "$d"/lib64/libnccl.so \
             "$d"/lib/x86_64-linux-gnu/libnccl.so.2; do
        [ -e "$l" ] && { echo "$d/include $l"; return 0; }
    done
    return 1
}

# NCCL for the engine and its one-rank smoke: $GPTX_NCCL_ROOT, the CUDA
# toolkit's or the system's, else python3's wheel nvidia-nccl-cu13 (the device
# image's only NCCL: site-packages/nvidia/nccl/{include,lib}).
setup_nccl() {
    local found='' d py
    if [ $DRY = 1 ]; then
        d=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
        found="$d/include $d/lib/libnccl.so.2"
    else
        py=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
        for d in "${GPTX_NCCL_ROOT:-}" "$(dirname "$(dirname "$NVCC")")" /usr \
                 ${py:+"$py/nvidia/nccl"}; do
            [ -n "$d" ] && found=$(nccl_in "$d") && break
        done
    fi
    if [ -z "$found" ]; then
        NCCL_NOTE="none (no nccl.h with libnccl: test_nccl_single not built)"
        cmake_extra+=(-DGPTX_NCCL=OFF)
        return 0
    fi
    local inc=${found% *} lib=${found#* }
    cmake_extra+=(-DGPTX_NCCL=ON -DGPTX_NCCL_INCLUDE_DIR="$inc" -DGPTX_NCCL_LIBRARY="$lib")
    LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    NCCL_NOTE="$lib"
    echo "NCCL: $inc, $lib"
}

# ---- the stages ------------------------------------------------------------------------

TEST_BINS=(test_cuda_flash test_cuda_kernels test_cuda_model test_reference_cuda test_cuda_train
           test_cuda_pure test_cuda_graphs test_cuda_timer test_nccl_single test_sampler_device)
PROGRAMS=(gptx-bench-gpu gptx-bench-attention gptx-op-profile)
FIXTURES=(tests/reference/fixtures/odd_tied_bias.gptxfix tests/reference/fixtures/untied_nobias.gptxfix
          tests/reference/fixtures/padded_unmasked_untied.gptxfix)
BENCH=$BUILD/bench/gpu/gptx-bench-gpu
ATTN=$BUILD/bench/gpu/gptx-bench-attention
OP_PROFILE=$BUILD/bench/gptx-op-profile
MMA_BIN=$BUILD/mma/test_mma_fragments

test_bin() { # NAME: where the build puts test NAME
    case $1 in test_nccl_single) echo "$BUILD/tests/comm/$1" ;; *) echo "$BUILD/tests/gpu/$1" ;; esac
}

# The warp-level matrix instructions before anything else: test_mma_fragments.cu
# compiled alone (only the headers of cuda_mma.h and cuda_internal.h: include/,
# backends/cuda, lib/*, backends/common) and run, so a wrong fragment layout
# table fails within seconds, whatever happens to the build.
do_mma() {
    local inc=(-I"$root/include" -I"$root/backends/cuda" -I"$root/backends/common") d
    for d in "$root"/lib/*/; do inc+=(-I"${d%/}"); done
    rm -f "$MMA_BIN"
    run_stage "$(index_of mma_nvcc)" "$NVCC" -O2 -std=c++17 -arch=sm_"$ARCH" "${inc[@]}" \
        "$root/tests/gpu/test_mma_fragments.cu" -o "$MMA_BIN" -cudart static || {
        not_reached "$(index_of test_mma_fragments)" "nvcc failed: see build.log"
        return 0
    }
    local i
    i=$(index_of test_mma_fragments)
    run_stage "$i" "$MMA_BIN"
    S_FIG[i]=$(stage_log "$i" | grep -m 1 '^test_mma_fragments:')
    write_summary
}

# The targets of the wanted list that this configured build has (one not in
# this tree, like gptx-op-profile before it is merged, would stop Ninja).
existing_targets() {
    if [ $DRY = 1 ]; then printf '%s\n' "$@"; return; fi
    local help t
    help=$(cmake --build "$BUILD" --target help 2>/dev/null)
    for t in "$@"; do
        grep -qE "(^|[ .]+)$t(: |$)" <<<"$help" && echo "$t"
    done
}

do_build() {
    local gen=(-G Ninja)
    if [ $DRY = 0 ] && ! command -v ninja >/dev/null 2>&1; then
        gen=(-G "Unix Makefiles")
        echo "ninja not found: Unix Makefiles" >>"$OUT/build.log"
    fi
    if [ $DRY = 0 ] && ! setup_deps >>"$OUT/build.log" 2>&1; then
        not_reached "$(index_of configure)" "build dependencies missing: see build.log"
        not_reached "$(index_of build)" "no configure"
        return 1
    fi
    setup_dnnl >>"$OUT/build.log" 2>&1 || DNNL_NOTE="unpacking build-gpu-deps/dnnl failed"
    setup_nccl >>"$OUT/build.log" 2>&1
    local hook=()
    grep -q 'add_subdirectory(gpu)' tests/CMakeLists.txt 2>/dev/null ||
        hook=(-DCMAKE_PROJECT_INCLUDE="$root/tests/gpu/cmake_hook.cmake")
    run_stage "$(index_of configure)" cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DGPTX_CUDA=ON -DGPTX_CUDA_ARCHITECTURES="$ARCH" -DGPTX_CUDA_PTXAS_VERBOSE=ON -DGPTX_MPI=OFF \
        -DGPTX_BUILD_EXAMPLES=OFF -DGPTX_BUILD_TESTS=ON "${hook[@]}" "${cmake_extra[@]}" || {
        not_reached "$(index_of build)" "configure failed"
        return 1
    }
    local targets
    mapfile -t targets < <(existing_targets "${TEST_BINS[@]}" "${PROGRAMS[@]}")
    # keep going past a failing target: every test that builds still runs
    local keep=(-- -k 0)
    [ "${gen[1]}" = Ninja ] || keep=(-- -k)
    run_stage "$(index_of build)" cmake --build "$BUILD" -j"$JOBS" --target gptx_cuda \
        "${targets[@]}" "${keep[@]}"
    ptxas_lines >>"$OUT/bench.log"
    return 0 # what did build runs (a missing binary is "not built")
}

# ptxas's report (registers, spills) of the attention kernels, the tensor-core
# ones (k_flash_*) included, from the build log
ptxas_lines() {
    echo "===== ptxas -v, attention kernels (sm_$ARCH), from build.log"
    awk '/Compiling entry function/ { show = ($0 ~ /attention|flash/) ? 4 : 0 } show > 0 { print; show-- }' \
        "$OUT/build.log" | if command -v c++filt >/dev/null 2>&1; then c++filt; else cat; fi
}

do_tests() {
    local t i bin args
    for t in "${TEST_BINS[@]}"; do
        i=$(index_of "$t")
        bin=$(test_bin "$t")
        if [ $DRY = 0 ] && [ ! -x "$bin" ]; then
            case $t in
            test_nccl_single) not_reached "$i" "not built: NCCL $NCCL_NOTE" ;;
            *) not_reached "$i" "not built" ;;
            esac
            continue
        fi
        args=()
        case $t in
        test_reference_cuda) args=(--precision all "${FIXTURES[@]}") ;;
        test_cuda_train) args=(--steps 50) ;;
        esac
        run_stage "$i" "$bin" "${args[@]}"
        S_FIG[i]=$(tail -n 2 "$OUT/tests.log" | head -n 1) # its last line of output
    done
    write_summary
}

# device_stage_ready INDEX PROGRAM: 0 when the stage may run (a device, the
# program built), else marks it SKIPPED or NOT REACHED
device_stage_ready() {
    if [ $NODEVICE = 1 ]; then
        skipped "$1" "no device"
        return 1
    fi
    if [ $DRY = 0 ] && [ ! -x "$2" ] && ! command -v "$2" >/dev/null 2>&1; then
        not_reached "$1" "$(basename "$2") not built"
        return 1
    fi
    return 0
}

# bench_stage NAME COMMAND...: one benchmark run (gptx-bench-gpu, the
# attention benchmark or the PyTorch twin, all take --json FILE), its JSON
# line and figures kept
bench_stage() {
    local name=$1 i
    shift
    i=$(index_of "$name")
    device_stage_ready "$i" "$1" || return 0
    local json=$BUILD/json/$name.json
    rm -f "$json"
    run_stage "$i" "$@" --json "$json"
    keep_figures "$i" "$json"
}

keep_figures() { # INDEX JSON
    local i=$1 json=$2
    if [ -s "$json" ]; then
        echo "{\"stage\": \"${S_NAME[i]}\", \"result\": $(tr -d '\n' <"$json")}" >>"$OUT/bench.json"
        S_FIG[i]=$(python3 - "$json" 2>/dev/null <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("bench") == "attention":
    t, c = r["tensor_cores"], r["cuda_cores"]
    print(f"TFLOP/s fwd/bwd: tensor cores {t['forward_tflops']:.1f}/{t['backward_tflops']:.1f}, "
          f"CUDA cores {c['forward_tflops']:.1f}/{c['backward_tflops']:.1f}; speed-up "
          f"{r['speedup_forward']:.1f}x/{r['speedup_backward']:.1f}x")
else:
    print(f"batch {r['batch']}: {r['tokens_per_s']:.0f} tok/s, MFU {100 * r['mfu']:.1f} %, "
          f"median {r['step_median_s'] * 1e3:.1f} ms/step, cold step {r['cold_step_s']:.2f} s")
EOF
        )
    fi
    write_summary
}

# compute-sanitizer's racecheck (shared-memory hazards) on both attention
# kernel sets at a tiny shape: a hazard fails the stage (--error-exitcode);
# no tool, or a tool that refuses the device (gVisor: "Device not supported"),
# skips it without failing.
racecheck_stage() {
    local i san rc nodevice=$NODEVICE
    i=$(index_of racecheck_attention)
    device_stage_ready "$i" "$ATTN" || return 0
    if ! san=$(sanitizer_path); then
        skipped "$i" "compute-sanitizer is not on this machine"
        return 0
    fi
    run_stage "$i" "$san" --tool racecheck --error-exitcode $RACE_EXIT --print-limit 20 "$ATTN" \
        --batch 1 --heads 2 --seq 130 --head-size 64 --warmup 0 --iters 1
    rc=$?
    if [ $rc = 77 ] || stage_log "$i" | grep -q 'Device not supported'; then
        NODEVICE=$nodevice # the device is there: the sanitizer did not take it
        skipped "$i" "compute-sanitizer refused the device: see tests.log"
    elif [ $rc = $RACE_EXIT ]; then
        S_STATUS[i]="FAILED (exit $RACE_EXIT: racecheck reported a hazard, see tests.log)"
        write_summary
    fi
    S_FIG[i]=$(stage_log "$i" | grep -m 1 'RACECHECK SUMMARY')
    write_summary
}

# the per-op profile of a GPT-2 124M training step (bf16, the preset's batch)
profile_stage() {
    local i
    i=$(index_of op_profile_bf16)
    device_stage_ready "$i" "$OP_PROFILE" || return 0
    run_stage "$i" "$OP_PROFILE" --backend cuda --config gpt2-124M --precision bf16 --warmup 2 \
        --steps 3
    S_FIG[i]=$(stage_log "$i" | grep -m 1 '^step:' | cut -c 1-100)
    write_summary
}

do_bench() {
    local torch=(python3 bench/gpu/torch_gpu_bench.py)
    bench_stage bench_attention "$ATTN" --batch 8 --heads 12 --seq 1024 --head-size 64 --warmup 3 \
        --iters 20
    racecheck_stage
    profile_stage
    bench_stage bench_bf16_b64 "$BENCH" --precision bf16 --batch 64 --warmup 2 --steps 5
    bench_stage bench_bf16_b64_graphs "$BENCH" --precision bf16 --batch 64 --graphs 1 --warmup 2 \
        --steps 5
    bench_stage bench_bf16_largest "$BENCH" --precision bf16 --max-batch 512 --warmup 1 --steps 2
    bench_stage bench_fp32_b64 "$BENCH" --precision fp32 --batch 64 --warmup 1 --steps 3
    bench_stage bench_tf32_b64 "$BENCH" --precision tf32 --batch 64 --warmup 1 --steps 3
    bench_stage torch_eager_b64 "${torch[@]}" --batch 64 --no-compile --warmup 2 --steps 5
    bench_stage torch_compile_b64 "${torch[@]}" --batch 64 --warmup 2 --steps 5
    if [ $DRY = 0 ] && [ $NODEVICE = 0 ]; then
        {
            echo "===== after the benchmarks"
            nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
                --format=csv 2>&1 || true
        } >>"$OUT/nvidia-smi.txt"
    fi
}

machine_info
write_summary
do_mma
do_build && do_tests
for ((i = 0; i < NST; i++)); do # what the build's failure left behind
    case ${S_NAME[i]} in test_*) [ "${S_STATUS[i]}" = pending ] && not_reached "$i" "no build" ;; esac
done
do_bench
write_summary final
head -n 7 "$OUT/summary.txt"
case $(head -n 1 "$OUT/summary.txt") in *": PASSED,"*) exit 0 ;; *) exit 1 ;; esac
