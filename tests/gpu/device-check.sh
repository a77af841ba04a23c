#!/bin/sh
# device-check.sh — everything venom checks on a GPU machine, in two parts that
# each fit about 6 minutes on a 16-core machine (see ../../../shared/GPU.md and
# the "GPU (H200)" section of bench/RESULTS.md). Each part unpacks the Debian
# dependencies from .deps/ into a prefix, configures and builds with CUDA (a
# part 2 on a machine still warm from part 1 reuses its build: make finds
# nothing to do), runs its steps and prints a short table last. Part 2 also
# runs tutorial 8's CNN on the GPU (conv, pooling and batch-norm kernels).
#
#   sh tests/gpu/device-check.sh          # from the repository root: both parts
#   sh tests/gpu/device-check.sh build    # deps + configure + build only
#   sh tests/gpu/device-check.sh part1    # build, GPU tests, V:N:M kernels, epochs
#   sh tests/gpu/device-check.sh part2    # build (kept from part1 on a warm machine), the
#                                         # GPT runs, layer benchmark, CNN, GEMM and
#                                         # bandwidth, CPU epoch, C tests, PyTorch
#
# Each part is meant for one device call (DC_BUDGET below marks the steps that
# would start too late NOTIME; part 2's GPT steps come first, never yet timed
# on a GPU). The GPT runs (part 2) are tutorial
# 03 at 6 layers x 6 heads x 384 wide, block 256, batch 64, 200 steps on
# tinyshakespeare, dense f32, dense --amp bf16 and --sparse 64:2:8 --amp
# bf16 (2:8 from step 10), next to bench/torch_gpt.py (PyTorch eager with SDPA and
# torch.compile), and the tutorial's default model for 200 steps on the CPU
# and on the GPU at f32 (the final losses must agree within 1%). The text
# travels as .deps/tinyshakespeare.txt (see tests/gpu/deps.txt).
#
# The machine needs CUDA (nvcc, cuBLAS), CMake >= 3.20, a C compiler, make
# and Python; the Debian packages come as .deb files in .deps/ (the list is
# tests/gpu/deps.txt, which says how to download them) and are unpacked with
# dpkg-deb, or ar + tar, or Python, into $DEPS (default /tmp/deps), not into /.
#
# Every step runs even when an earlier one failed; each step's output goes to
# its own log under $OUT/device-check (or $BUILD/device-check-log), and the
# exit status is nonzero when any step failed. Benchmarks write line-buffered
# output (setvbuf), so a step killed at its limit keeps its finished rows.
# Environment: BUILD (build directory, default build-gpu), DEPS, JOBS (16),
# CPU_LIMIT (images of the CPU epoch, default 60000 = all; the ratio is taken
# from images/s), GPU_EPOCHS (default 1; the table shows the last epoch, so 2
# leaves out the first epoch's one-time CUDA and cuBLAS set-up), DC_BUDGET
# (seconds for one part, default 340: a step that would start later is marked
# NOTIME, and each step's limit is cut to what is left).
set -eu

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SELF="$ROOT/tests/gpu/device-check.sh"
BUILD=${BUILD:-$ROOT/build-gpu}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
DEPS=${DEPS:-/tmp/deps}
JOBS=${JOBS:-16}
CPU_LIMIT=${CPU_LIMIT:-60000}
GPU_EPOCHS=${GPU_EPOCHS:-1}
if [ -n "${OUT:-}" ]; then LOG="$OUT/device-check"; else LOG="$BUILD/device-check-log"; fi
ARCH_LIB=lib/x86_64-linux-gnu
DATA="$DEPS/usr/share/datasets/fashion-mnist"
export BUILD DEPS JOBS CPU_LIMIT GPU_EPOCHS LOG

# The unpacked prefix for everything below. The .pc files in the packages say
# prefix=/usr; with PKG_CONFIG_SYSROOT_DIR pkgconf turns -I/usr/include into
# -I$DEPS/usr/include (and -L likewise); PKG_CONFIG_LIBDIR replaces the
# default search path so no .pc of the machine itself is mixed in. openblas.pc
# sits in openblas-pthread/pkgconfig (Debian's alternatives link to it is made
# by a maintainer script, which dpkg-deb -x does not run).
export PKG_CONFIG_LIBDIR="$DEPS/usr/$ARCH_LIB/pkgconfig:$DEPS/usr/$ARCH_LIB/openblas-pthread/pkgconfig:$DEPS/usr/share/pkgconfig"
export PKG_CONFIG_PATH="$PKG_CONFIG_LIBDIR"
export PKG_CONFIG_SYSROOT_DIR="$DEPS"
# The machine's own LD_LIBRARY_PATH is kept (DC_ORIG_LD) for the steps that
# do not run venom (nvidia-smi, PyTorch), so no library of the packages
# (libz, libtinfo) stands in for one of the machine's there.
if [ -z "${DC_ORIG_LD+x}" ]; then export DC_ORIG_LD="${LD_LIBRARY_PATH:-}"; fi
export LD_LIBRARY_PATH="$DEPS/usr/$ARCH_LIB:$DEPS/usr/$ARCH_LIB/openblas-pthread:$DEPS/$ARCH_LIB${DC_ORIG_LD:+:$DC_ORIG_LD}"
export PATH="$PATH:$DEPS/usr/bin"
# Open MPI from the packages (venom.distributed; it bootstraps NCCL, so
# tests/gpu/test_nccl.lua needs it), relocated by OPAL_PREFIX: its plugins,
# help files and orted, which a process started without mpirun (a world of
# one, as the GPU tests are) forks. Checked on a Debian 12 machine with the
# packages unpacked elsewhere: a singleton MPI_Init mapped Open MPI's files
# from the prefix only. The GPU machine runs as root.
if [ -x "$DEPS/usr/bin/orted" ]; then export OPAL_PREFIX="$DEPS/usr"; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=passive

have() { command -v "$1" >/dev/null 2>&1; }
if ! have timeout; then
    # No coreutils timeout: run without limits.
    timeout() { while [ $# -gt 0 ]; do case $1 in -k) shift 2 ;; [0-9]*) shift; break ;; *) break ;; esac; done; "$@"; }
fi

# ---- steps (each also callable as `sh device-check.sh __name`) -------------

# Unpacks every .deps/*.deb into $DEPS, after checking that each package of
# tests/gpu/deps.txt has its file; turns the absolute symlinks of the packages
# (libz.so -> /lib/...) into links inside $DEPS.
step_deps() {
    missing=""
    for p in $(sed 's/#.*//' tests/gpu/deps.txt); do
        ls .deps/"$p"_*.deb >/dev/null 2>&1 || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        echo "device-check: missing in .deps/:$missing (see tests/gpu/deps.txt)"
        exit 1
    fi
    mkdir -p "$DEPS"
    how=${DC_UNPACK:-}
    if [ -z "$how" ]; then
        if have dpkg-deb; then how="dpkg"; elif have ar && have tar && have xz; then how="ar"; else how="python"; fi
    fi
    echo "unpacking $(ls .deps/*.deb | wc -l) packages into $DEPS with $how"
    for f in .deps/*.deb; do
        case $how in
        dpkg) dpkg-deb -x "$f" "$DEPS" ;;
        ar)
            tmp=$(mktemp -d)
            (cd "$tmp" && ar x "$ROOT/$f" && tar -xf data.tar.* -C "$DEPS")
            rm -rf "$tmp"
            ;;
        python) python3 - "$f" "$DEPS" <<'EOF'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
blob = open(deb, "rb").read()
assert blob[:8] == b"!<arch>\n", deb + ": not an ar archive"
pos = 8
while pos < len(blob):
    name, size = blob[pos:pos + 16].decode().strip().rstrip("/"), int(blob[pos + 48:pos + 58])
    if name.startswith("data.tar"):
        tf = tarfile.open(fileobj=io.BytesIO(blob[pos + 60:pos + 60 + size]), mode="r:*")
        try:
            tf.extractall(dest, filter="fully_trusted")
        except TypeError:
            tf.extractall(dest)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit(deb + ": no data.tar member")
EOF
            ;;
        *) echo "DC_UNPACK must be dpkg, ar or python"; exit 2 ;;
        esac
    done
    find "$DEPS" -type l | while read -r link; do
        target=$(readlink "$link")
        case "$target" in
        "$DEPS"/*) ;;
        /*) ln -sfn "$DEPS$target" "$link" ;;
        esac
    done
    test -f "$DATA/train-images-idx3-ubyte.gz" || { echo "no Fashion-MNIST in $DATA"; exit 1; }
    echo "ok: $DEPS ($(du -sh "$DEPS" | cut -f1))"
}

# The machine: card and driver, toolchain, glibc (the packages need >= 2.34),
# and the CUDA libraries the build links (cuBLAS, cuBLASLt, the static
# runtime), listed before configuring so that a missing one is seen here.
step_info() {
    export LD_LIBRARY_PATH="$DC_ORIG_LD"
    uname -a
    echo "glibc: $(ldd --version 2>&1 | head -1 || echo '?')"
    ls /lib/x86_64-linux-gnu/libc.so.6 /usr/lib/x86_64-linux-gnu/libc.so.6 2>/dev/null || true
    echo "cores: $(nproc 2>/dev/null || echo '?')"
    cc --version 2>&1 | head -1 || true
    cmake --version | head -1 || true
    find_nvcc && "$NVCC" --version | tail -2 || echo "nvcc: not found"
    echo "CUDA libraries (libcublas*, libcudart_static*):"
    libs=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
        /usr/lib/x86_64-linux-gnu ${NVCC:+$(dirname "$(dirname "$NVCC")")/lib64}; do
        [ -d "$d" ] || continue
        libs="$libs$(ls "$d"/libcublas* "$d"/libcudart_static* 2>/dev/null || true)
"
    done
    libs=$(echo "$libs" | grep -v '^$' | sort -u)
    if [ -n "$libs" ]; then echo "$libs" | sed 's/^/  /'; else echo "  none found"; fi
    echo "$libs" | grep -q 'libcublas\.' || echo "device-check: no libcublas on this image: the build will stop at configure (cuBLAS is required for the CUDA backend)"
    if have nvidia-smi; then
        nvidia-smi || true
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || true
    else
        echo "nvidia-smi: not found"
    fi
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 || true
}

find_nvcc() {
    NVCC=""
    if have nvcc; then NVCC=$(command -v nvcc); return 0; fi
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin /usr/lib/cuda/bin; do
        if [ -x "$d/nvcc" ]; then NVCC="$d/nvcc"; return 0; fi
    done
    return 1
}

# pkgconf from the packages (its own libpkgconf is on LD_LIBRARY_PATH), else the machine's.
find_pkgconf() {
    PKGCONF="$DEPS/usr/bin/pkgconf"
    "$PKGCONF" --version >/dev/null 2>&1 && return 0
    PKGCONF=$(command -v pkg-config || command -v pkgconf || echo pkg-config)
}

step_configure() {
    find_pkgconf
    echo "pkg-config: $PKGCONF ($("$PKGCONF" --version 2>&1 || true))"
    for m in luajit openblas libedit cmocka jansson; do
        echo "  $m: $("$PKGCONF" --cflags --libs "$m" 2>&1 || true)"
    done
    set -- -DVENOM_CUDA=ON -DVENOM_FUZZ=OFF -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
        -DPKG_CONFIG_EXECUTABLE="$PKGCONF" -DCMAKE_PREFIX_PATH="$DEPS/usr" \
        -DCMAKE_INCLUDE_PATH="$DEPS/usr/include" \
        -DCMAKE_LIBRARY_PATH="$DEPS/usr/$ARCH_LIB;$DEPS/$ARCH_LIB"
    if find_nvcc; then set -- "$@" -DCMAKE_CUDA_COMPILER="$NVCC"; fi
    # MPI: the packages' wrapper (Debian's alternatives link `mpicc` is made
    # by a maintainer script, which unpacking does not run).
    if [ -x "$DEPS/usr/bin/mpicc.openmpi" ]; then set -- "$@" -DMPI_C_COMPILER="$DEPS/usr/bin/mpicc.openmpi"; fi
    # NCCL: the CUDA toolkit's if it has one (cmake/nccl.cmake looks there),
    # else the one PyTorch's wheels bring (the nvidia-nccl package).
    if [ -n "${NVCC:-}" ] && [ ! -f "$(dirname "$(dirname "$NVCC")")/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
        nccl=$(LD_LIBRARY_PATH="$DC_ORIG_LD" python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
        lib=$(ls "$nccl"/lib/libnccl.so* 2>/dev/null | head -1 || true)
        if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ] && [ -n "$lib" ]; then
            echo "NCCL: PyTorch's, $nccl"
            set -- "$@" -DVENOM_NCCL_INCLUDE_DIR="$nccl/include" -DVENOM_NCCL_LIBRARY="$lib"
        else
            echo "NCCL: none found (tests/gpu/test_nccl.lua will skip, and fail the GPU tests)"
        fi
    fi
    if [ ! -f "$BUILD/CMakeCache.txt" ]; then
        if have make; then set -- "$@" -G "Unix Makefiles"; elif have ninja; then set -- "$@" -G Ninja; fi
    fi
    cmake -S . -B "$BUILD" "$@"
    # Where each dependency was found: all of them should be under $DEPS.
    echo "dependencies found:"
    grep -E '^(pkgcfg_lib_[A-Z]+_[a-z0-9_.]+|ZLIB_INCLUDE_DIR|ZLIB_LIBRARY_RELEASE|[A-Z]+_INCLUDE_DIRS):' \
        "$BUILD/CMakeCache.txt" | sed 's/^/  /'
    outside=$(grep -E '^(pkgcfg_lib_(LUAJIT|OPENBLAS|LIBEDIT|CMOCKA|JANSSON)_[a-z0-9_.]+|ZLIB_INCLUDE_DIR|ZLIB_LIBRARY_RELEASE|(LUAJIT|OPENBLAS|LIBEDIT|CMOCKA|JANSSON)_INCLUDE_DIRS):' \
        "$BUILD/CMakeCache.txt" | cut -d= -f2- | tr ';' '\n' | grep -v "^$DEPS/" | grep -v '^$' || true)
    if [ -n "$outside" ]; then echo "note: found outside $DEPS:"; echo "$outside" | sed 's/^/  /'; fi
}

step_build() {
    if [ -f "$BUILD/Makefile" ]; then
        cmake --build "$BUILD" -j "$JOBS" -- -k
    elif [ -f "$BUILD/build.ninja" ]; then
        cmake --build "$BUILD" -j "$JOBS" -- -k 0
    else
        cmake --build "$BUILD" -j "$JOBS"
    fi
}

# Runs the TAP scripts given, PAR at a time, each under a timeout; one line
# per script and a summary line (also written to $LOG/NAME.summary):
#   files: P passed, F failed, S skipped; tests: p passed, f failed, s skipped
step_tap() {
    name=$1 par=$2 tmo=$3
    shift 3
    dir="$LOG/$name"
    mkdir -p "$dir"
    if [ $# -eq 0 ] || [ ! -e "$1" ]; then
        echo "no test scripts"
        echo "files: 0 passed, 1 failed, 0 skipped; tests: 0 passed, 0 failed, 0 skipped (none found)" \
            > "$LOG/$name.summary"
        cat "$LOG/$name.summary"
        exit 1
    fi
    n=0
    for t in "$@"; do
        b=$(basename "$t" .t)
        (
            s=$(date +%s)
            rc=0
            timeout -k 5 "$tmo" "$t" > "$dir/$b.out" 2>&1 < /dev/null || rc=$?
            echo "$rc $(( $(date +%s) - s ))" > "$dir/$b.rc"
        ) &
        n=$((n + 1))
        if [ "$n" -ge "$par" ]; then wait; n=0; fi
    done
    wait
    for t in "$@"; do
        b=$(basename "$t" .t)
        read -r rc secs < "$dir/$b.rc"
        awk -v rc="$rc" -v secs="$secs" -v name="$b" '
            /^1\.\.0/ && /# *[Ss][Kk][Ii][Pp]/ { allskip = 1; plan = 0; next }
            /^1\.\.[0-9]+/ { plan = substr($1, 4) + 0; next }
            /^not ok/ { notok++; next }
            /^ok/ { if ($0 ~ /# *[Ss][Kk][Ii][Pp]/) skip++; else ok++; next }
            END {
                run = ok + notok + skip
                if (allskip && rc == 0) st = "SKIP"
                else if (rc == 0 && notok == 0 && plan > 0 && run == plan) st = "PASS"
                else st = "FAIL"
                why = (rc == 124 || rc == 137) ? " (timeout)" : (rc != 0 ? " (exit " rc ")" : "")
                if (st == "FAIL" && notok == 0 && plan != run) why = why " (ran " run " of " plan ")"
                printf "%-4s %-40s %3d ok %3d not ok %3d skip %4ds%s\n", st, name, ok, notok, skip, secs, why
            }' "$dir/$b.out"
    done > "$dir/results.txt"
    cat "$dir/results.txt"
    for t in "$@"; do
        b=$(basename "$t" .t)
        if grep -q "^FAIL $b " "$dir/results.txt"; then
            echo "---- $b (last 30 lines)"
            tail -n 30 "$dir/$b.out"
        fi
    done
    awk '{ f[$1]++; ok += $3; nok += $5; sk += $8 }
         END { printf "files: %d passed, %d failed, %d skipped; tests: %d passed, %d failed, %d skipped\n",
               f["PASS"], f["FAIL"], f["SKIP"], ok, nok, sk }' "$dir/results.txt" > "$LOG/$name.summary"
    cat "$LOG/$name.summary"
    ! grep -q '^FAIL' "$dir/results.txt"
}

# A GPU test that skips on a machine with a GPU has not run: a failure here.
step_gpu_tests() {
    rc=0
    step_tap gpu-tests 4 240 "$BUILD"/t/gpu_*.t || rc=$?
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU' && grep -q '^SKIP' "$LOG/gpu-tests/results.txt"; then
        echo "device-check: a GPU is present, yet GPU tests skipped (venom sees no device?)"
        rc=1
    fi
    return "$rc"
}
step_c_tests() {
    export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
    step_tap c-tests 8 240 "$BUILD"/t/c_*.t
}

step_cuda_ops() { "$BUILD/bench/cuda_ops"; }
step_vnm_gpu() {
    if [ ! -x "$BUILD/bench/vnm_gpu" ]; then echo "build/bench/vnm_gpu was not built"; exit 1; fi
    "$BUILD/bench/vnm_gpu"
}
step_torch_ops() {
    export LD_LIBRARY_PATH="$DC_ORIG_LD"
    if ! python3 -c 'import torch' 2>/dev/null; then echo "no PyTorch: skipped"; exit 0; fi
    python3 -u bench/torch_ops.py
}
step_epoch_gpu() {
    "$BUILD/venom" tutorials/01-fashion-mnist.lua --device cuda --epochs "$GPU_EPOCHS" --root "$DATA"
}
step_epoch_gpu_sparse() {
    "$BUILD/venom" tutorials/01-fashion-mnist.lua --device cuda --sparse 64:2:8 --epochs "$GPU_EPOCHS" --root "$DATA"
}
step_sparse_layer() { "$BUILD/venom" bench/sparse_layer.lua --device cuda; }
# Tutorial 8's CNN (conv/pool/batch-norm kernels + cuBLAS): training steps on
# the GPU, then one epoch of the tutorial (accuracy as a sanity check).
step_cnn_gpu() {
    "$BUILD/venom" bench/cnn.lua --device cuda --steps 40 --root "$DATA"
    "$BUILD/venom" tutorials/08-cnn.lua --device cuda --epochs 1 --root "$DATA"
}

# Tutorial 03 at the issue's size; $1 = extra options. The tokens/s line is
# the table's; --sample 0 and one evaluation keep the run to the training.
GPT_TEXT=${GPT_TEXT:-$ROOT/.deps/tinyshakespeare.txt}
gpt_run() {
    test -f "$GPT_TEXT" || { echo "no $GPT_TEXT (see tests/gpu/deps.txt)"; exit 1; }
    "$BUILD/venom" tutorials/03-tiny-gpt.lua --device cuda --text "$GPT_TEXT" --n-layer 6 \
        --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --steps 200 --eval-every 200 \
        --eval-batches 2 --sample 0 "$@"
}
step_gpt_f32() { gpt_run; }
step_gpt_bf16() { gpt_run --amp bf16; }
step_gpt_sparse() { gpt_run --amp bf16 --sparse 64:2:8 --prune-start 0 --prune-end 0.05; }
step_torch_gpt() {
    export LD_LIBRARY_PATH="$DC_ORIG_LD"
    if ! python3 -c 'import torch' 2>/dev/null; then echo "no PyTorch: skipped"; exit 0; fi
    python3 bench/torch_gpt.py --text "$GPT_TEXT" --steps 150 --warmup 20 --compile
}
# The tutorial's default model, 200 steps, on the CPU and the GPU at f32:
# the same batches (the RNG draws on the CPU), so the losses differ by
# rounding and bf16 attention only; the final train and val losses within 1%.
step_gpt_loss_match() {
    test -f "$GPT_TEXT" || { echo "no $GPT_TEXT (see tests/gpu/deps.txt)"; exit 1; }
    for d in cpu cuda; do
        "$BUILD/venom" tutorials/03-tiny-gpt.lua --device $d --text "$GPT_TEXT" --steps 200 \
            --eval-every 100 --sample 0 > "$LOG/gpt_loss_$d.out" 2>&1 || { cat "$LOG/gpt_loss_$d.out"; exit 1; }
        grep -E "^step|tokens/s|final" "$LOG/gpt_loss_$d.out" | sed "s/^/$d: /"
    done
    for d in cpu cuda; do sed -n 's/^step *200  train loss \([0-9.]*\)  val loss \([0-9.]*\)$/\1 \2/p' "$LOG/gpt_loss_$d.out"; done |
        awk 'NR == 1 { t = $1; v = $2 } NR == 2 { dt = ($1 - t) / t; dv = ($2 - v) / v
             printf "relative difference GPU - CPU: train %.4f, val %.4f\n", dt, dv
             ok = dt < 0.01 && dt > -0.01 && dv < 0.01 && dv > -0.01 }
             END { if (NR != 2 || !ok) { print "FAIL: not within 1%"; exit 1 } print "ok: within 1%" }'
}
step_epoch_cpu() {
    "$BUILD/venom" tutorials/01-fashion-mnist.lua --device cpu --epochs 1 --limit "$CPU_LIMIT" --root "$DATA"
}

case "${1:-}" in
__*)
    fn=step_$(echo "${1#__}" | tr - _)
    shift
    "$fn" "$@"
    exit 0
    ;;
esac

# ---- the run ----------------------------------------------------------------

# Re-run under tee so that the whole output lands in $LOG/device-check.log.
if [ -z "${VENOM_DC_INNER:-}" ]; then
    mkdir -p "$LOG"
    rm -f "$LOG/rc"
    { rc=0; VENOM_DC_INNER=1 sh "$SELF" "$@" || rc=$?; echo "$rc" > "$LOG/rc"; } 2>&1 | tee "$LOG/device-check-${1:-all}.log"
    exit "$(cat "$LOG/rc" 2>/dev/null || echo 1)"
fi

mkdir -p "$LOG"
: > "$LOG/steps.txt"
T0=$(date +%s)

# run NAME TIMEOUT_S: the step __NAME in a child shell (set -e applies there),
# its output shown and kept in $LOG/NAME.log, its status in $LOG/steps.txt.
run() {
    name=$1 tmo=$2
    left=$((T0 + DC_BUDGET - $(date +%s)))
    if [ "$left" -lt 15 ]; then
        printf '\n==== %s: NOTIME (the %ss budget is spent)\n' "$name" "$DC_BUDGET"
        echo "$name NOTIME - 0" >> "$LOG/steps.txt"
        return 0
    fi
    [ "$tmo" -le "$left" ] || tmo=$left
    printf '\n==== %s (limit %ss) ====\n' "$name" "$tmo"
    s=$(date +%s)
    { rc=0; timeout -k 10 "$tmo" sh "$SELF" "__$name" 2>&1 || rc=$?; echo "$rc" > "$LOG/$name.rc"; } \
        | tee "$LOG/$name.log"
    rc=$(cat "$LOG/$name.rc")
    secs=$(( $(date +%s) - s ))
    st=ok
    [ "$rc" -eq 0 ] || st=FAILED
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || st=TIMEOUT
    echo "$name $st $rc $secs" >> "$LOG/steps.txt"
    printf '==== %s: %s (exit %s, %ss)\n' "$name" "$st" "$rc" "$secs"
}

# Most important first; DC_BUDGET (default 340 s) caps one part, so that its
# table comes out before the device runner's own limit. A part starts with
# the machine's inventory and the build (nothing to do when the build of an
# earlier part is still there).
DC_BUDGET=${DC_BUDGET:-340}
PART=${1:-all}
case "$PART" in part1 | part2 | build | all) ;; *) echo "usage: device-check.sh [part1|part2|build]"; exit 2 ;; esac
run info 60
if [ -f "$DEPS/usr/include/luajit-2.1/lua.h" ] && [ "$PART" = part2 ]; then
    echo "deps: $DEPS already unpacked (warm machine)"
else
    run deps 120
fi
run configure 120
run build 240
if [ "$PART" = part1 ] || [ "$PART" = all ]; then
    run gpu-tests 180
    run vnm_gpu 120
    run epoch_gpu 90
    run epoch_gpu_sparse 90
fi
if [ "$PART" = all ]; then T0=$(date +%s); fi # part 2 gets its own budget
if [ "$PART" = part2 ] || [ "$PART" = all ]; then
    run gpt_f32 90
    run gpt_bf16 90
    run gpt_sparse 90
    run torch_gpt 120
    run gpt_loss_match 120
    run sparse_layer 60
    run cnn_gpu 60
    run cuda_ops 90
    run epoch_cpu 60
    run torch_ops 60
    run c-tests 90
fi

# ---- the table ----------------------------------------------------------------
val() { sed -n "s/^SUMMARY $1=//p" "$LOG"/cuda_ops.log "$LOG"/torch_ops.log 2>/dev/null | head -1; }
epoch() { # seconds and images/s from the tutorial's "epoch 1/1 ..." line
    sed -n 's/.* \([0-9.]*\) s\/epoch (\([0-9]*\) images\/s).*/\1 \2/p' "$LOG/$1.log" 2>/dev/null | tail -1
}
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
eg=$(epoch epoch_gpu)
es=$(epoch epoch_gpu_sparse)
toks() { sed -n 's/.* \([0-9]*\) tokens\/s$/\1/p' "$LOG/$1.log" 2>/dev/null | tail -1; }
torch_toks() { sed -n "s/^$1 *\([0-9]*\) .*/\1/p" "$LOG/torch_gpt.log" 2>/dev/null | head -1; }
ec=$(epoch epoch_cpu)
speedup=$(echo "$eg $ec" | awk 'NF == 4 && $4 > 0 { printf "%.1fx (images/s)", $2 / $4 }')
failed=$(awk '$2 != "ok" { printf "%s%s", sep, $1; sep = ", " }' "$LOG/steps.txt")
{
    echo
    echo "==== device-check $PART summary ===="
    printf '| %-40s | %s\n' "card, driver" "${gpu:-no nvidia-smi}"
    printf '| %-40s | %s\n' "V:N:M kernels (vnm_gpu)" "$(grep -c '^|' "$LOG/vnm_gpu.log" 2>/dev/null || echo 0) table rows in vnm_gpu.log"
    printf '| %-40s | %s\n' "V:N:M kernel checks PASS / FAIL (vnm_gpu)" "$(grep -c 'check .* PASS' "$LOG/vnm_gpu.log" 2>/dev/null || echo 0) / $(grep -c 'check .* FAIL' "$LOG/vnm_gpu.log" 2>/dev/null || echo 0)"
    printf '| %-40s | %s\n' "V:N:M dX: dense path faster, rows by M" "$(awk '/dX dense path/ { for (i = 1; i < NF; i++) if ($i == "of" && $(i + 1) == "k_dx") r = $(i - 1); n[$4]++; if (r + 0 > 1) f[$4]++ } END { for (m in n) printf "M=%s %d/%d  ", m, f[m], n[m] }' "$LOG/vnm_gpu.log" 2>/dev/null) (the rule of vnm_sptc_dx_dense: M < 8)"
    printf '| %-40s | %s\n' "V:N:M forward kernel (V=64)" "$(sed -n 's/.*rows with V=64 here use //p' "$LOG/vnm_gpu.log" 2>/dev/null | head -1) (wgmma rows also time mma.sp)"
    printf '| %-40s | %s\n' "GPU tests" "$(cat "$LOG/gpu-tests.summary" 2>/dev/null || echo 'not run')"
    printf '| %-40s | %s\n' "C tests (CPU suite)" "$(cat "$LOG/c-tests.summary" 2>/dev/null || echo 'not run')"
    printf '| %-40s | %s\n' "GEMM bf16 8192^3 venom autocast" "$(val gemm_bf16_venom_8192x8192x8192) TFLOP/s of 790"
    printf '| %-40s | %s\n' "GEMM bf16 8192^3 vnk_gemm (bf16 in)" "$(val gemm_bf16_vnk_8192x8192x8192) TFLOP/s of 790"
    printf '| %-40s | %s\n' "GEMM bf16 8192^3 cuBLAS direct" "$(val gemm_bf16_cublas_8192x8192x8192) TFLOP/s of 790"
    printf '| %-40s | %s\n' "GEMM bf16 8192^3 torch (bf16 out)" "$(val torch_gemm_bf16_8192x8192x8192) TFLOP/s of 790"
    printf '| %-40s | %s\n' "copy bandwidth" "$(val copy_tbs) TB/s of 4.3"
    printf '| %-40s | %s\n' "launch: venom add (1 elt) / kernel" "$(val launch_us_add1) / $(val launch_us_kernel) us"
    printf '| %-40s | %s\n' "launch: torch add (1 elt)" "$(val torch_launch_us_add1) us"
    printf '| %-40s | %s\n' "copy bandwidth torch" "$(val torch_copy_tbs) TB/s of 4.3"
    printf '| %-40s | %s\n' "epoch GPU (s, images/s)" "${eg:-failed}"
    printf '| %-40s | %s\n' "epoch GPU --sparse 64:2:8 (s, images/s)" "${es:-failed}"
    printf '| %-40s | %s\n' "epoch CPU (s, images/s; --limit $CPU_LIMIT)" "${ec:-failed}"
    printf '| %-40s | %s\n' "GPU speedup" "${speedup:-n/a}"
    printf '| %-40s | %s\n' "CNN (tutorial 8) step GPU" "$(sed -n 's/^venom width .* on cuda: \([0-9.]*\) s\/step.*/\1 s\/step/p' "$LOG/cnn_gpu.log" 2>/dev/null | head -1)"
    printf '| %-40s | %s\n' "CNN (tutorial 8) 1 epoch GPU" "$(sed -n 's/^final test accuracy \(.*\)/\1/p' "$LOG/cnn_gpu.log" 2>/dev/null | head -1)"
    printf '| %-40s | %s\n' "GPT 6x6x384 tokens/s: f32, bf16, 2:8 bf16" "$(toks gpt_f32) / $(toks gpt_bf16) / $(toks gpt_sparse)"
    printf '| %-40s | %s\n' "torch GPT eager f32, bf16 (SDPA)" "$(torch_toks 'eager f32') / $(torch_toks 'eager bf16')"
    printf '| %-40s | %s\n' "torch GPT compile f32, bf16" "$(torch_toks 'compile f32') / $(torch_toks 'compile bf16')"
    printf '| %-40s | %s\n' "GPT losses GPU vs CPU (200 steps, f32)" "$(grep -h 'relative difference' "$LOG/gpt_loss_match.log" 2>/dev/null || echo 'not run')"
    printf '| %-40s | %s\n' "steps (status, seconds)" "$(awk '{ printf "%s%s %s %ss", sep, $1, $2, $4; sep = ", " }' "$LOG/steps.txt")"
    printf '| %-40s | %s\n' "steps failed" "${failed:-none}"
    echo "logs: $LOG"
} | tee "$LOG/summary-$PART.txt"
[ -z "$failed" ]
