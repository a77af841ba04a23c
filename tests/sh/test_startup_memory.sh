#!/bin/sh
# What a run that never touches a GPU pays at start-up (TAP).
#
#   sh tests/sh/test_startup_memory.sh BUILD_DIR SOURCE_DIR
#
# A CUDA build does not link cuBLAS, cuBLASLt or cuSPARSE: kernels/gemm.cu
# and csr.cu open them on first use, because loading them costs about
# 180 MB of resident memory before any tensor exists. Checks that
# libvenom.so does not list them as needed libraries, and that `venom`
# starting up and building a small model stays far below that (peak
# resident size read from /proc/self/status, so Linux only).
build=$1
export OMP_WAIT_POLICY=passive
echo "1..2"

lib=$build/libvenom.so
if command -v readelf >/dev/null 2>&1 && [ -f "$lib" ]; then
    needed=$(readelf -d "$lib" | grep NEEDED | grep -E 'cublas|cusparse|nvJitLink')
    if [ -z "$needed" ]; then
        echo "ok 1 - libvenom.so does not link cuBLAS or cuSPARSE"
    else
        echo "not ok 1 - libvenom.so does not link cuBLAS or cuSPARSE"
        echo "$needed" | sed 's/^/# /'
    fi
else
    echo "ok 1 # SKIP no readelf or no shared libvenom"
fi

if [ ! -r /proc/self/status ]; then
    echo "ok 2 # SKIP no /proc/self/status"
    exit 0
fi
# 64 MB: a CPU-only build peaks near 10 MB here, cuBLAS alone would add ~180.
out=$("$build/venom" -e '
local venom = require "venom"
local m = venom.nn.Linear(64, 32)
local y = m(venom.randn(8, 64)):sum()
y:backward()
for line in io.lines("/proc/self/status") do
  local kb = line:match("^VmHWM:%s*(%d+)")
  if kb then print(kb) end
end' 2>&1)
kb=$(echo "$out" | tail -n 1)
case $kb in
'' | *[!0-9]*) echo "not ok 2 - peak resident size at start-up"; echo "$out" | sed 's/^/# /' ;;
*)
    if [ "$kb" -lt 65536 ]; then
        echo "ok 2 - peak resident size at start-up $kb kB < 64 MB"
    else
        echo "not ok 2 - peak resident size at start-up $kb kB < 64 MB"
    fi
    ;;
esac
