#!/usr/bin/env bash
# `spotwave demo`: writes FITS (f32), PGM (u16) and PNG files that are what they claim to be,
# measures two synthetic eyes with the aberrometer to within 0.1 um of their truth, is
# reproducible for a seed, creates its output directory, and fails with exit 1 and one line
# on stderr when it cannot write.
# Usage: test_cli_demo.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

# ---------------------------------------------------------------- a demo run (non-square size)
W=96
H=64
d1=$tmp/a/b/demo1 # parents do not exist yet: demo creates them
expect 0 --backend cpu demo --out "$d1" --size ${W}x${H} --seed 7
[[ -z $err ]] || fail "demo wrote to stderr on success: $err"
[[ $out == *"identical"* ]] || fail "demo did not report the read-back check: $out"
for f in demo.fits demo_u16.pgm demo.png; do
    [[ -s $d1/$f ]] || fail "demo did not write $f"
    [[ $out == *"$f"* ]] || fail "the report does not mention $f"
done

# FITS: primary header, f32, the right size; the data fill 2880-byte records.
hdr=$(head -c 2880 "$d1/demo.fits")
[[ $hdr == "SIMPLE  ="* ]] || fail "demo.fits does not start with 'SIMPLE  ='"
[[ $hdr =~ BITPIX\ \ =\ +-32\  ]] || fail "demo.fits is not BITPIX -32"
[[ $hdr =~ NAXIS1\ \ =\ +$W\  ]] || fail "demo.fits NAXIS1 is not $W"
[[ $hdr =~ NAXIS2\ \ =\ +$H\  ]] || fail "demo.fits NAXIS2 is not $H"
size=$(wc -c <"$d1/demo.fits")
(( size % 2880 == 0 && size >= 2880 + W * H * 4 )) || fail "demo.fits has $size bytes"

# PGM: P5, the size, 16-bit, and exactly the pixel bytes after the header.
magic=$(head -c 2 "$d1/demo_u16.pgm")
[[ $magic == P5 ]] || fail "demo_u16.pgm does not start with P5"
pgm_hdr=$(head -c 32 "$d1/demo_u16.pgm" | LC_ALL=C tr -c 'P0-9 \n' '.' | tr '\n' ' ')
[[ $pgm_hdr == "P5 $W $H 65535 "* ]] || fail "demo_u16.pgm header is '$pgm_hdr'"
size=$(wc -c <"$d1/demo_u16.pgm")
(( size - W * H * 2 >= 11 && size - W * H * 2 < 512 )) || fail "demo_u16.pgm has $size bytes"

# PNG signature.
sig=$(head -c 8 "$d1/demo.png" | od -An -tx1 | tr -d ' \n')
[[ $sig == 89504e470d0a1a0a ]] || fail "demo.png has no PNG signature ($sig)"

# ---------------------------------------------------------------- the ocular aberrometer (seed 001)
# Two synthetic eyes through sw_aberrometry_run: both eyes reported, each with its pupil near the
# simulator's, its orders 2..6 coefficients within 0.1 um (RMSE) of the truth (the report's
# numbers; a working pipeline gets ~0.01 um at 1 um RMS), and a wavefront map PNG per eye.
ab=$(printf '%s\n' "$out" | grep -E '^ *aberrometry ' || true)
[[ -n $ab ]] || fail "the demo report has no aberrometry line: $out"
[[ $ab =~ reference\ ([0-9]+)\ of\ ([0-9]+)\ spots ]] || fail "no reference count in: $ab"
(( BASH_REMATCH[1] == BASH_REMATCH[2] && BASH_REMATCH[2] > 0 )) ||
    fail "the reference frame did not give every spot: $ab"
for e in 1 2; do
    rmse_line=$(printf '%s\n' "$out" | grep -E "^ *eye $e +orders 2\.\.6 RMSE " || true)
    [[ -n $rmse_line ]] || fail "no RMSE line for eye $e: $out"
    [[ $rmse_line =~ RMSE\ ([0-9]+\.[0-9]+)\ um ]] || fail "cannot read eye $e's RMSE: $rmse_line"
    awk -v r="${BASH_REMATCH[1]}" 'BEGIN { exit !(r < 0.1) }' ||
        fail "eye $e: RMSE ${BASH_REMATCH[1]} um of the orders 2..6 is not below 0.1 um"
    [[ $rmse_line =~ refraction\ over\ [0-9.]+\ mm\ [-+][0-9.]+\ D\ sphere ]] ||
        fail "no refraction for eye $e: $rmse_line"
    pupil_line=$(printf '%s\n' "$out" | grep -E "^ *eye $e +pupil " || true)
    num='(-?[0-9]+\.[0-9]+)'
    [[ $pupil_line =~ pupil\ \($num,\ $num\).*true\ \($num,\ $num\) ]] ||
        fail "cannot read eye $e's pupil: $pupil_line"
    awk -v x="${BASH_REMATCH[1]}" -v y="${BASH_REMATCH[2]}" -v tx="${BASH_REMATCH[3]}" \
        -v ty="${BASH_REMATCH[4]}" 'BEGIN { exit !((x - tx)^2 + (y - ty)^2 < 1.0) }' ||
        fail "eye $e: the pupil found is 1 px or more from the simulator's: $pupil_line"
    [[ $pupil_line =~ spots:\ ([0-9]+)\ used.*\ ([0-9]+)\ kept ]] ||
        fail "no spot counts for eye $e: $pupil_line"
    (( BASH_REMATCH[1] > 100 && BASH_REMATCH[2] > 100 && BASH_REMATCH[2] <= BASH_REMATCH[1] )) ||
        fail "eye $e: implausible spot counts: $pupil_line"
    f=demo_aberrometry_eye$e.png
    [[ -s $d1/$f ]] || fail "demo did not write $f"
    [[ $out == *"$d1/$f"* ]] || fail "the report does not mention $f"
    sig=$(head -c 8 "$d1/$f" | od -An -tx1 | tr -d ' \n')
    [[ $sig == 89504e470d0a1a0a ]] || fail "$f has no PNG signature ($sig)"
done
cmp -s "$d1/demo_aberrometry_eye1.png" "$d1/demo_aberrometry_eye2.png" &&
    fail "the two eyes' wavefront maps are the same"

# ---------------------------------------------------------------- reproducible for a seed
d2=$tmp/demo2
expect 0 --backend cpu --quiet demo --out "$d2" --size ${W}x${H} --seed 7
stats1=$(printf '%s\n' "$out" | grep -E '^ *stats ' || true) # default threads (all cores)
[[ -n $stats1 ]] || fail "the demo report has no stats line: $out"
cmp -s "$d1/demo.fits" "$d2/demo.fits" || fail "the same seed gave different demo.fits"
cmp -s "$d1/demo_u16.pgm" "$d2/demo_u16.pgm" || fail "the same seed gave different PGM files"
for e in 1 2; do
    cmp -s "$d1/demo_aberrometry_eye$e.png" "$d2/demo_aberrometry_eye$e.png" ||
        fail "the same seed gave different demo_aberrometry_eye$e.png"
done
d3=$tmp/demo3
expect 0 --backend cpu demo --out "$d3" --size ${W}x${H} --seed 8
cmp -s "$d1/demo.fits" "$d3/demo.fits" && fail "different seeds gave the same demo.fits"
cmp -s "$d1/demo_aberrometry_eye1.png" "$d3/demo_aberrometry_eye1.png" &&
    fail "different seeds gave the same eyes (demo_aberrometry_eye1.png)"
# The thread count must not change the results. demo.fits is built by the command itself on one
# thread; demo_u16.pgm comes from the library's conversion and the stats line from the library's
# statistics, both of which run on the context's threads. 3 threads: a split of the rows that
# differs from the default's even on a machine with one or two cores.
for n in 1 3; do
    d4=$tmp/demo4-threads$n
    expect 0 --backend cpu --threads $n demo --out "$d4" --size ${W}x${H} --seed 7
    cmp -s "$d1/demo.fits" "$d4/demo.fits" || fail "--threads $n changed demo.fits"
    cmp -s "$d1/demo_u16.pgm" "$d4/demo_u16.pgm" || fail "--threads $n changed demo_u16.pgm"
    stats4=$(printf '%s\n' "$out" | grep -E '^ *stats ' || true)
    [[ $stats4 == "$stats1" ]] || fail "--threads $n changed the stats line: '$stats4' vs '$stats1'"
done

# The seed is decimal even with a leading zero (not octal), or hex after 0x.
for s in 010 0xa 0XA; do
    expect 0 --backend cpu demo --out "$tmp/seed-$s" --size 32x32 --seed $s
    [[ $out == *"seed 10:"* ]] || fail "--seed $s is not read as 10: $out"
done
expect 0 --backend cpu demo --out "$tmp/seed-10" --size 32x32 --seed 10
for s in 010 0xa 0XA; do
    for f in demo.fits demo_u16.pgm; do
        cmp -s "$tmp/seed-10/$f" "$tmp/seed-$s/$f" || fail "--seed $s and --seed 10 gave different $f"
    done
done
expect 0 --backend cpu demo --out "$tmp/seed-09" --size 32x32 --seed 09
[[ $out == *"seed 9:"* ]] || fail "--seed 09 is not read as 9: $out"

# ---------------------------------------------------------------- the default output directory
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && "$SW" demo --size 32x32 >/dev/null) || fail "demo with the default --out failed"
[[ -s $tmp/cwd/spotwave-demo/demo.fits ]] || fail "demo did not write into ./spotwave-demo"

# ---------------------------------------------------------------- cannot write: exit 1, one line
: >"$tmp/regular-file"
for q in "" --quiet; do
    expect 1 $q demo --out "$tmp/regular-file/out" --size 32x32
    n=$(printf '%s\n' "$err" | grep -c . || true)
    [[ $n == 1 ]] || fail "unwritable --out: expected one line on stderr, got $n: $err"
    [[ $err == "spotwave demo: "* ]] || fail "unwritable --out: the line does not start with 'spotwave demo: ': $err"
    [[ $err == *"$tmp/regular-file/out"* ]] || fail "unwritable --out: the line does not name the path: $err"
done
[[ ! -e $tmp/regular-file/out ]] || fail "something was created under a regular file"

echo "test_cli_demo: all checks passed"
