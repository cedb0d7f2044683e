#!/usr/bin/env bash
# `spotwave centroid` and saturation (centroid.h "Saturation"): on hand-made frames of a 4 x 4
# grid of 16-px lenslets, each with a symmetric spot, one spot clipped at the 8-bit full scale:
# the CSV's column 'saturated' flags exactly that lenslet (kept valid, its centroid at the
# spot's centre), the summary and --json count it; --drop-saturated makes it invalid; explicit
# --saturation levels, none, --window, a 16-bit frame (65535 by default, a 12-bit camera's 4095),
# a float frame (no check unless a level is given), a saturated reference image (counted; left
# out of the mask when dropped, an error when --mask keeps it), and the usage errors.
# Usage: test_cli_centroid_saturation.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to write the frames and read the tables"

# frames.py KIND PATH [HOT]: lenslet l (ix = l % 4, iy = l // 4) holds a 5 x 5 spot of peak
# 100 + 10 l at its centre pixel (16 ix + 8, 16 iy + 8), weights 1/4, 1/2, 1, 1/2, 1/4 per axis,
# floored; lenslet HOT (default 9 = (1, 2)) a peak of 400 clipped at the top (255 for u8), so
# its centroid stays at the centre. A 255 pixel sits in lenslet 3's corner (48, 0).
# KIND: u8 (PGM), u16 (PGM; lenslet HOT at 65535, lenslet 3 has a pixel at 4095 too), f32 (FITS;
# lenslet HOT peaks at 1e6).
cat >"$tmp/frames.py" <<'EOF'
import struct, sys
kind, path = sys.argv[1], sys.argv[2]
hot = int(sys.argv[3]) if len(sys.argv) > 3 else 9
w = h = 64
img = [[0.0] * w for _ in range(h)]
k = [0.25, 0.5, 1.0, 0.5, 0.25]
top = {"u8": 255.0, "u16": 65535.0, "f32": 1e30}[kind]
for l in range(16):
    cx, cy = 16 * (l % 4) + 8, 16 * (l // 4) + 8
    peak = 100.0 + 10 * l
    if l == hot:
        peak = {"u8": 400.0, "u16": 70000.0, "f32": 1e6}[kind]
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            img[cy + dy][cx + dx] = min(float(int(peak * k[dx + 2] * k[dy + 2])), top)
img[0][48] = 255.0
if kind == "u16":
    img[3][48 + 3] = 4095.0  # lenslet 3 too
if kind == "u8":
    open(path, "wb").write(b"P5\n64 64\n255\n" + bytes(int(v) for r in img for v in r))
elif kind == "u16":
    open(path, "wb").write(b"P5\n64 64\n65535\n" +
                           b"".join(struct.pack(">H", int(v)) for r in img for v in r))
else:
    cards = ["SIMPLE  = %20s" % "T", "BITPIX  = %20d" % -32, "NAXIS   = %20d" % 2,
             "NAXIS1  = %20d" % w, "NAXIS2  = %20d" % h, "END"]
    head = "".join(c.ljust(80) for c in cards)
    head += " " * (-len(head) % 2880)
    body = b"".join(struct.pack(">f", v) for r in img for v in r)
    body += b"\0" * (-len(body) % 2880)
    open(path, "wb").write(head.encode("ascii") + body)
EOF

# flags.py CSV WANT_SATURATED WANT_INVALID: the 'saturated' column lists exactly the
# lenslets of WANT_SATURATED (comma-separated flat indices, or -), 'valid' is 0 exactly on
# WANT_INVALID, and every valid lenslet's centroid is its spot's centre.
cat >"$tmp/flags.py" <<'EOF'
import math, sys
lines = [l.strip() for l in open(sys.argv[1]) if l.strip()]
names = lines[0].split(",")
assert names[names.index("saturated"):] == ["saturated", "status", "x_var", "y_var", "snr"], names
assert names[:6] == ["ix", "iy", "x_px", "y_px", "intensity", "valid"], names
ids = lambda s: set() if s == "-" else {int(v) for v in s.split(",")}
want_sat, want_bad = ids(sys.argv[2]), ids(sys.argv[3])
sat, bad = set(), set()
for line in lines[1:]:
    r = dict(zip(names, line.split(",")))
    l = 4 * int(r["iy"]) + int(r["ix"])
    if r["saturated"] == "1":
        sat.add(l)
    else:
        assert r["saturated"] == "0", r
    if r["valid"] == "0":
        bad.add(l)
        assert r["x_px"] == "nan" and r["y_px"] == "nan", r
    elif l != 3:  # lenslet 3's corner pixel pulls its centroid
        assert float(r["x_px"]) == 16 * int(r["ix"]) + 8, r
        assert float(r["y_px"]) == 16 * int(r["iy"]) + 8, r
assert sat == want_sat, (sorted(sat), sorted(want_sat))
assert bad == want_bad, (sorted(bad), sorted(want_bad))
EOF

cat >"$tmp/report.py" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert eval(sys.argv[2]), r
EOF

flags() { python3 "$tmp/flags.py" "$@"; }
json_ok() {
    printf '%s\n' "$out" >"$tmp/r.json"
    python3 "$tmp/report.py" "$tmp/r.json" "$1"
}

python3 "$tmp/frames.py" u8 "$tmp/a.pgm"
python3 "$tmp/frames.py" u8 "$tmp/ref.pgm" -1 # no clipped spot, the corner pixel stays
python3 "$tmp/frames.py" u16 "$tmp/b.pgm"
python3 "$tmp/frames.py" f32 "$tmp/c.fits"
g=(--pitch 16 --grid 4x4 --origin 0,0)

# 8-bit frame, default level 255: the clipped spot's lenslet 9 and lenslet 3's corner flagged,
# both kept valid; the summary and the JSON count them.
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --out "$tmp/d.csv"
flags "$tmp/d.csv" 3,9 - || fail "default level: flags"
[[ $out == *"saturated  2 lenslets (pixels >= 255) in some frame, per frame 2..2; kept valid"* ]] ||
    fail "summary: $out"
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --out "$tmp/d.csv" --json
json_ok 'r["saturation_level"] == 255 and r["saturated_lenslets"] == 2 and r["saturated_per_frame"] == [2] and r["saturated_total"] == 2 and r["drop_saturated"] is False and r["valid_total"] == 16 and r["reference_saturated"] is None' ||
    fail "default level: JSON $out"

# --drop-saturated: both invalid (nan), the rest unchanged; the slopes file leaves them nan.
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --drop-saturated --out "$tmp/dd.csv" \
    --slopes "$tmp/ds.csv" --json
flags "$tmp/dd.csv" 3,9 3,9 || fail "dropped: flags"
json_ok 'r["valid_total"] == 14 and r["saturated_lenslets"] == 2 and r["drop_saturated"] is True' ||
    fail "dropped: JSON $out"
[[ $(awk -F, '$1 == 1 && $2 == 2' "$tmp/ds.csv") == "1,2,nan,nan" ]] || fail "dropped: slopes file"

# Explicit levels: 150.5 flags the peaks >= 151 (lenslets 6..15: 160 .. 250) and the corner;
# 256: nothing; none: nothing, and the JSON says no level.
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation 150.5 --out "$tmp/l.csv"
flags "$tmp/l.csv" 3,6,7,8,9,10,11,12,13,14,15 - || fail "level 150.5: flags"
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation 256 --out "$tmp/l.csv"
flags "$tmp/l.csv" - - || fail "level 256: flags"
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation none --drop-saturated \
    --out "$tmp/l.csv" --json
flags "$tmp/l.csv" - - || fail "no level: flags"
json_ok 'r["saturation_level"] is None and r["saturated_lenslets"] is None and r["valid_total"] == 16' ||
    fail "no level: JSON $out"

# --window 1: the corner pixel is outside lenslet 3's region; the clipped spot is not.
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --window 1 --out "$tmp/w.csv"
flags "$tmp/w.csv" 9 - || fail "window 1: flags"

# Conditioning does not change the flags (the level applies to raw pixels).
expect 0 --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --threshold-fraction 0.3 --gamma 1.2 \
    --out "$tmp/t.csv"
flags "$tmp/t.csv" 3,9 - || fail "conditioned: flags"

# 16 bits: 65535 by default (lenslet 9 only: lenslet 3's 255 and 4095 are far below); a 12-bit
# camera's 4095 flags lenslet 3 as well.
expect 0 --backend cpu centroid "$tmp/b.pgm" "${g[@]}" --out "$tmp/b.csv"
flags "$tmp/b.csv" 9 - || fail "u16 default level: flags"
expect 0 --backend cpu centroid "$tmp/b.pgm" "${g[@]}" --saturation 4095 --out "$tmp/b.csv"
flags "$tmp/b.csv" 3,9 - || fail "u16 level 4095: flags"

# A float frame: no level by default (the summary says so), an explicit one flags.
expect 0 --backend cpu centroid "$tmp/c.fits" "${g[@]}" --out "$tmp/c.csv"
flags "$tmp/c.csv" - - || fail "f32 without a level: flags"
[[ $out == *"saturated  not checked (no level for f32 frames: give --saturation)"* ]] ||
    fail "f32 summary: $out"
expect 0 --backend cpu centroid "$tmp/c.fits" "${g[@]}" --saturation 1e5 --out "$tmp/c.csv"
flags "$tmp/c.csv" 9 - || fail "f32 level 1e5: flags"

# A saturated reference image: counted; dropped, its lenslet leaves the mask; --mask keeping it
# with --drop-saturated is an error that says why.
expect 0 --backend cpu centroid "$tmp/ref.pgm" "${g[@]}" --reference "$tmp/a.pgm" \
    --out "$tmp/r.csv" --json
json_ok 'r["reference_saturated"] == 2 and r["lenslets_in_mask"] == 16 and r["saturated_lenslets"] == 1' ||
    fail "saturated reference: JSON $out"
expect 0 --backend cpu centroid "$tmp/ref.pgm" "${g[@]}" --reference "$tmp/a.pgm" \
    --drop-saturated --out "$tmp/r.csv" --json
json_ok 'r["reference_saturated"] == 2 and r["lenslets_in_mask"] == 14 and r["mask_from_reference"] is True' ||
    fail "saturated reference, dropped: JSON $out"
expect 0 --backend cpu centroid "$tmp/ref.pgm" "${g[@]}" --reference "$tmp/a.pgm" \
    --drop-saturated --out "$tmp/r.csv"
[[ $out == *"reference  2 lenslets saturated in $tmp/a.pgm (left out of the mask)"* ]] ||
    fail "saturated reference summary: $out"
printf 'ix,iy,valid\n3,0,0\n1,2,1\n' >"$tmp/mask.csv"
expect 1 --backend cpu centroid "$tmp/ref.pgm" "${g[@]}" --reference "$tmp/a.pgm" \
    --drop-saturated --mask "$tmp/mask.csv" --out "$tmp/r.csv"
expect_one_line
[[ $err == *"lenslet (1,2) has no valid centroid (saturated, and --drop-saturated drops it)"* ]] ||
    fail "mask keeping a dropped reference lenslet: $err"

# Usage errors.
expect_usage --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation -1
expect_usage --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation 0
expect_usage --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation lots
expect_usage --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --saturation inf
expect_usage --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --algorithm pyramid --drop-saturated
[[ $err == *"--drop-saturated goes with --algorithm cog"* ]] || fail "pyramid: $err"
expect_usage --backend cpu centroid "$tmp/a.pgm" "${g[@]}" --algorithm com --saturation 200

echo ok
