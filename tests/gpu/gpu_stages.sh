# shellcheck shell=bash
# The machinery of a device call, sourced by tests/gpu/run_all.sh (the final
# call) and tests/gpu/profile_call.sh (the profiling call): their flags and
# folders, stages run under a clock with group deadlines, a summary rewritten
# after every stage, the dry run's simulated clock and plan, and the build
# (dependencies, configure, targets). See run_all.sh's header for the rules a
# stage follows.
#
# A call script sets root (the repository), sources this file, calls
# call_setup, sets GROUP_ENDS (an array "name:seconds", the last group ending
# at BUDGET), LAST_GROUP, SUMMARY_TITLE and PLAN (an array of
# "name|group|limit|expect|log[|flags]": limit in s, 0 = what is left in the
# group; expect: s on an H200, the dry run's time; flags: "opt" (run only
# when 1.5 x expect is left, else SKIPPED), "bg" (started in the background by
# bg_start, waited for by bg_wait)), then calls stages_init. It defines
# summary_extra (lines after the fifth of the summary) and may define
# summary_tail (lines after the figures) and figures_changed (called when a
# benchmark has left its JSON).

MIN_STAGE=10 # a stage with less time left in its group is not started
KILL_AFTER=5 # SIGKILL this long after the limit's SIGTERM
NODEVICE=0
MACHINE=
NCCL_NOTE="not looked for yet"
DNNL_NOTE="not looked for yet"

# call_setup SCRIPT DEFAULT_BUDGET LOGFILE... -- ARGS...: the call's flags
# (--dry-run, --budget SECONDS) and folders; the LOGFILEs of an earlier run
# in $OUT and every benchmark JSON of an earlier call on this machine removed,
# so no figure of it reaches this summary.
# shellcheck disable=SC2034 # BENCH, ATTN, BANDWIDTH: the callers' stages run them
call_setup() {
    local script=$1 logs=()
    BUDGET=${GPTX_GPU_BUDGET_S:-$2}
    shift 2
    while [ "$1" != -- ]; do logs+=("$1"); shift; done
    shift
    DRY=0
    while [ $# -gt 0 ]; do
        case $1 in
        --dry-run) DRY=1 ;;
        --budget) BUDGET=$2; shift ;;
        *) echo "usage: $script [--dry-run] [--budget SECONDS]" >&2; exit 2 ;;
        esac
        shift
    done
    BUILD=${GPTX_GPU_BUILD:-$root/build-gpu}
    OUT=${OUT:-$BUILD/out}
    JOBS=${GPTX_JOBS:-$(nproc 2>/dev/null || echo 8)}
    DEPS_DIR=${GPTX_GPU_DEPS_DIR:-$root/build-gpu-deps}
    # the test programs link libgptx.a: they find the cuda module of this build here
    export GPTX_MODULE_PATH=$BUILD
    ARCH=${GPTX_GPU_ARCH:-90}
    PLANFILE=$BUILD/dry-run-plan.txt
    NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    # GPTX_GPU_TIME_SCALE (an integer, default 1) multiplies every limit and
    # group end: for a machine slower than the H200's 16 cores (2 cores here: 8)
    SCALE=${GPTX_GPU_TIME_SCALE:-1}
    BUDGET=$((BUDGET * SCALE))
    # the programs both calls run
    BENCH=$BUILD/bench/gpu/gptx-bench-gpu
    ATTN=$BUILD/bench/gpu/gptx-bench-attention
    BANDWIDTH=$BUILD/bench/gpu/gptx-bench-bandwidth
    OP_PROFILE=$BUILD/bench/gptx-op-profile
    mkdir -p "$OUT" "$BUILD/json"
    (cd "$OUT" && rm -f "${logs[@]}")
    rm -f "$BUILD"/json/*.json
    if [ "$DRY" = 1 ]; then : >"$PLANFILE"; fi
}

# stages_init: the stage table from PLAN, the clock started
stages_init() {
    : "${SUMMARY_TITLE:?}" "${GROUP_ENDS[0]:?}"
    NST=${#PLAN[@]}
    local i
    for ((i = 0; i < NST; i++)); do
        IFS='|' read -r "S_NAME[i]" "S_GROUP[i]" "S_LIMIT[i]" "S_EXPECT[i]" "S_LOG[i]" "S_FLAGS[i]" \
            <<<"${PLAN[i]}"
        S_STATUS[i]=pending
        S_TIME[i]=
        S_RUNLIMIT[i]=
        S_FIG[i]=
    done
    T0=$SECONDS
    VCLOCK=0
}
declare -a S_NAME S_GROUP S_LIMIT S_EXPECT S_LOG S_FLAGS S_STATUS S_TIME S_RUNLIMIT S_FIG
declare -a BG_PID BG_START BG_SIM

now() { if [ "$DRY" = 1 ]; then echo "$VCLOCK"; else echo $((SECONDS - T0)); fi; }
group_end() {
    local g
    for g in "${GROUP_ENDS[@]}"; do
        [ "${g%%:*}" = "$1" ] && { echo $((${g#*:} * SCALE)); return; }
    done
    echo "$BUDGET"
}

index_of() {
    local i
    for ((i = 0; i < NST; i++)); do [ "${S_NAME[i]}" = "$1" ] && { echo $i; return; }; done
    echo "gpu_stages: no stage $1" >&2
    exit 2
}

has_flag() { case ",${S_FLAGS[$1]}," in *",$2,"*) return 0 ;; esac; return 1; }

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

# "plan: ..." line: each group's end and length
plan_line() {
    local g out=
    for g in "${GROUP_ENDS[@]}"; do out+="${out:+, }${g%%:*} until $((${g#*:} * SCALE)) s"; done
    echo "plan: $out, ${LAST_GROUP:-bench} until $BUDGET s (groups $(group_lengths) s);" \
        "$JOBS jobs, CUDA architectures $ARCH$([ "$DRY" = 1 ] && echo ', DRY RUN')"
}

group_lengths() {
    local g prev=0 end out=
    for g in "${GROUP_ENDS[@]}"; do
        end=$((${g#*:} * SCALE))
        out+="${out:+ + }$((end - prev))"
        prev=$end
    done
    echo "$out + $((BUDGET - prev))"
}

# the summary as it stands; write_final_summary: the call is over (no stage
# is in progress, whatever is still pending)
write_final_summary() {
    SUMMARY_FINAL=1
    write_summary
}

write_summary() {
    local result nf nr np ns npend
    np=$(count_of PASSED)
    nf=$(count_of FAILED)
    nr=$(count_of "NOT REACHED")
    ns=$(count_of SKIPPED)
    npend=$(count_of pending)
    if [ -z "${SUMMARY_FINAL:-}" ] && [ "$npend" -gt 0 ]; then result="IN PROGRESS (or cut short)"
    elif [ "$nf" -gt 0 ]; then result=FAILED
    elif [ $NODEVICE = 1 ]; then result="NO DEVICE (the tests exited 77: no usable CUDA device; benchmarks not run)"
    elif [ "$nr" -gt 0 ]; then result=INCOMPLETE
    else result=PASSED; fi
    {
        echo "$SUMMARY_TITLE: $result, $(now) s of the $BUDGET s budget"
        echo "passed ($np): $(list_of PASSED)"
        echo "failed ($nf): $(list_of FAILED)"
        echo "not reached ($nr): $(list_of "NOT REACHED")"
        echo "skipped ($ns): $(list_of SKIPPED)"
        [ "$npend" -gt 0 ] && echo "pending ($npend): $(list_of pending)"
        summary_extra
        echo
        plan_line
        printf '%-26s %-6s %6s %6s %6s  %s\n' stage group limit expect time result
        local i
        for ((i = 0; i < NST; i++)); do
            printf '%-26s %-6s %6s %6s %6s  %s\n' "${S_NAME[i]}" "${S_GROUP[i]}" \
                "${S_RUNLIMIT[i]:-${S_LIMIT[i]}}" "${S_EXPECT[i]}" "${S_TIME[i]:--}" "${S_STATUS[i]}"
        done
        echo
        echo "figures:"
        for ((i = 0; i < NST; i++)); do
            [ -n "${S_FIG[i]}" ] && printf '  %-26s %s\n' "${S_NAME[i]}" "${S_FIG[i]}"
        done
        [ -n "$MACHINE" ] && echo "machine: $MACHINE"
        if declare -F summary_tail >/dev/null; then summary_tail; fi
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

# The exit status a simulated OUTCOME gives.
dry_rc() {
    case $1 in
    ok) echo 0 ;;
    fail) echo 1 ;;
    nodevice) echo 77 ;;
    timeout) echo 124 ;;
    exit[0-9]*) echo $((${1#exit})) ;;
    *) echo "GPTX_GPU_DRY_SIM: unknown outcome '$1'" >&2; echo 2 ;;
    esac
}

# stage_limit INDEX: the limit stage INDEX runs under (min(its own, the time
# left in its group - KILL_AFTER)), or why it does not start (status text,
# returns 1).
stage_limit() {
    local i=$1 left limit need
    left=$(($(group_end "${S_GROUP[i]}") - $(now)))
    limit=$((S_LIMIT[i] * SCALE))
    [ "$limit" = 0 ] && limit=$left
    [ "$limit" -gt $((left - KILL_AFTER)) ] && limit=$((left - KILL_AFTER))
    if has_flag "$i" opt || [ "${S_LIMIT[i]}" = 0 ]; then
        need=$((S_EXPECT[i] * 3 * SCALE / 2))
        [ "${S_LIMIT[i]}" = 0 ] && need=$((OPTIONAL_MIN * SCALE))
        if [ "$left" -lt "$need" ]; then
            echo "SKIPPED (optional, needs ${need} s: ${left} s left)"
            return 1
        fi
    fi
    if [ "$limit" -lt $MIN_STAGE ]; then
        echo "NOT REACHED (time budget: ${left} s left)"
        return 1
    fi
    echo "$limit"
}
OPTIONAL_MIN=${OPTIONAL_MIN:-120}

# The status of stage INDEX after exit status RC under LIMIT.
stage_result() {
    local i=$1 rc=$2 limit=$3
    if [ "$rc" -eq 0 ]; then S_STATUS[i]=PASSED
    elif { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && { has_flag "$i" opt || [ "${S_LIMIT[i]}" = 0 ]; }; then
        S_STATUS[i]="SKIPPED (optional, stopped at the budget after ${limit} s)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then S_STATUS[i]="FAILED (timeout after ${limit} s)"
    elif [ "$rc" -eq 77 ]; then S_STATUS[i]="SKIPPED (exit 77: no device)"; NODEVICE=1
    else S_STATUS[i]="FAILED (exit $rc)"; fi
    echo "===== ${S_NAME[i]}: ${S_STATUS[i]} in ${S_TIME[i]} s" >>"$OUT/${S_LOG[i]}"
    write_summary
}

# run_stage INDEX COMMAND...: under min(limit, time left in its group).
run_stage() {
    local i=$1
    shift
    local name=${S_NAME[i]} log=$OUT/${S_LOG[i]} limit
    if ! limit=$(stage_limit "$i"); then
        S_STATUS[i]=$limit
        write_summary
        return 1
    fi
    S_RUNLIMIT[i]=$limit
    echo "===== $name (limit ${limit} s, at $(now) s): $*" >>"$log"
    local start rc
    start=$(now)
    if [ "$DRY" = 1 ]; then
        echo "$name|${S_GROUP[i]}|$limit|timeout --kill-after=$KILL_AFTER $limit $*" >>"$PLANFILE"
        local outcome secs
        read -r outcome secs <<<"$(dry_outcome "$name" "${S_EXPECT[i]}")"
        [ "$secs" -gt "$limit" ] && outcome=timeout # would have been stopped
        rc=$(dry_rc "$outcome")
        [ "$rc" = 124 ] && secs=$limit
        VCLOCK=$((VCLOCK + secs))
        echo "(dry run: $outcome after $secs s)" >>"$log"
    else
        timeout --kill-after=$KILL_AFTER "$limit" "$@" >>"$log" 2>&1
        rc=$?
    fi
    S_TIME[i]=$(($(now) - start))
    stage_result "$i" "$rc" "$limit"
    return "$rc"
}

# bg_start INDEX COMMAND...: stage INDEX started in the background under its
# own limit (it may outlive its group, never the budget), its output kept
# aside until bg_wait.
bg_start() {
    local i=$1
    shift
    local name=${S_NAME[i]} limit=$((S_LIMIT[i] * SCALE)) left=$((BUDGET - $(now)))
    [ "$limit" -gt $((left - KILL_AFTER)) ] && limit=$((left - KILL_AFTER))
    if [ "$limit" -lt $MIN_STAGE ]; then
        not_reached "$i" "time budget: ${left} s left"
        return 1
    fi
    S_RUNLIMIT[i]=$limit
    BG_START[i]=$(now)
    echo "===== $name (limit ${limit} s, at $(now) s, in the background): $*" >>"$OUT/${S_LOG[i]}"
    if [ "$DRY" = 1 ]; then
        echo "$name|${S_GROUP[i]}|$limit|timeout --kill-after=$KILL_AFTER $limit $* (background)" \
            >>"$PLANFILE"
        BG_SIM[i]=$(dry_outcome "$name" "${S_EXPECT[i]}")
        return 0
    fi
    rm -f "$BUILD/$name.bgend"
    # its exit status and end (a subshell's SECONDS runs on from the caller's)
    (
        timeout --kill-after=$KILL_AFTER "$limit" "$@" >"$BUILD/$name.bglog" 2>&1
        echo "$? $SECONDS" >"$BUILD/$name.bgend"
    ) &
    BG_PID[i]=$!
}

# bg_wait INDEX: waits for stage INDEX's background run (if it was started)
# and records its result; returns its exit status.
bg_wait() {
    local i=$1 rc outcome secs end
    [ -n "${BG_START[i]:-}" ] || return 1
    [ "${S_STATUS[i]}" = pending ] || { [ "${S_STATUS[i]}" = PASSED ]; return; }
    if [ "$DRY" = 1 ]; then
        read -r outcome secs <<<"${BG_SIM[i]}"
        [ "$secs" -gt "${S_RUNLIMIT[i]}" ] && outcome=timeout
        rc=$(dry_rc "$outcome")
        [ "$rc" = 124 ] && secs=${S_RUNLIMIT[i]}
        [ $((BG_START[i] + secs)) -gt "$VCLOCK" ] && VCLOCK=$((BG_START[i] + secs))
        echo "(dry run: $outcome after $secs s)" >>"$OUT/${S_LOG[i]}"
    else
        wait "${BG_PID[i]}"
        read -r rc end <"$BUILD/${S_NAME[i]}.bgend" || { rc=1; end=$SECONDS; }
        secs=$((end - T0 - BG_START[i]))
        cat "$BUILD/${S_NAME[i]}.bglog" >>"$OUT/${S_LOG[i]}"
    fi
    S_TIME[i]=$secs
    stage_result "$i" "$rc" "${S_RUNLIMIT[i]}"
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

# device_stage_ready INDEX PROGRAM: 0 when the stage may run (a device, the
# program built), else marks it SKIPPED or NOT REACHED
device_stage_ready() {
    if [ $NODEVICE = 1 ]; then
        skipped "$1" "no device"
        return 1
    fi
    if [ "$DRY" = 0 ] && [ ! -x "$2" ] && ! command -v "$2" >/dev/null 2>&1; then
        not_reached "$1" "$(basename "$2") not built"
        return 1
    fi
    return 0
}

# the per-op profile of a GPT-2 124M training step (bf16) at batch B
profile_stage() { # NAME B
    local i
    i=$(index_of "$1")
    device_stage_ready "$i" "$OP_PROFILE" || return 0
    run_stage "$i" "$OP_PROFILE" --backend cuda --config gpt2-124M --precision bf16 --batch "$2" \
        --warmup 2 --steps 3
    S_FIG[i]=$(stage_log "$i" | grep -m 1 '^step:' | cut -c 1-100)
    write_summary
}

# ---- figures from the benchmarks' JSON ------------------------------------------------

# bench_stage NAME COMMAND...: one benchmark run (every benchmark program
# takes --json FILE), its JSON line and figures kept
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
        S_FIG[i]=$(python3 "$root/tests/gpu/bench_figures.py" figure "$json" 2>/dev/null)
        if declare -F figures_changed >/dev/null; then figures_changed; fi
    fi
    write_summary
}

# ---- the machine and the build dependencies ----------------------------------------------

machine_info() {
    if [ "$DRY" = 1 ]; then
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
        echo "ncu: $(ncu_path || echo none)"
        echo "cores: $(nproc)"
    } >>"$OUT/nvidia-smi.txt"
    local gpu
    gpu=$($smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
    MACHINE="${gpu:-no nvidia-smi}, $(nproc) cores, nvcc $("$NVCC" --version 2>/dev/null |
        grep -o 'release [0-9.]*')"
}

# After the benchmarks: the clocks and memory as they left them.
machine_after() {
    if [ "$DRY" = 0 ] && [ $NODEVICE = 0 ]; then
        {
            echo "===== after the benchmarks"
            nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
                --format=csv 2>&1 || true
        } >>"$OUT/nvidia-smi.txt"
    fi
}

# tool_path NAME OVERRIDE: the NVIDIA tool's path (on PATH, beside nvcc, or
# under /opt/nvidia for Nsight Compute); fails when there is none. OVERRIDE
# names another program (a dry run assumes the tool is there).
tool_path() {
    if [ -n "$2" ]; then command -v "$2"; return; fi
    [ "$DRY" = 1 ] && { echo "$1"; return 0; }
    command -v "$1" && return 0
    local p
    for p in "$(dirname "$NVCC")/$1" /opt/nvidia/nsight-compute/*/"$1"; do
        [ -x "$p" ] && { echo "$p"; return 0; }
    done
    return 1
}
sanitizer_path() { tool_path compute-sanitizer "${GPTX_GPU_SANITIZER:-}"; }
ncu_path() { tool_path ncu "${GPTX_GPU_NCU:-}"; }

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
    [ "$DRY" = 1 ] && return 1
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
    if [ "$DRY" = 0 ] && [ -z "${GPTX_GPU_FORCE_DEPS:-}" ] &&
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
        if [ "$DRY" = 0 ]; then
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
# shellcheck disable=SC2034 # NCCL_NOTE: the callers' summaries print it
setup_nccl() {
    local found='' d py
    if [ "$DRY" = 1 ]; then
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

# ---- the build ------------------------------------------------------------------------

# The targets of the wanted list that this configured build has (one not in
# this tree would stop Ninja).
existing_targets() {
    if [ "$DRY" = 1 ]; then printf '%s\n' "$@"; return; fi
    local help t
    help=$(cmake --build "$BUILD" --target help 2>/dev/null)
    for t in "$@"; do
        grep -qE "(^|[ .]+)$t(: |$)" <<<"$help" && echo "$t"
    done
}

# do_build TARGET...: the dependencies, then the stages configure and build
# (of the targets this tree has, gptx_cuda first; -k 0: what builds still
# runs). Both calls configure build-gpu/ alike, so a call on a machine the
# other left warm rebuilds nothing it built.
GEN=(-G Ninja)
do_build() {
    if [ "$DRY" = 0 ] && ! command -v ninja >/dev/null 2>&1; then
        GEN=(-G "Unix Makefiles")
        echo "ninja not found: Unix Makefiles" >>"$OUT/build.log"
    fi
    if [ "$DRY" = 0 ] && ! setup_deps >>"$OUT/build.log" 2>&1; then
        not_reached "$(index_of configure)" "build dependencies missing: see build.log"
        not_reached "$(index_of build)" "no configure"
        return 1
    fi
    setup_dnnl >>"$OUT/build.log" 2>&1 || DNNL_NOTE="unpacking build-gpu-deps/dnnl failed"
    setup_nccl >>"$OUT/build.log" 2>&1
    local hook=()
    grep -q 'add_subdirectory(gpu)' tests/CMakeLists.txt 2>/dev/null ||
        hook=(-DCMAKE_PROJECT_INCLUDE="$root/tests/gpu/cmake_hook.cmake")
    run_stage "$(index_of configure)" cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DGPTX_CUDA=ON -DGPTX_CUDA_ARCHITECTURES="$ARCH" -DGPTX_CUDA_PTXAS_VERBOSE=ON -DGPTX_MPI=OFF \
        -DGPTX_BUILD_EXAMPLES=OFF -DGPTX_BUILD_TESTS=ON "${hook[@]}" "${cmake_extra[@]}" || {
        not_reached "$(index_of build)" "configure failed"
        return 1
    }
    local targets
    mapfile -t targets < <(existing_targets "$@")
    local keep=(-- -k 0)
    [ "${GEN[1]}" = Ninja ] || keep=(-- -k)
    run_stage "$(index_of build)" cmake --build "$BUILD" -j"$JOBS" --target gptx_cuda \
        "${targets[@]}" "${keep[@]}"
    return 0 # what did build runs (a missing binary is "not built")
}

# ptxas's report (registers, spills) of the kernels whose names match the
# extended regular expression $1, from the build log
ptxas_lines() {
    local what=${1:-attention|flash}
    echo "===== ptxas -v, kernels matching '$what' (sm_$ARCH), from build.log"
    awk -v re="$what" '/Compiling entry function/ { show = ($0 ~ re) ? 4 : 0 } show > 0 { print; show-- }' \
        "$OUT/build.log" | if command -v c++filt >/dev/null 2>&1; then c++filt; else cat; fi
}

# ---- llm.c, the peer (build-peers/llmc, made by ../shared/tools/llmc-gpu/prepare.sh) ----

# the folder (GPTX_GPU_LLMC_DIR names another), and where its binaries go: out
# of the carried folder, so a warm machine keeps them
llmc_dir() { echo "${GPTX_GPU_LLMC_DIR:-$root/build-peers/llmc}"; }
llmc_bin() { echo "$BUILD/llmc"; }
llmc_carried() { [ -f "$(llmc_dir)/train_gpt2.cu" ] && [ -d "$(llmc_dir)/llmc" ]; }

# The background build of both llm.c binaries (cuDNN attention and its own),
# started when the folder was carried; SKIPPED otherwise.
llmc_build_start() {
    local i
    i=$(index_of llmc_build)
    if ! llmc_carried; then
        skipped "$i" "build-peers/llmc not carried: ../shared/tools/llmc-gpu/prepare.sh makes it"
        return 0
    fi
    bg_start "$i" bash "$root/tests/gpu/llmc_peer.sh" build "$(llmc_dir)" "$(llmc_bin)"
}
