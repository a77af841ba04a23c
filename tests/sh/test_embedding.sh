#!/bin/sh
# Embedding venom in C, checked against an installed tree (TAP).
#
#   sh tests/sh/test_embedding.sh BUILD_DIR SOURCE_DIR
#
# Installs BUILD_DIR into a temporary prefix, then builds the examples of
# tutorials/04-embedding-in-c the ways a user would: with pkg-config (shared
# and static libvenom), and with find_package(venom) in their CMake project.
# Runs them and checks what they print: the loss went down and the classifier
# learned; the tensor handed to Lua came back as the same tensor and storage,
# changed in place as the script says; a Lua error came back as a status.
# Also checks that the installed `venom` finds its Lua modules in the prefix,
# even after the prefix is moved. VENOM_SH_CC is the compiler of the build;
# VENOM_SH_CFLAGS carries the sanitizer flags of a sanitizer build (its
# libvenom needs them in every program linking it).
build=$1
src=$2
examples=$src/tutorials/04-embedding-in-c
cc=${VENOM_SH_CC:-cc}
cflags=${VENOM_SH_CFLAGS:-}
export OMP_WAIT_POLICY=passive
tmp=$(mktemp -d "${TMPDIR:-/tmp}/venom-embed.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
n=0
failed=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for line in "$@"; do echo "# $line"; done; }
# check NAME COMMAND...: runs the command, output in $tmp/out
check() {
    name=$1
    shift
    if "$@" >"$tmp/out" 2>&1; then ok "$name"; else not_ok "$name" "$(tail -n 20 "$tmp/out")"; fi
}
# Field $2 of the line of $tmp/$1 that starts with $3 (numbers only).
field() { grep "^$3" "$tmp/$1" | head -n 1 | tr -c '0-9.\n' ' ' | awk -v k="$2" '{ print $k }'; }
# awk_true NAME EXPR: a numeric check with awk
awk_true() {
    if awk "BEGIN { exit !($2) }"; then ok "$1"; else not_ok "$1" "false: $2"; fi
}

echo "1..24"

check "cmake --install into a temporary prefix" cmake --install "$build" --prefix "$prefix"
missing=
for f in lib/libvenom.so lib/libvenom.a lib/libvenom_lua.so include/venom.h include/venom/moe.h include/venom_lua.h include/venom/image.h include/venom/conv.h \
         lib/pkgconfig/venom.pc lib/pkgconfig/venom-lua.pc lib/cmake/venom/venomConfig.cmake \
         share/lua/5.1/venom/init.lua share/lua/5.1/venom/nn.lua lib/lua/5.1/venom/core.so bin/venom \
         include/venom/dynamic.h include/venom/quant.h; do
    [ -e "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "installed files in place"; else not_ok "installed files in place" "missing:$missing"; fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"

# ---- venom.h (and the bridge's venom_lua.h) are the only public headers ----
# Installed: include/ holds just those two and venom/ (venom.h's sub-headers,
# which refuse to be included on their own), and a program compiled with the
# package's flags cannot include the library's internal.h.
extra=$(cd "$prefix/include" && ls | grep -vx 'venom.h' | grep -vx 'venom_lua.h' | grep -vx 'venom' | tr '\n' ' ')
for h in "$prefix"/include/venom/*.h; do
    [ -e "$h" ] || continue
    printf '#include "venom/%s"\n' "$(basename "$h")" > "$tmp/sub.c"
    $cc -I"$prefix/include" -c "$tmp/sub.c" -o "$tmp/sub.o" 2>/dev/null && extra="$extra venom/$(basename "$h")"
done
printf '#include "internal.h"\nint main(void) { return 0; }\n' > "$tmp/internal.c"
if [ -z "$extra" ] && ! $cc $(pkg-config --cflags venom-lua) -c "$tmp/internal.c" -o "$tmp/internal.o" 2>/dev/null; then
    ok "an installed consumer cannot include internal.h"
else
    not_ok "an installed consumer cannot include internal.h" "extra headers: $extra"
fi
# A sub-header is reached through venom.h only: alone it stops the build.
printf '#include <venom.h>\nint main(void) { return vn_conv2d(0, 0, 0, 0, 0, 0, 1) != 0; }\n' > "$tmp/sub.c"
printf '#include <venom/conv.h>\nint main(void) { return 0; }\n' > "$tmp/sub_alone.c"
if $cc $(pkg-config --cflags venom) -c "$tmp/sub.c" -o "$tmp/sub.o" &&
   ! $cc $(pkg-config --cflags venom) -c "$tmp/sub_alone.c" -o "$tmp/sub_alone.o" 2>/dev/null; then
    ok "venom.h brings its installed sub-headers (venom/conv.h), which refuse to be included alone"
else
    not_ok "venom.h brings its installed sub-headers (venom/conv.h), which refuse to be included alone"
fi
# In the build tree: no directory on the venom target's public include path
# holds internal.h or a wing's header.
leaks=
while read -r dir; do
    [ -n "$dir" ] || continue
    for h in internal.h vnm_internal.h safetensors.h kernels.h; do [ -e "$dir/$h" ] && leaks="$leaks $dir/$h"; done
done < "$build/venom-interface-includes.txt"
if [ -s "$build/venom-interface-includes.txt" ] && [ -z "$leaks" ]; then
    ok "the build tree's public include path holds only venom.h ($(tr '\n' ' ' < "$build/venom-interface-includes.txt"))"
else
    not_ok "the build tree's public include path holds only venom.h" "reachable:$leaks"
fi
rpath="-Wl,-rpath,$prefix/lib"

# ---- train_classifier through pkg-config, shared libvenom ----
check "compile train_classifier.c with pkg-config venom" \
    sh -c "$cc $cflags '$examples/train_classifier.c' \$(pkg-config --cflags --libs venom) -lm $rpath -o '$tmp/tc'"
check "train_classifier runs" "$tmp/tc"
cp "$tmp/out" "$tmp/tc.out"
before=$(field tc.out 1 "result:")
after=$(field tc.out 2 "result:")
acc=$(field tc.out 3 "result:")
awk_true "final loss < initial loss ($before -> $after)" "$before > 0 && $after < 0.5 * $before"
awk_true "test accuracy on the spirals > 0.9 ($acc)" "$acc > 0.9"
leak=$(field tc.out 1 "engine memory still in use")
awk_true "no tensor left alive at exit ($leak bytes)" "$leak == 0"

# ---- the same, linked statically (pkg-config --static) ----
static_libs=$(pkg-config --static --libs venom | sed 's/-lvenom\b//')
check "compile train_classifier.c against libvenom.a" \
    sh -c "$cc $cflags '$examples/train_classifier.c' \$(pkg-config --cflags venom) '$prefix/lib/libvenom.a' $static_libs -lm -o '$tmp/tc_static'"
if readelf -d "$tmp/tc_static" | grep -q 'libvenom'; then
    not_ok "the static program does not need libvenom.so" "$(readelf -d "$tmp/tc_static" | grep NEEDED)"
else
    ok "the static program does not need libvenom.so"
fi
check "static train_classifier gives the same result" sh -c "'$tmp/tc_static' | grep '^result:' | grep -qxF '$(grep '^result:' "$tmp/tc.out")'"

# ---- drive_lua through pkg-config venom-lua ----
check "compile drive_lua.c with pkg-config venom-lua" \
    sh -c "$cc $cflags '$examples/drive_lua.c' \$(pkg-config --cflags --libs venom-lua) $rpath -o '$tmp/dl'"
check "drive_lua runs train.lua" "$tmp/dl" "$examples/train.lua"
cp "$tmp/out" "$tmp/dl.out"
if grep -qx "Lua modules from $prefix/share/lua/5.1" "$tmp/dl.out"; then ok "the bridge loads the installed Lua modules"
else not_ok "the bridge loads the installed Lua modules" "$(head -n 1 "$tmp/dl.out")"; fi
if grep -qx "standardize_: same tensor yes, same storage yes" "$tmp/dl.out"; then ok "the tensor came back from Lua without a copy"
else not_ok "the tensor came back from Lua without a copy" "$(grep standardize_ "$tmp/dl.out")"; fi
m1=$(field dl.out 1 "seen from C:"); m2=$(field dl.out 2 "seen from C:")
v1=$(field dl.out 3 "seen from C:"); v2=$(field dl.out 4 "seen from C:")
awk_true "C sees Lua's in-place standardization (means $m1 $m2, variances $v1 $v2)" \
    "$m1 < 1e-3 && $m2 < 1e-3 && $v1 > 0.999 && $v1 < 1.001 && $v2 > 0.999 && $v2 < 1.001"
l0=$(field dl.out 2 "trained in Lua:"); l1=$(field dl.out 3 "trained in Lua:"); a=$(field dl.out 4 "trained in Lua:")
awk_true "Lua training: loss down ($l0 -> $l1), accuracy $a > 0.9" "$l1 < 0.5 * $l0 && $a > 0.9"
if grep -q "^a failing chunk gave 'script error': matmul: (2, 3) and (2, 3)" "$tmp/dl.out" &&
   grep -qx "after closing Lua, x is still usable: yes" "$tmp/dl.out"; then
    ok "a Lua error comes back as VN_ERR_SCRIPT with its message"
else
    not_ok "a Lua error comes back as VN_ERR_SCRIPT with its message" "$(tail -n 2 "$tmp/dl.out")"
fi

# ---- both through find_package(venom) ----
check "a CMake project with find_package(venom) builds both" sh -c "
    cmake -S '$examples' -B '$tmp/cmake' -DCMAKE_PREFIX_PATH='$prefix' -DCMAKE_C_COMPILER='$cc' -DCMAKE_C_FLAGS='$cflags' \
          -DCMAKE_EXE_LINKER_FLAGS='$cflags' && cmake --build '$tmp/cmake'"
check "both CMake-built programs run" sh -c "'$tmp/cmake/train_classifier' | grep -qxF '$(grep '^result:' "$tmp/tc.out")' &&
    '$tmp/cmake/drive_lua' | grep -qx 'standardize_: same tensor yes, same storage yes'"

# ---- the installed executable, in place and moved ----
check "installed venom finds its modules in the prefix" sh -c "
    cd '$tmp' && '$prefix/bin/venom' -e 'print(package.searchpath(\"venom.nn\", package.path))' |
    grep -qx '$prefix/share/lua/5.1/venom/nn.lua'"
mv "$prefix" "$tmp/moved"
check "a moved prefix still works (venom and drive_lua)" sh -c "
    cd '$tmp' && '$tmp/moved/bin/venom' -e 'print(venom.ones(2, 2):sum():item())' | grep -qx 4 &&
    LD_LIBRARY_PATH='$tmp/moved/lib' '$tmp/dl' '$examples/train.lua' | grep -qx 'Lua modules from $tmp/moved/share/lua/5.1'"

exit $failed
