#!/bin/sh
# A short libFuzzer run (5 s) of the safetensors header parser over the
# seed corpus, as a TAP test. Skipped unless the build has the target
# (CC=clang cmake -DVENOM_FUZZ=ON). Usage: run.sh path/to/fuzz_safetensors
fuzzer=$1
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$fuzzer" ]; then
    echo "1..0 # SKIP fuzz_safetensors not built (configure with CC=clang -DVENOM_FUZZ=ON)"
    exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/venom-fuzz-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
echo "1..1"
if "$fuzzer" "$work" "$here/corpus" -dict="$here/safetensors.dict" -max_total_time=5 \
        -artifact_prefix="$work/" >"$work/log" 2>&1; then
    echo "ok 1 - 5 s of libFuzzer on the safetensors header parser: $(grep -c . "$work/log") log lines, no crash"
else
    echo "not ok 1 - fuzz_safetensors found a crash"
    sed 's/^/# /' "$work/log" | tail -40
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
        [ -f "$f" ] && echo "# input $(basename "$f"): $(od -An -c "$f" | head -5 | tr -s ' ')"
    done
    exit 1
fi
