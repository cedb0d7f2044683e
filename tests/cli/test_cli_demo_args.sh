#!/usr/bin/env bash
# `spotwave demo`'s options: the seed is decimal or hex, --steps chooses stages and refuses
# unknown ones, the default output directory, and exit 1 with one line on stderr when it cannot
# write.
# Usage: test_cli_demo_args.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

# The seed is decimal even with a leading zero (not octal), or hex after 0x.
for s in 010 0xa 0XA; do
    expect 0 --backend cpu demo --out "$tmp/seed-$s" --size 32x32 --seed $s --steps find
    [[ $out == *"seed 10:"* ]] || fail "--seed $s is not read as 10: $out"
done
expect 0 --backend cpu demo --out "$tmp/seed-10" --size 32x32 --seed 10 --steps find
for s in 010 0xa 0XA; do
    for f in demo.fits demo_u16.pgm; do
        cmp -s "$tmp/seed-10/$f" "$tmp/seed-$s/$f" || fail "--seed $s and --seed 10 gave different $f"
    done
done
expect 0 --backend cpu demo --out "$tmp/seed-09" --size 32x32 --seed 09 --steps find
[[ $out == *"seed 9:"* ]] || fail "--seed 09 is not read as 9: $out"

# ---------------------------------------------------------------- the default output directory
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && "$SW" demo --size 32x32 --steps find >/dev/null) || fail "demo with the default --out failed"
[[ -s $tmp/cwd/spotwave-demo/demo.fits ]] || fail "demo did not write into ./spotwave-demo"

# ---------------------------------------------------------------- cannot write: exit 1, one line
: >"$tmp/regular-file"
for q in "" --quiet; do
    expect 1 $q demo --out "$tmp/regular-file/out" --size 32x32 --steps find
    n=$(printf '%s\n' "$err" | grep -c . || true)
    [[ $n == 1 ]] || fail "unwritable --out: expected one line on stderr, got $n: $err"
    [[ $err == "spotwave demo: "* ]] || fail "unwritable --out: the line does not start with 'spotwave demo: ': $err"
    [[ $err == *"$tmp/regular-file/out"* ]] || fail "unwritable --out: the line does not name the path: $err"
done
[[ ! -e $tmp/regular-file/out ]] || fail "something was created under a regular file"

# ---------------------------------------------------------------- --steps
expect 0 --backend cpu demo --out "$tmp/steps" --size 32x32 --steps find,centroid
[[ $out == *" find "* && $out == *" centroid "* ]] || fail "--steps find,centroid did not run both: $out"
printf '%s\n' "$out" | grep -qE '^ *(eyes|fit|aberrometry|sabre|loop) ' &&
    fail "--steps find,centroid ran other stages: $out"
for bad in "" nope find,nope "find,"; do
    expect 2 demo --out "$tmp/steps-bad" --steps "$bad"
    [[ $err == *"--steps"* ]] || fail "--steps '$bad': the usage error does not name --steps: $err"
done
[[ ! -e $tmp/steps-bad ]] || fail "a refused --steps still created the output directory"

echo "test_cli_demo_args: all checks passed"
