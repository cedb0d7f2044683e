#!/usr/bin/env bash
# `spotwave demo`, one whole run: writes FITS (f32), PGM (u16) and PNG files that are what they
# claim to be, measures two synthetic eyes with the aberrometer to within 0.1 um of their truth,
# and reconstructs a turbulent wavefront with D-SABRE to a relative RMS error below 0.15.
# test_cli_demo_repro.sh checks that it is reproducible, test_cli_demo_args.sh its options and
# failures (split so that no test comes near its time limit on a loaded 2-core machine).
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

# ---------------------------------------------------------------- D-SABRE (seed 002)
# A 64x64 SH array under a von Karman screen, its exact lenslet-mean slopes through D-SABRE (8x8
# partitions, H-PME), global SABRE and Fried: each with its relative RMS error against the screen
# (noise-free, so only the fitting error of the lenslet sampling: ~0.08 at d/r0 = 2.6). D-SABRE
# must be below 0.15 and close to global SABRE (a broken piston equalisation leaves steps between
# partitions and multiplies the error), and its wavefront is in demo_sabre.fits.
num='([0-9]+\.[0-9]+)'
sb=$(printf '%s\n' "$out" | grep -E '^ *sabre +[0-9]+x[0-9]+ SH lenslets' || true)
[[ $sb =~ \ $num\ um\ RMS\ over\ the\ array ]] || fail "no screen line in the sabre step: $out"
screen_rms=${BASH_REMATCH[1]}
sb=$(printf '%s\n' "$out" | grep -E '^ *sabre +D-SABRE ' || true)
[[ $sb =~ 8x8\ partitions.*H-PME.*relative\ RMS\ error\ $num ]] ||
    fail "cannot read D-SABRE's relative RMS error: $out"
rel_ds=${BASH_REMATCH[1]}
[[ $sb =~ run\ $num\ us ]] || fail "no D-SABRE run time: $sb"
sb=$(printf '%s\n' "$out" | grep -E '^ *sabre +global SABRE: ' || true)
[[ $sb =~ relative\ RMS\ error\ $num ]] || fail "cannot read global SABRE's error: $out"
rel_gl=${BASH_REMATCH[1]}
sb=$(printf '%s\n' "$out" | grep -E '^ *sabre +Fried ' || true)
[[ $sb =~ relative\ RMS\ error\ $num ]] || fail "cannot read Fried's error: $out"
rel_fr=${BASH_REMATCH[1]}
awk -v d="$rel_ds" -v g="$rel_gl" -v f="$rel_fr" \
    'BEGIN { exit !(d > 0 && d < 0.15 && g > 0 && g < 0.15 && f > 0 && f < 0.15 && d <= 1.5 * g) }' ||
    fail "relative RMS errors D-SABRE $rel_ds, global $rel_gl, Fried $rel_fr: expected all in" \
        "(0, 0.15) and D-SABRE within 1.5x global SABRE"
f=$d1/demo_sabre.fits
[[ -s $f ]] || fail "demo did not write demo_sabre.fits"
[[ $out == *"$f"* ]] || fail "the report does not mention $f"
# The map: a 512x512 f32 FITS image of the wavefront over the array, finite, mean 0 (piston
# removed) and an RMS near the screen's (the reconstruction is within ~10 % of the screen).
command -v python3 >/dev/null || fail "python3 is needed to check demo_sabre.fits"
python3 - "$f" "$screen_rms" <<'EOF' || fail "demo_sabre.fits is not the D-SABRE wavefront map"
import math, struct, sys
data = open(sys.argv[1], "rb").read()
hdr = data[:2880].decode("ascii")
cards = {hdr[i:i + 8].strip(): hdr[i + 10:i + 80].split("/")[0].strip() for i in range(0, 2880, 80)}
assert hdr.startswith("SIMPLE  =") and cards["BITPIX"] == "-32", cards
assert cards["NAXIS"] == "2" and cards["NAXIS1"] == "512" and cards["NAXIS2"] == "512", cards
n = 512 * 512
assert len(data) % 2880 == 0 and len(data) >= 2880 + 4 * n, len(data)
v = struct.unpack(">%df" % n, data[2880:2880 + 4 * n])
assert all(math.isfinite(x) for x in v), "non-finite values"
mean = sum(v) / n
rms = math.sqrt(sum((x - mean) ** 2 for x in v) / n)
screen = float(sys.argv[2])
assert abs(mean) < 1e-3 * rms, (mean, rms)
assert 0.85 * screen < rms < 1.15 * screen, (rms, screen)
EOF

echo "test_cli_demo: all checks passed"
