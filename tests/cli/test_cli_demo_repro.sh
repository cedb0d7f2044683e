#!/usr/bin/env bash
# `spotwave demo` is reproducible: the same seed gives the same files (star field, eye maps,
# D-SABRE wavefront), another seed other files, and the thread count changes nothing.
# Usage: test_cli_demo_repro.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

W=96
H=64
STEPS=aberrometry,sabre # the stages whose files are compared below
d1=$tmp/demo1
expect 0 --backend cpu demo --out "$d1" --size ${W}x${H} --seed 7 --steps $STEPS

# ---------------------------------------------------------------- reproducible for a seed
d2=$tmp/demo2
expect 0 --backend cpu --quiet demo --out "$d2" --size ${W}x${H} --seed 7 --steps $STEPS
stats1=$(printf '%s\n' "$out" | grep -E '^ *stats ' || true) # default threads (all cores)
[[ -n $stats1 ]] || fail "the demo report has no stats line: $out"
cmp -s "$d1/demo.fits" "$d2/demo.fits" || fail "the same seed gave different demo.fits"
cmp -s "$d1/demo_u16.pgm" "$d2/demo_u16.pgm" || fail "the same seed gave different PGM files"
for e in 1 2; do
    cmp -s "$d1/demo_aberrometry_eye$e.png" "$d2/demo_aberrometry_eye$e.png" ||
        fail "the same seed gave different demo_aberrometry_eye$e.png"
done
d3=$tmp/demo3
expect 0 --backend cpu demo --out "$d3" --size ${W}x${H} --seed 8 --steps $STEPS
cmp -s "$d1/demo.fits" "$d3/demo.fits" && fail "different seeds gave the same demo.fits"
cmp -s "$d1/demo_aberrometry_eye1.png" "$d3/demo_aberrometry_eye1.png" &&
    fail "different seeds gave the same eyes (demo_aberrometry_eye1.png)"
cmp -s "$d1/demo_sabre.fits" "$d2/demo_sabre.fits" || fail "the same seed gave different demo_sabre.fits"
cmp -s "$d1/demo_sabre.fits" "$d3/demo_sabre.fits" &&
    fail "different seeds gave the same demo_sabre.fits"
# The thread count must not change the results. demo.fits is built by the command itself on one
# thread; demo_u16.pgm comes from the library's conversion and the stats line from the library's
# statistics, both of which run on the context's threads. 3 threads: a split of the rows that
# differs from the default's even on a machine with one or two cores.
for n in 1 3; do
    d4=$tmp/demo4-threads$n
    expect 0 --backend cpu --threads $n demo --out "$d4" --size ${W}x${H} --seed 7 --steps find
    cmp -s "$d1/demo.fits" "$d4/demo.fits" || fail "--threads $n changed demo.fits"
    cmp -s "$d1/demo_u16.pgm" "$d4/demo_u16.pgm" || fail "--threads $n changed demo_u16.pgm"
    stats4=$(printf '%s\n' "$out" | grep -E '^ *stats ' || true)
    [[ $stats4 == "$stats1" ]] || fail "--threads $n changed the stats line: '$stats4' vs '$stats1'"
done

echo "test_cli_demo_repro: all checks passed"
