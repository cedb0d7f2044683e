#!/usr/bin/env bash
# An installed spotwave, as a user gets it: `cmake --install` into a fresh prefix, the prefix moved
# elsewhere (the command and library find their data beside themselves), then
#   - the README's C example compiled with pkg-config and with find_package(spotwave), and run;
#   - the static archive linked through `pkg-config --static`;
#   - the installed command run from another directory (`spotwave demo`, `spotwave sim eye`),
#     with its data found under the prefix (and, with --hide-source, the source tree's data/
#     moved away meanwhile: CI does this; ctest does not, since tests run in parallel);
#   - every man page rendered with `man -l`.
# Usage: tests/install/check-install.sh BUILD_DIR [--hide-source]
set -euo pipefail
build=$(cd "${1:?usage: check-install.sh BUILD_DIR [--hide-source]}" && pwd)
hide=${2:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
restore() {
    if [[ -n $hide && -d $src/data.hidden-by-check-install ]]; then
        mv "$src/data.hidden-by-check-install" "$src/data"
    fi
    rm -rf "$tmp"
}
trap restore EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

cmake --install "$build" --prefix "$tmp/staged" >/dev/null
mv "$tmp/staged" "$tmp/prefix" # relocated: nothing may depend on the install path
P=$tmp/prefix
libdir=$(ls -d "$P"/lib*/pkgconfig | head -n 1)
libdir=${libdir%/pkgconfig}
for f in bin/spotwave include/spotwave/spotwave.h share/spotwave/ocular; do
    [[ -e $P/$f ]] || fail "$f was not installed"
done
for f in libspotwave.a libspotwave.so pkgconfig/spotwave.pc cmake/spotwave/spotwaveConfig.cmake; do
    [[ -e $libdir/$f ]] || fail "$libdir/$f was not installed"
done
soname=$(readelf -d "$libdir/libspotwave.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[[ $soname == libspotwave.so.[0-9]* ]] || fail "libspotwave.so has no versioned SONAME ($soname)"
# Only the public API is exported.
if nm -D --defined-only "$libdir/libspotwave.so" | awk '$2 ~ /[TDB]/ && $3 !~ /^sw_/' | grep -q .; then
    fail "libspotwave.so exports symbols that are not sw_*"
fi

if [[ -n $hide ]]; then
    mv "$src/data" "$src/data.hidden-by-check-install"
fi

# pkg-config: the .pc names the prefix it was installed to; a relocated prefix is given through
# pkg-config's standard override of the prefix variable.
pc() { PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --define-variable=prefix="$P" "$@" spotwave; }
mkdir "$tmp/ex"
cp "$src/examples/c/example.c" "$src/examples/c/CMakeLists.txt" "$tmp/ex/"
cd "$tmp/ex"
# shellcheck disable=SC2046
cc example.c $(pc --cflags --libs) -Wl,-rpath,"$libdir" -o example-pc ||
    fail "the README example does not compile with pkg-config"
out=$(./example-pc) || fail "the example (pkg-config) failed: $out"
[[ $out == *"spots found"* ]] || fail "the example printed: $out"
echo "pkg-config build: $out" | tail -n 1
# shellcheck disable=SC2046
cc example.c $(pc --static --cflags) "$libdir/libspotwave.a" \
    $(pc --static --libs-only-other --libs-only-l | sed 's/-lspotwave//') \
    $(pc --static --libs-only-L) -o example-static 2>"$tmp/static.err" ||
    fail "the example does not link statically: $(head -c 2000 "$tmp/static.err")"
./example-static >/dev/null || fail "the statically linked example failed"
cmake -S . -B build -DCMAKE_PREFIX_PATH="$P" >/dev/null || fail "find_package(spotwave) failed"
cmake --build build >/dev/null || fail "the example does not build through find_package(spotwave)"
out=$(./build/example) || fail "the example (CMake) failed: $out"
[[ $out == *"spots found"* ]] || fail "the example (CMake) printed: $out"
echo "find_package build: ok"

# The installed command, from another directory, with its data under the prefix.
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
env -u SPOTWAVE_DATA_DIR "$P/bin/spotwave" --backend cpu sim eye --out eye.pgm --size 320x320 \
    >/dev/null 2>"$tmp/eye.err" || fail "installed 'spotwave sim eye' failed: $(cat "$tmp/eye.err")"
[[ -s eye.pgm ]] || fail "sim eye wrote nothing"
env -u SPOTWAVE_DATA_DIR "$P/bin/spotwave" --backend cpu info --json >info.json
python3 - "$P" info.json <<'PY' || fail "spotwave info does not report the prefix's data folder"
import json, os, sys
d = json.load(open(sys.argv[2]))
want = os.path.realpath(os.path.join(sys.argv[1], "share", "spotwave"))
assert os.path.realpath(d["data_dir"]) == want, (d["data_dir"], want)
PY
env -u SPOTWAVE_DATA_DIR "$P/bin/spotwave" --backend cpu demo --out demo --steps eyes,aberrometry \
    >demo.log 2>&1 || fail "installed 'spotwave demo' failed: $(tail -n 3 demo.log)"
echo "installed command: sim eye, info and demo ran from $tmp/elsewhere"

# Man pages: each renders (with man, when this machine has it; else groff's check alone).
n=0
for m in "$P"/share/man/man1/spotwave*.1; do
    [[ -e $m ]] || continue
    if command -v man >/dev/null; then
        MANWIDTH=80 man -l "$m" >/dev/null 2>"$tmp/man.err" || fail "man -l $m: $(cat "$tmp/man.err")"
    fi
    grep -q "seed 00" "$m" && fail "$m cites a seed number instead of a paper"
    n=$((n + 1))
done
if command -v help2man >/dev/null; then
    ((n >= 14)) || fail "only $n man pages were installed"
fi
echo "man pages: $n render"
echo "check-install: all checks passed"
