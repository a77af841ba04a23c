#!/bin/sh
# bench/gmp_accuracy.sh — the accuracy table of tutorial 2 (issue 17): the
# main job's MLP, 5 epochs, dense against V:N:M pruning (GMP as it was,
# GMP with the dense shadow, fixed at init), masked N:M and unstructured,
# for each pattern and seed. Prints one line per run as it finishes, then
# the table: mean test accuracy and the spread (min–max) over the seeds.
#
#   sh bench/gmp_accuracy.sh                       # seed 0, patterns 4 8 16
#   SEEDS="0 1 2" MS="8 16" sh bench/gmp_accuracy.sh
#   ROWS="new noshadow doubling fisher" sh bench/gmp_accuracy.sh   # some rows only
#   OLD=/path/to/old/tree sh bench/gmp_accuracy.sh  # adds "GMP old": that tree's
#       build/venom and tutorial 2 (e.g. `git archive 09dbc03`, built)
#
# VENOM (default build/venom) runs the scripts; EPOCHS (5) and LIMIT (0: all)
# are passed on. Rows: dense, denserewind (tutorial 2 at sparsity 0 with
# the same learning-rate restart as "new": the like-for-like dense control), old, new (the defaults: shadow, SR-STE, and
# since issue 17's second round learning-rate rewinding), norewind (the
# defaults with --rewind 0, the "new" row before that), noshadow, doubling,
# fisher, nodecay, init (tutorial 1 --sparse), nm, unstructured.
set -eu
VENOM=${VENOM:-build/venom}
SEEDS=${SEEDS:-0}
MS=${MS:-4 8 16}
EPOCHS=${EPOCHS:-5}
LIMIT=${LIMIT:-0}
OLD=${OLD:-}
ROWS=${ROWS:-dense denserewind ${OLD:+old} new norewind noshadow doubling fisher init nm unstructured}
LOG=${LOG:-$(mktemp)}
T1=tutorials/01-fashion-mnist.lua
T2=tutorials/02-sparse-fashion-mnist.lua

# run ROW M SEED: one training run; appends "ROW M SEED ACCURACY" to $LOG.
run() {
  row=$1 M=$2 seed=$3
  common="--epochs $EPOCHS --limit $LIMIT --seed $seed"
  case $row in
    dense) cmd="$VENOM $T1 $common" ;;
    denserewind) cmd="$VENOM $T2 $common --mode unstructured --sparsity 0 --rewind 1" ;;
    old) cmd="$OLD/build/venom $OLD/$T2 $common --target 64:2:$M" ;;
    new) cmd="$VENOM $T2 $common --target 64:2:$M" ;;
    norewind) cmd="$VENOM $T2 $common --target 64:2:$M --rewind 0" ;;
    noshadow) cmd="$VENOM $T2 $common --target 64:2:$M --no-shadow" ;;
    doubling) cmd="$VENOM $T2 $common --target 64:2:$M --progression doubling" ;;
    fisher) cmd="$VENOM $T2 $common --target 64:2:$M --score fisher" ;;
    nodecay) cmd="$VENOM $T2 $common --target 64:2:$M --decay 0" ;;
    init) cmd="$VENOM $T1 $common --sparse 64:2:$M" ;;
    nm) cmd="$VENOM $T2 $common --mode nm --target 2:$M" ;;
    unstructured) cmd="$VENOM $T2 $common --mode unstructured --sparsity $(echo "1 - 2/$M" | bc -l)" ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
  esac
  acc=$($cmd 2>&1 | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' | tail -1)
  echo "$row $M $seed ${acc:-FAILED}" | tee -a "$LOG"
}

for seed in $SEEDS; do
  for row in $ROWS; do
    case $row in dense|denserewind) run "$row" - "$seed"; continue ;; esac
    for M in $MS; do run "$row" "$M" "$seed"; done
  done
done

echo
echo "test accuracy (%), mean [min–max] over seeds $SEEDS; log: $LOG"
awk -v rows="$ROWS" -v ms="$MS" '
  { k = $1 " " $2; n[k]++; s[k] += $4; if (!(k in lo) || $4 < lo[k]) lo[k] = $4
    if (!(k in hi) || $4 > hi[k]) hi[k] = $4 }
  END {
    nr = split(rows, R, " "); nm = split(ms, Mv, " ")
    printf "| row |"; for (j = 1; j <= nm; j++) printf " 2:%s |", Mv[j]; print ""
    for (i = 1; i <= nr; i++) {
      printf "| %s |", R[i]
      for (j = 1; j <= nm; j++) {
        k = R[i] " " (R[i] ~ /^dense/ ? "-" : Mv[j])
        if (k in n) printf " %.2f [%.2f–%.2f] |", s[k] / n[k], lo[k], hi[k]; else printf " |"
      }
      print ""
    }
  }' "$LOG"
