#!/usr/bin/env bash
# `spotwave sim sh` and `spotwave sim eye`: a Zernike wavefront's spot image, truth table and
# reference end to end (header, one row per lenslet, spots moved the way a defocus moves them),
# a phase screen, turbulence, binocular synthetic eyes with their truth files, reproducibility,
# --help, and exit codes: 2 (one line pointing at --help) for bad options, 1 (one line) for
# inputs that cannot be used.
# Usage: test_cli_sim_sh.sh PATH/TO/spotwave
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

# A FITS reader in plain Python (no numpy/astropy), and CSV checks.
cat >"$tmp/check.py" <<'EOF'
import json, math, struct, sys

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
if cmd == "header":  # BITPIX WIDTH HEIGHT
    w, h, bitpix, _ = read_fits(sys.argv[2])
    print(bitpix, w, h)
elif cmd == "defocus":  # truth of a positive (OSA: myopic, converging) defocus: spots move towards the pupil centre
    names, rows = read_csv(sys.argv[2])
    assert names == ["ix", "iy", "x_px", "y_px", "ref_x_px", "ref_y_px", "illum"], names
    cx, cy = float(sys.argv[3]), float(sys.argv[4])
    lit = [r for r in rows if r["illum"] > 0.99]
    assert len(lit) > 50, len(lit)
    for r in lit:
        dx, dy = r["x_px"] - r["ref_x_px"], r["y_px"] - r["ref_y_px"]
        ux, uy = r["ref_x_px"] - cx, r["ref_y_px"] - cy
        # the shift is radial and grows linearly: dx / ux = dy / uy = the same constant
        if abs(ux) > 10:
            k = dx / ux
            assert k < 0, r
            assert abs(dy - k * uy) < 1e-6 * max(1, abs(dy)) + 1e-6, r
    dark = [r for r in rows if r["illum"] == 0]
    assert all(math.isnan(r["x_px"]) for r in dark), "unlit lenslets must have nan positions"
    print(len(rows))
elif cmd == "spots":  # the brightest pixel near each lit lenslet's true position is a spot
    w, h, _, px = read_fits(sys.argv[2])
    names, rows = read_csv(sys.argv[3])
    for r in rows:
        if r["illum"] < 0.99:
            continue
        x, y = int(round(r["x_px"])), int(round(r["y_px"]))
        v = px[y * w + x]
        box = [px[yy * w + xx] for yy in range(y - 6, y + 7) for xx in range(x - 6, x + 7)
               if 0 <= xx < w and 0 <= yy < h]
        assert v >= 0.5 * max(box) and v > 10, (r, v, max(box))
elif cmd == "corner":  # pixel value at (x, y)
    w, h, _, px = read_fits(sys.argv[2])
    print("%g" % px[int(sys.argv[4]) * w + int(sys.argv[3])])
elif cmd == "json":  # evaluates an assertion on the report
    r = json.loads(open(sys.argv[2]).read())
    assert eval(sys.argv[3]), r
EOF
check() { python3 "$tmp/check.py" "$@"; }

# ---------------------------------------------------------------- sim sh: a Zernike wavefront
cat >"$tmp/z.csv" <<'EOF'
n,m,coef_um
2,0,0.8
EOF
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" --grid 12x10 --pitch 24 --size 300x260 \
    --pupil-mm 1.2 --noise none --bits 32f --out "$tmp/a.fits" --truth "$tmp/a.csv" \
    --reference "$tmp/ref.fits" --json
[[ -z $err ]] || fail "sim sh wrote to stderr on success: $err"
printf '%s\n' "$out" >"$tmp/a.json"
check json "$tmp/a.json" 'r["source"] == "zernike" and r["grid_nx"] == 12 and r["grid_ny"] == 10 and r["width"] == 300 and r["origin_x_px"] == 6 and r["origin_y_px"] == 10 and 0 < r["lenslets_lit"] < 120 and abs(r["zernike_radius_um"] - 600) < 1e-9 and abs(r["rms_um"] - 0.8) < 1e-12' ||
    fail "sim sh report: $out"
[[ $(check header "$tmp/a.fits") == "-32 300 260" ]] || fail "a.fits: $(check header "$tmp/a.fits")"
[[ $(check header "$tmp/ref.fits") == "-32 300 260" ]] || fail "ref.fits header"
[[ $(head -1 "$tmp/a.csv") == "ix,iy,x_px,y_px,ref_x_px,ref_y_px,illum" ]] ||
    fail "truth header: $(head -1 "$tmp/a.csv")"
# The grid is centred: origin (6, 10), so the array (and the pupil) centre is (149.5, 129.5).
rows=$(check defocus "$tmp/a.csv" 149.5 129.5) || fail "the truth is not a defocus"
[[ $rows == 120 ]] || fail "truth has $rows rows, not 12 x 10"
check spots "$tmp/a.fits" "$tmp/a.csv" || fail "the spots are not where the truth says"
same_data "$tmp/a.fits" "$tmp/ref.fits" && fail "the reference equals the aberrated image"

# Text report, 16-bit default, PGM output.
expect 0 sim sh --zernike "$tmp/z.csv" --bits 8 --flux 3000 --out "$tmp/b.pgm"
[[ $(head -c 2 "$tmp/b.pgm") == P5 ]] || fail "b.pgm is not a PGM"
[[ $out == *"256 of 256 lenslets lit"* ]] || fail "sim sh report: $out"

# A flat wavefront (no source), diffraction spots, an elliptical obscured pupil.
expect 0 sim sh --grid 6x6 --pitch 20 --model diffraction --pupil-mm 0.6 --ellipse 0.7,30 \
    --obscuration 0.2 --bits 32f --out "$tmp/d.fits" --truth "$tmp/d.csv" --json
printf '%s\n' "$out" >"$tmp/d.json"
check json "$tmp/d.json" 'r["source"] == "flat" and r["model"] == "diffraction" and r["width"] == 120' ||
    fail "diffraction report: $out"

# Turbulence: a screen covering the array; the same seed gives the same image. (Bit-identical
# runs are the CPU renderer's promise: on a GPU overlapping spots add with float atomics in any
# order.)
for s in 3 3 4; do
    expect 0 --backend cpu sim sh --turbulence r0=0.05,L0=20 --diameter-m 2 --grid 8x8 --seed $s \
        --out "$tmp/t$s.$RANDOM.fits"
done
t3=("$tmp"/t3.*.fits)
t4=("$tmp"/t4.*.fits)
same_data "${t3[0]}" "${t3[1]}" || fail "the same turbulence seed gave different images"
same_data "${t3[0]}" "${t4[0]}" && fail "another turbulence seed gave the same image"
# Kolmogorov: L0=inf is L0=0.
for L in 0 inf; do
    expect 0 --backend cpu sim sh --turbulence r0=0.05,L0=$L --diameter-m 2 --grid 8x8 --seed 3 \
        --out "$tmp/k$L.fits"
done
same_data "$tmp/k0.fits" "$tmp/kinf.fits" || fail "L0=inf and L0=0 gave different screens"
same_data "$tmp/k0.fits" "${t3[0]}" && fail "L0=0 gave the L0=20 screen"

# Turbulence on the sky: --diameter-m maps the array (or --pupil-mm) onto the telescope, so r0
# means the sky's. With the same seed, twice the diameter (Kolmogorov) is the same screen
# stretched: the wavefront's RMS over the pupil, theory's and every slope grow by exactly
# (D/r0)^(5/6) = 2^(5/6), i.e. the slopes' variance as (D/r0)^(5/3). r0 in the array's plane (the
# meaning before --diameter-m) is the diameter the array spans there: D = 16 x 176 um with r0 and
# L0 scaled by A / D gives the 8 m telescope's screen.
for D in 4 8; do
    expect 0 --backend cpu sim sh --grid 8x8 --pitch 16 --noise none --bits 32f \
        --turbulence r0=0.15,L0=inf --diameter-m $D --seed 5 --json --out "$tmp/d$D.fits" \
        --truth "$tmp/d$D.csv"
    printf '%s\n' "$out" >"$tmp/d$D.json"
done
python3 - "$tmp" <<'PY' || fail "the turbulence does not scale as (D/r0)^(5/6) with --diameter-m"
import json, math, sys
t = sys.argv[1]
def slopes(path):
    rows = [l.strip().split(",") for l in open(path)][1:]
    return [(float(r[2]) - float(r[4]), float(r[3]) - float(r[5])) for r in rows]
a, b = slopes(t + "/d4.csv"), slopes(t + "/d8.csv")
ja, jb = (json.load(open(t + "/d%d.json" % d)) for d in (4, 8))
k = 2 ** (5 / 6)
assert ja["diameter_m"] == 4 and jb["diameter_m"] == 8 and ja["r0_m"] == 0.15, ja
assert abs(jb["rms_um"] / ja["rms_um"] - k) < 1e-9 * k, (ja, jb)
assert abs(jb["rms_theory_um"] / ja["rms_theory_um"] - k) < 1e-9 * k, (ja, jb)
assert max(abs(y - k * x) for p, q in zip(a, b) for x, y in zip(p, q)) < 1e-9, "slopes"
assert sum(x * x + y * y for x, y in a) > 1.0  # not a flat wavefront: r0 is the sky's
PY
A=$(awk 'BEGIN { printf "%.17g", 16 * 176e-6 }')
R0=$(awk -v a="$A" 'BEGIN { printf "%.17g", 0.15 * a / 8 }')
L0=$(awk -v a="$A" 'BEGIN { printf "%.17g", 25 * a / 8 }')
expect 0 --backend cpu sim sh --grid 16x16 --pitch 16 --turbulence r0=0.15,L0=25 --diameter-m 8 \
    --seed 2 --json --out "$tmp/sky.fits"
printf '%s\n' "$out" >"$tmp/sky.json"
expect 0 --backend cpu sim sh --grid 16x16 --pitch 16 --turbulence "r0=$R0,L0=$L0" \
    --diameter-m "$A" --seed 2 --json --out "$tmp/plane.fits"
printf '%s\n' "$out" >"$tmp/plane.json"
python3 - "$tmp/sky.json" "$tmp/plane.json" <<'PY' || fail "r0 in the array's plane is not D = A"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert abs(a["rms_um"] / b["rms_um"] - 1) < 1e-9 and abs(a["rms_theory_um"] / b["rms_theory_um"] - 1) < 1e-9, (a, b)
PY
# ... and over 12 seeds the mean square RMS over the pupil (square array, then a circular pupil)
# is von Karman's piston-removed variance for D, r0 and L0 (sw_turbulence_pupil_variance) within
# 25 % (L0 = D / 2: a standard error of ~5 %; tests/unit/test_sim_turbulence_pupil.c checks the
# screens themselves to 3 %).
for pupil in "" "--pupil-mm 0.3"; do
    rm -f "$tmp"/rms*.json
    for s in $(seq 1 12); do
        # shellcheck disable=SC2086 # $pupil is two words or none
        expect 0 --backend cpu sim sh --grid 8x8 --pitch 8 --noise none --bits 32f $pupil \
            --turbulence r0=0.1,L0=1 --diameter-m 2 --seed "$s" --json --out "$tmp/r.fits"
        printf '%s\n' "$out" >"$tmp/rms$s.json"
    done
    python3 - "$tmp"/rms*.json <<'PY' || fail "sim sh turbulence ($pupil): the RMS over the pupil is not theory's"
import json, sys
r = [json.load(open(p)) for p in sys.argv[1:]]
ratio = sum(x["rms_um"] ** 2 for x in r) / sum(x["rms_theory_um"] ** 2 for x in r)
print("sim sh turbulence: mean square RMS over the pupil / theory %.3f (%d seeds)" % (ratio, len(r)))
assert len(r) == 12 and abs(ratio - 1) < 0.25, ratio
PY
done

# A phase screen from a FITS file: the turbulence image's own screen is not at hand, so use a
# sim sh output (any 2-D FITS) as an optical path map with a tiny scale.
expect 0 sim sh --screen "$tmp/ref.fits" --screen-spacing-um 20 --screen-scale-um 1e-4 \
    --grid 8x8 --pitch 24 --out "$tmp/s.fits"

# ---------------------------------------------------------------- sim eye
expect 0 --backend cpu sim eye --binocular --rms-um 1.5 --seed 5 --out "$tmp/eye.fits" \
    --truth "$tmp/eye" --reference "$tmp/eye_ref.fits" --json
printf '%s\n' "$out" >"$tmp/eye.json"
check json "$tmp/eye.json" 'r["eyes"] == 2 and r["source"] == "population" and r["population_mm"] == 6.0 and r["width"] == 1280 and r["height"] == 640 and r["pixel_type"] == "u8" and all(abs(e["rms_um"] - 1.5) < 1e-9 and e["lenslets_lit"] > 200 for e in r["eye"])' ||
    fail "sim eye report: $out"
[[ $(check header "$tmp/eye.fits") == "8 1280 640" ]] || fail "eye.fits header"
[[ $(check header "$tmp/eye_ref.fits") == "8 1280 640" ]] || fail "eye_ref.fits header"
for e in 0 1; do
    [[ $(head -1 "$tmp/eye_eye${e}_spots.csv") == "ix,iy,x_px,y_px,ref_x_px,ref_y_px,illum" ]] ||
        fail "eye $e spots header"
    [[ $(wc -l <"$tmp/eye_eye${e}_spots.csv") == 801 ]] || fail "eye $e: not 40 x 20 lenslets"
    [[ $(head -1 "$tmp/eye_eye${e}_zernike.csv") == "j,n,m,noll,coef_um" ]] ||
        fail "eye $e zernike header"
    [[ $(wc -l <"$tmp/eye_eye${e}_zernike.csv") == 37 ]] || fail "eye $e: not 36 terms"
done
[[ $(head -1 "$tmp/eye_pupils.csv") == pupil,cx_px,cy_px,a_px,b_px,angle_deg* ]] ||
    fail "pupils header: $(head -1 "$tmp/eye_pupils.csv")"
[[ $(sed -n 2p "$tmp/eye_pupils.csv") == 0,319.5,319.5,288,288,0,* ]] ||
    fail "pupil 0: $(sed -n 2p "$tmp/eye_pupils.csv")"
[[ $(sed -n 3p "$tmp/eye_pupils.csv") == 1,959.5,319.5,288,288,0,* ]] ||
    fail "pupil 1: $(sed -n 3p "$tmp/eye_pupils.csv")"
[[ $(wc -l <"$tmp/eye_pupils.csv") == 3 ]] || fail "pupils: not two rows"

# Reproducible (on the CPU, as above); another seed draws other eyes.
expect 0 --backend cpu sim eye --binocular --rms-um 1.5 --seed 5 --out "$tmp/eye2.fits"
same_data "$tmp/eye.fits" "$tmp/eye2.fits" || fail "the same seed gave different eye images"
expect 0 --backend cpu sim eye --binocular --rms-um 1.5 --seed 6 --out "$tmp/eye3.fits"
same_data "$tmp/eye.fits" "$tmp/eye3.fits" && fail "another seed gave the same eye image"

# No artefacts and no noise: the iris is black; given coefficients, a refraction, an ellipse.
expect 0 sim eye --no-artefacts --noise none --bits 32f --zernike "$tmp/z.csv" --sphere-d -1 \
    --ellipse 0.8,20 --pupil-px 400 --eye-center 300,330 --out "$tmp/clean.fits" \
    --truth "$tmp/clean"
[[ $(check corner "$tmp/clean.fits" 2 2) == 0 ]] || fail "a corner of the clean eye is not 0"
[[ $(sed -n 2p "$tmp/clean_pupils.csv") == 0,300,330,200,160,20,* ]] ||
    fail "clean pupil: $(sed -n 2p "$tmp/clean_pupils.csv")"
python3 - "$tmp/clean_eye0_zernike.csv" <<'EOF' || fail "sphere not added: $(cat "$tmp/clean_eye0_zernike.csv")"
import sys
rows = [l.strip().split(",") for l in open(sys.argv[1])][1:]
c4 = float(rows[4][4])
# 0.8 um from the file plus -(-1 D) (2.56 mm)^2 / (4 sqrt 3) for the 5.12 mm pupil
assert abs(c4 - (0.8 + 2.56**2 / (4 * 3**0.5))) < 1e-9, c4
EOF

# ---------------------------------------------------------------- help
expect 0 sim sh --help
for o in --zernike --screen --turbulence --diameter-m --grid --pitch --origin --pixel-um --focal-mm \
    --lenslet-um --model --pupil-mm --truth --reference --bits --read-noise-e; do
    [[ $out == *"$o"* ]] || fail "sim sh --help does not mention $o"
done
expect 0 sim eye --help
for o in --binocular --pupil-mm --pupil-px --rms-um --sphere-d --cyl-d --axis-deg --eye-center \
    --glow --reflection --brightness --tear-film --white-noise --no-artefacts --data --seed \
    --truth --reference; do
    [[ $out == *"$o"* ]] || fail "sim eye --help does not mention $o"
done
expect 0 sim --help
[[ $out == *" sh "* && $out == *" eye "* ]] || fail "sim --help: $out"

# ---------------------------------------------------------------- usage errors (2)
bad=(
    "sim sh"
    "sim sh --pitch -3 --out $tmp/x.fits"
    "sim sh --pitch 0 --out $tmp/x.fits"
    "sim sh --grid 16x16 --pitch 32 --size 100x100 --out $tmp/x.fits"
    "sim sh --origin 50,50 --size 512x512 --out $tmp/x.fits"
    "sim sh --grid 0x3 --out $tmp/x.fits"
    "sim sh --model wave --out $tmp/x.fits"
    "sim sh --spot square --out $tmp/x.fits"
    "sim sh --screen $tmp/ref.fits --out $tmp/x.fits"
    "sim sh --zernike $tmp/z.csv --turbulence r0=0.1 --out $tmp/x.fits"
    "sim sh --turbulence L0=3 --out $tmp/x.fits"
    "sim sh --turbulence r0=-1 --out $tmp/x.fits"
    "sim sh --turbulence r0=0.1 --out $tmp/x.fits"
    "sim sh --turbulence r0=0.1 --diameter-m 0 --out $tmp/x.fits"
    "sim sh --diameter-m 8 --out $tmp/x.fits"
    "sim sh --obscuration 0.3 --out $tmp/x.fits"
    "sim sh --pupil-mm 1 --ellipse 1.5,0 --out $tmp/x.fits"
    "sim sh --lenslet-um 100 --pixel-um 5 --pitch 30 --out $tmp/x.fits"
    "sim sh --bits 12 --out $tmp/x.fits"
    "sim sh --out $tmp/x.png"
    "sim sh --bits 32f --out $tmp/x.pgm"
    "sim sh --wat --out $tmp/x.fits"
    "sim eye"
    "sim eye --pupil-mm 8 --out $tmp/x.fits"
    "sim eye --population-mm 5 --out $tmp/x.fits"
    "sim eye --pupil-mm 6.5 --population-mm 6 --out $tmp/x.fits"
    "sim eye --binocular --eye-center 10,10 --out $tmp/x.fits"
    "sim eye --brightness 1 --out $tmp/x.fits"
    "sim eye --reflection-offset 2 --out $tmp/x.fits"
    "sim eye --tear-film -1 --out $tmp/x.fits"
    "sim eye --zernike $tmp/z.csv --data $tmp --out $tmp/x.fits"
    "sim eye --zernike $tmp/z.csv --zernike-pupil-mm 4 --out $tmp/x.fits"
    "sim eye --pitch 700 --out $tmp/x.fits"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect_usage $args
done
[[ ! -e $tmp/x.fits ]] || fail "a usage error wrote an image"
# Messages name the option, whether its value is separate or joined by '='.
expect_usage sim eye --pupil-mm 0 --out "$tmp/x.fits"
[[ $err == *"--pupil-mm: '0'"* ]] || fail "--pupil-mm 0: $err"
expect_usage sim sh --read-noise-e=-1 --out "$tmp/x.fits"
[[ $err == *"--read-noise-e: '-1'"* ]] || fail "--read-noise-e=-1: $err"

# ---------------------------------------------------------------- failures while running (1)
printf 'n,m,coef_um\n2,1,0.5\n' >"$tmp/odd.csv"     # n - m odd
printf 'n,m,coef_um\n2,0,zero\n' >"$tmp/text.csv"   # not a number
printf 'n,m\n2,0\n' >"$tmp/nocoef.csv"              # no coef_um column
for z in "$tmp/missing.csv" "$tmp/odd.csv" "$tmp/text.csv" "$tmp/nocoef.csv"; do
    expect 1 sim sh --zernike "$z" --out "$tmp/y.fits"
    expect_one_line sim sh --zernike "$z"
    [[ $err == "spotwave sim sh: "* ]] || fail "'$z': stderr: $err"
    [[ ! -e $tmp/y.fits ]] || fail "a failed run wrote an image"
    expect 1 sim eye --zernike "$z" --out "$tmp/y.fits"
    expect_one_line sim eye --zernike "$z"
done
expect 1 sim sh --screen "$tmp/missing.fits" --screen-spacing-um 10 --out "$tmp/y.fits"
expect_one_line sim sh --screen missing
# A screen too small for the array.
expect 1 sim sh --screen "$tmp/ref.fits" --screen-spacing-um 1 --out "$tmp/y.fits"
expect_one_line sim sh --screen small
expect 1 sim eye --data "$tmp/nowhere" --out "$tmp/y.fits"
expect_one_line sim eye --data nowhere
[[ $err == *"thibos2002_pupil6.0mm_stats.csv"* ]] || fail "missing statistics not named: $err"
expect 1 sim eye --eye-center 5000,5000 --out "$tmp/y.fits"
expect_one_line sim eye --eye-center 5000,5000
[[ $err == *"outside"* ]] || fail "eye outside the image: $err"
[[ ! -e $tmp/y.fits ]] || fail "a failed run wrote an image"
expect 1 sim sh --out "$tmp/no/such/dir/y.fits"
expect_one_line sim sh --out nowhere
expect 1 sim eye --out "$tmp/y.fits" --truth "$tmp/no/such/dir/t"
expect_one_line sim eye --truth nowhere

# The reference is another exposure: with shot noise its noise differs from the image's, while
# the flat wavefront without noise gives the same pixels in both.
expect 0 --backend cpu sim sh --grid 6x6 --pitch 16 --flux 2000 --read-noise-e 2 --seed 9 \
    --out "$tmp/flat.fits" --reference "$tmp/flat_ref.fits"
same_data "$tmp/flat.fits" "$tmp/flat_ref.fits" && fail "image and reference share their noise"
expect 0 --backend cpu sim sh --grid 6x6 --pitch 16 --flux 2000 --noise none --seed 9 \
    --out "$tmp/flat0.fits" --reference "$tmp/flat0_ref.fits"
same_data "$tmp/flat0.fits" "$tmp/flat0_ref.fits" || fail "noise-free flat image and reference differ"
# A pupil that lights no lenslet is an error, not an empty image.
expect 1 --backend cpu sim sh --grid 4x4 --pupil-mm 0.3 --pupil-center-mm 5,0 --out "$tmp/none.fits"
[[ $err == *"lights none"* ]] || fail "no-lenslet pupil: $err"

echo "ok"
