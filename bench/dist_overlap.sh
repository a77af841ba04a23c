#!/bin/sh
# bench/dist_overlap.sh — the data-parallel overlap goal of issue 25 in one
# command: the main job's MLP epoch (bench/epoch.lua) as
#   A: 1 process × 2 threads,
#   C: 2 processes × 1 thread, 1 MB buckets (split buckets, progress calls,
#      the weight gradients handed over row slice by row slice; BUCKET_MB=
#      sets another size, e.g. 0.25 for the V:N:M MLP of --sparse 64:2:8,
#      whose 1.8 MB gradient 1 MB buckets cut in two),
#   D: 2 processes × 1 thread, 25 MB buckets (one bucket: nothing overlaps),
# alternated A C D, A C D, ... for R rounds, then a table per run and round:
# s/epoch, ÷ A of the same round, the share of the epoch spent waiting for
# the all-reduce after the backward, "hidden" (1 − waiting / a blocking
# all-reduce of the whole gradient timed alone, times the steps), the share
# of the gradient whose all-reduce started while the backward was still
# computing (the most that can be hidden), the bucket pieces a GEMM handed
# over while it ran, the bytes all-reduced per step against the gradient's
# size, and the load average
# before each run. Meant for a quiet machine (or one core per rank): on a
# shared one the ranks wait for each other to be scheduled and every
# figure is noise.
#
#     sh bench/dist_overlap.sh [ROUNDS] [extra bench/epoch.lua options, e.g. --limit 8192]
#     BUCKET_MB=0.25 sh bench/dist_overlap.sh 3 --sparse 64:2:8   # the V:N:M MLP
#
# VENOM (default build/venom) and MPIRUN (default mpirun) may be set; as
# root the script sets Open MPI's allow-root variables. Prints; never fails
# on time.
set -eu
rounds=${1:-3}
[ $# -gt 0 ] && shift
venom=${VENOM:-build/venom}
mpirun=${MPIRUN:-mpirun}
bucket_mb=${BUCKET_MB:-1}
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # run NAME ROUND [epoch.lua options]: one epoch, its output in $out/NAME.ROUND.txt
    name=$1 round=$2
    shift 2
    load=$(cut -d' ' -f1 /proc/loadavg)
    case $name in
    A) OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$venom" bench/epoch.lua "$@" ;;
    C) OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$mpirun" -np 2 --oversubscribe --bind-to none \
           "$venom" bench/epoch.lua --distributed --bucket-mb "$bucket_mb" "$@" ;;
    D) OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$mpirun" -np 2 --oversubscribe --bind-to none \
           "$venom" bench/epoch.lua --distributed --bucket-mb 25 "$@" ;;
    esac >"$out/$name.$round.txt" 2>&1 || {
        echo "run $name (round $round) failed:"
        cat "$out/$name.$round.txt"
        exit 1
    }
    echo "load $load" >>"$out/$name.$round.txt"
    echo "round $round: $name done, $(awk '/^seconds per epoch/ {print $4}' "$out/$name.$round.txt") s" >&2
}

r=1
while [ "$r" -le "$rounds" ]; do
    for name in A C D; do run "$name" "$r" "$@"; done
    r=$((r + 1))
done

# One row per run and round: the figures epoch.lua printed, ÷ A of its round.
echo "| run | round | s/epoch | ÷ A | waiting (share of the epoch) | hidden by the overlap | started during the backward (most it can hide) | pieces handed over early per step | all-reduced per step | load before |"
echo "|---|---|---|---|---|---|---|---|---|---|"
r=1
while [ "$r" -le "$rounds" ]; do
    a=$(awk '/^seconds per epoch/ {print $4}' "$out/A.$r.txt")
    for name in A C D; do
        awk -v run="$name" -v round="$r" -v a="$a" '
            /^seconds per epoch/ { s = $4 }
            /^waiting after backward/ { w = $0; sub(/.*\(/, "", w); sub(/ of it\).*/, "", w) }
            /^hidden by the overlap/ { h = $5 }
            /^early pieces per step/ { e = $5 }
            /^started during backward/ { d = $4 }
            /^all-reduced per step/ { b = $4 " MB = " $7 " × the gradient" }
            /^load / { l = $2 }
            END {
                if (run == "A") { w = "–"; h = "–"; e = "–"; b = "–"; d = "–" }
                printf "| %s | %d | %.2f | %.2f | %s | %s | %s | %s | %s | %s |\n", run, round, s, s / a, w, h, d, e, b, l
            }' "$out/$name.$r.txt"
    done
    r=$((r + 1))
done
echo
echo "A: 1 process x 2 threads; C: 2 x 1, $bucket_mb MB buckets; D: 2 x 1, 25 MB buckets (one bucket)."
echo "CPU: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores; load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
