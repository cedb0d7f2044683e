#!/usr/bin/env bash
# `spotwave sim stars`: random, catalogue and sky fields end to end (FITS/PGM image, truth CSV,
# JSON report), reproducibility for a seed, flux conservation, and exit codes: 2 for bad
# options, 1 (one line on stderr) for catalogues that cannot be read.
# Usage: test_cli_sim.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

# Whether two FITS files hold the same data unit (the bytes after the primary header): their
# headers differ whenever their command lines do (HISTORY records them, output names included).
same_data() {
    python3 - "$1" "$2" <<'PY'
import sys
def data(path):
    d = open(path, "rb").read()
    for b in range(0, len(d), 2880):
        for i in range(b, b + 2880, 80):
            if d[i:i + 8] == b"END     ":
                return d[b + 2880:]
    raise SystemExit(path + ": no END card")
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
PY
}
command -v python3 >/dev/null || fail "python3 is needed to read the images back"

# A FITS reader in plain Python (no numpy/astropy): prints what a check asks for.
cat >"$tmp/fits.py" <<'EOF'
import struct, sys

def read_fits(path):
    data = open(path, "rb").read()
    cards, pos = {}, 0
    while True:
        block = data[pos:pos + 2880]
        pos += 2880
        done = False
        for i in range(0, 2880, 80):
            card = block[i:i + 80].decode("ascii")
            key = card[:8].strip()
            if key == "END":
                done = True
                break
            if card[8:10] == "= ":
                cards[key] = card[10:].split("/")[0].strip()
        if done:
            break
    bitpix, w, h = int(cards["BITPIX"]), int(cards["NAXIS1"]), int(cards["NAXIS2"])
    bzero = float(cards.get("BZERO", "0"))
    fmt = {8: "B", 16: "h", 32: "i", -32: "f"}[bitpix]
    n = w * h
    vals = struct.unpack(">%d%s" % (n, fmt), data[pos:pos + n * abs(bitpix) // 8])
    return w, h, bitpix, [v + bzero for v in vals]

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    return names, [dict(zip(names, map(float, l.split(",")))) for l in lines[1:]]

cmd = sys.argv[1]
if cmd == "brightest":  # the brightest truth star's nearest pixel is bright
    w, h, _, px = read_fits(sys.argv[2])
    names, rows = read_csv(sys.argv[3])
    assert names == ["x_px", "y_px", "flux_e", "mag"], names
    assert rows, "empty truth table"
    for r in rows:
        assert -0.5 <= r["x_px"] < w - 0.5 and -0.5 <= r["y_px"] < h - 0.5, r
    b = max(rows, key=lambda r: r["flux_e"])
    v = px[int(round(b["y_px"])) * w + int(round(b["x_px"]))]
    peak = max(px)
    assert v >= 0.1 * b["flux_e"] and v >= 0.5 * peak, (b, v, peak)
    print(len(rows))
elif cmd == "sum":  # the image's sum
    w, h, _, px = read_fits(sys.argv[2])
    print("%.9g" % sum(px))
elif cmd == "header":  # BITPIX WIDTH HEIGHT
    w, h, bitpix, _ = read_fits(sys.argv[2])
    print(bitpix, w, h)
EOF
fits() { python3 "$tmp/fits.py" "$@"; }

# ---------------------------------------------------------------- a random field
expect 0 --backend cpu sim stars --random 300 --size 200x150 --sigma 1.2 --mag-range 2,9 \
    --zero-point 1e5 --seed 11 --bits 32f --noise none --out "$tmp/r.fits" --truth "$tmp/r.csv"
[[ -z $err ]] || fail "sim stars wrote to stderr on success: $err"
[[ $out == *"300 stars (random)"* ]] || fail "report: $out"
[[ $(fits header "$tmp/r.fits") == "-32 200 150" ]] || fail "r.fits: $(fits header "$tmp/r.fits")"
[[ $(head -1 "$tmp/r.csv") == "x_px,y_px,flux_e,mag" ]] || fail "truth header: $(head -1 "$tmp/r.csv")"
rows=$(fits brightest "$tmp/r.fits" "$tmp/r.csv") || fail "the brightest star is not in the image"
(( rows > 250 && rows <= 300 )) || fail "truth has $rows rows"

# Reproducible: the same seed gives the same bytes (with noise too), another seed does not. On a
# GPU the parallel and adaptive renderers add with float atomics in any order, so bit-identical
# runs are what --method deterministic promises (sim.h); on the CPU every method is.
for s in 5 5 6; do
    expect 0 sim stars --random 100 --size 64x48 --seed $s --read-noise-e 3 --sky-e 10 \
        --method deterministic \
        --bits 16 --out "$tmp/n$s.$RANDOM.fits"
done
n5=("$tmp"/n5.*.fits)
same_data "${n5[0]}" "${n5[1]}" || fail "the same seed gave different images"
n6=("$tmp"/n6.*.fits)
! same_data "${n5[0]}" "${n6[0]}" || fail "another seed gave the same image"
[[ $(fits header "${n6[0]}") == "16 64 48" ]] || fail "u16 FITS header: $(fits header "${n6[0]}")"

# PGM output (8 bits) and the JSON report.
expect 0 --backend cpu --threads 2 sim stars --random 50 --size 64x64 --bits 8 --gain 4 \
    --out "$tmp/r.pgm" --json
[[ $(head -c 2 "$tmp/r.pgm") == P5 ]] || fail "r.pgm is not a PGM"
python3 - "$out" <<'EOF' || fail "the JSON report: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["stars"] == 50 and r["rendered"] + r["skipped"] == 50, r
assert r["method"] == "openmp" and r["backend"] == "cpu" and r["pixel_type"] == "u8", r
assert r["render_ms"] >= 0 and r["truth"] is None, r
EOF

# ---------------------------------------------------------------- a catalogue: flux is conserved
cat >"$tmp/cat.csv" <<'EOF'
x_px,y_px,flux_e
20.25,30.5,1000
60.7,10.1,2500.5
# a star far outside is skipped
-500,20,7
EOF
expect 0 sim stars --catalog "$tmp/cat.csv" --size 80x50 --sigma 2 --roi 12 --noise none \
    --bits 32f --method sequential --out "$tmp/c.fits" --truth "$tmp/c.csv" --json
python3 - "$out" <<'EOF' || fail "catalogue report: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["stars"] == 3 and r["rendered"] == 2 and r["skipped"] == 1 and r["truth_rows"] == 2, r
assert r["method"] == "sequential" and r["roi_side_px"] == 25, r
EOF
total=$(fits sum "$tmp/c.fits")
python3 -c "import sys; t=float(sys.argv[1]); sys.exit(0 if abs(t-3500.5) < 3500.5e-5 else 1)" \
    "$total" || fail "the image sums to $total, not 3500.5"
[[ $(sed -n 2p "$tmp/c.csv") == "20.25,30.5,1000,nan" ]] || fail "truth row: $(sed -n 2p "$tmp/c.csv")"

# ---------------------------------------------------------------- the sky: the boresight star at the centre
cat >"$tmp/sky.csv" <<'EOF'
ra_deg,dec_deg,mag
83.5,-5.25,3
263.5,5.25,1
EOF
expect 0 sim stars --sky "$tmp/sky.csv" --attitude 83.5,-5.25,30 --focal-mm 50 --pixel-um 5 \
    --size 101x81 --noise none --bits 32f --out "$tmp/s.fits" --truth "$tmp/s.csv"
[[ $(wc -l <"$tmp/s.csv") == 2 ]] || fail "sky truth: $(cat "$tmp/s.csv")"
python3 - "$tmp/s.csv" <<'EOF' || fail "the boresight star is not at (50,40): $(cat "$tmp/s.csv")"
import sys
x, y, flux, mag = map(float, open(sys.argv[1]).read().split("\n")[1].split(","))
assert abs(x - 50) < 1e-9 and abs(y - 40) < 1e-9 and mag == 3 and abs(flux - 1e6 * 10**-1.2) < 1e-6
EOF

# ---------------------------------------------------------------- help and usage errors (2)
expect 0 sim stars --help
[[ $out == *"--catalog CSV"* && $out == *"--truth CSV"* ]] || fail "sim stars --help: $out"
expect 0 sim --help
expect 0 help sim
bad=(
    "sim"
    "sim foo"
    "sim --random 3"
    "sim stars --out $tmp/x.fits"
    "sim stars --random 3 --catalog $tmp/cat.csv --out $tmp/x.fits"
    "sim stars --random 3"
    "sim stars --random -3 --out $tmp/x.fits"
    "sim stars --random 3 --bits 12 --out $tmp/x.fits"
    "sim stars --random 3 --psf gauss --out $tmp/x.fits"
    "sim stars --random 3 --sigma -1 --out $tmp/x.fits"
    "sim stars --random 3 --sigma nan --out $tmp/x.fits"
    "sim stars --random 3 --size 0x10 --out $tmp/x.fits"
    "sim stars --random 3 --size 64x32 --roi-side 65 --out $tmp/x.fits"
    "sim stars --random 3 --roi 2 --roi-side 5 --out $tmp/x.fits"
    "sim stars --random 3 --method gpu --out $tmp/x.fits"
    "sim stars --random 3 --gain 0 --out $tmp/x.fits"
    "sim stars --random 3 --read-noise-e -1 --out $tmp/x.fits"
    "sim stars --random 3 --noise none --read-noise-e 2 --out $tmp/x.fits"
    "sim stars --random 3 --mag-range 9,2 --out $tmp/x.fits"
    "sim stars --random 3 --ratio 1 --out $tmp/x.fits"
    "sim stars --random 3 --out $tmp/x.png"
    "sim stars --random 3 --bits 32f --out $tmp/x.pgm"
    "sim stars --random 3 --wat --out $tmp/x.fits"
    "sim stars --sky $tmp/sky.csv --focal-mm 50 --pixel-um 5 --out $tmp/x.fits"
    "sim stars --sky $tmp/sky.csv --attitude 1,95,0 --focal-mm 50 --pixel-um 5 --out $tmp/x.fits"
    "sim stars --random 3 --attitude 1,2,3 --out $tmp/x.fits"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect 2 $args
    [[ $(wc -l <"$tmp/err") == 1 && $err == "spotwave sim"* ]] || fail "'$args': stderr: $err"
done
[[ ! -e $tmp/x.fits ]] || fail "a usage error wrote an image"

# ---------------------------------------------------------------- failures while running (1)
printf 'x_px,y_px,mag\n1,2,3\n4,five,6\n' >"$tmp/bad.csv"
printf 'x_px,mag\n1,3\n' >"$tmp/nocol.csv"
for cat in "$tmp/missing.csv" "$tmp" "$tmp/bad.csv" "$tmp/nocol.csv"; do
    expect 1 sim stars --catalog "$cat" --out "$tmp/y.fits"
    [[ $(wc -l <"$tmp/err") == 1 && $err == "spotwave sim stars: "* ]] || fail "'$cat': stderr: $err"
    [[ ! -e $tmp/y.fits ]] || fail "a failed run wrote an image"
done
[[ $err == *"y_px"* ]] || fail "missing column not named: $err"
expect 1 --backend cpu sim stars --random 3 --method parallel --out "$tmp/y.fits"
[[ $err == *"GPU"* ]] || fail "parallel on the CPU: $err"
expect 1 sim stars --random 3 --out "$tmp/no/such/dir/y.fits"
expect 1 sim stars --random 3 --out "$tmp/y.fits" --truth "$tmp/no/such/dir/t.csv"

echo "ok"
