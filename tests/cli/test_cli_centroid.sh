#!/usr/bin/env bash
# `spotwave centroid`: centroids of a simulated Shack-Hartmann frame against the simulator's truth
# (noise-free geometric model: within 0.05 px), with the grid given by options and found in the
# reference image (--geometry auto), slopes against a reference image and a reference CSV (the
# slopes file equals the centroids minus the reference's centroids), the JSON report, a FITS cube
# of three frames, PGM input, a mask, thresholding, interleaved slopes, radians, and exit codes:
# 2 (one line pointing at --help) for bad options, 1 (one clear line) for inputs that cannot be
# used.
# Usage: test_cli_centroid.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to compare the tables"

cat >"$tmp/check.py" <<'EOF'
import json, math, struct, sys

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    return names, [dict(zip(names, map(float, l.split(",")))) for l in lines[1:]]

def key(r):
    return (int(r.get("frame", 0)), int(r["ix"]), int(r["iy"]))

def read_fits(path):
    data = open(path, "rb").read()
    cards, pos = {}, 0
    while True:
        block = data[pos:pos + 2880]
        pos += 2880
        done = False
        for i in range(0, 2880, 80):
            card = block[i:i + 80].decode("ascii")
            if card[:8].strip() == "END":
                done = True
                break
            if card[8:10] == "= ":
                cards[card[:8].strip()] = card[10:].split("/")[0].strip()
        if done:
            break
    assert int(cards["BITPIX"]) == -32, cards
    w, h = int(cards["NAXIS1"]), int(cards["NAXIS2"])
    return w, h, data[pos:pos + 4 * w * h]

def write_cube(path, w, h, planes):
    cards = ["SIMPLE  = %20s" % "T", "BITPIX  = %20d" % -32, "NAXIS   = %20d" % 3,
             "NAXIS1  = %20d" % w, "NAXIS2  = %20d" % h, "NAXIS3  = %20d" % len(planes), "END"]
    head = "".join(c.ljust(80) for c in cards)
    head += " " * (-len(head) % 2880)
    body = b"".join(planes)
    body += b"\0" * (-len(body) % 2880)
    open(path, "wb").write(head.encode("ascii") + body)

cmd = sys.argv[1]
if cmd == "truth":  # centroids CSV vs sim truth: x, y and (with a reference) dx, dy
    names, rows = read_csv(sys.argv[2])
    _, truth = read_csv(sys.argv[3])
    tol = float(sys.argv[4])
    want = ["ix", "iy", "x_px", "y_px", "intensity", "valid"]
    assert names[:6] == want or names[1:7] == want, names
    t = {(int(r["ix"]), int(r["iy"])): r for r in truth}
    assert len(rows) == len(truth), (len(rows), len(truth))
    worst = 0.0
    for r in rows:
        s = t[(int(r["ix"]), int(r["iy"]))]
        assert r["valid"] == 1 and r["intensity"] > 0, r
        worst = max(worst, abs(r["x_px"] - s["x_px"]), abs(r["y_px"] - s["y_px"]))
        if "dx_px" in r:
            worst = max(worst, abs(r["dx_px"] - (s["x_px"] - s["ref_x_px"])),
                        abs(r["dy_px"] - (s["y_px"] - s["ref_y_px"])))
    assert worst < tol, worst
elif cmd == "slopes":  # slopes file = centroids - reference centroids, and = the dx columns
    _, c = read_csv(sys.argv[2])
    names, s = read_csv(sys.argv[3])
    _, ref = read_csv(sys.argv[4])
    assert names[-4:] == ["ix", "iy", "dx_px", "dy_px"] or names[-6:-2] == ["ix", "iy", "dx_px", "dy_px"], names
    refs = {(int(r["ix"]), int(r["iy"])): r for r in ref}
    cs = {key(r): r for r in c}
    assert len(s) == len(c), (len(s), len(c))
    for r in s:
        a = cs[key(r)]
        b = refs[(int(r["ix"]), int(r["iy"]))]
        assert abs(r["dx_px"] - (a["x_px"] - b["x_px"])) < 1e-4, (r, a, b)
        assert abs(r["dy_px"] - (a["y_px"] - b["y_px"])) < 1e-4, (r, a, b)
        assert r["dx_px"] == a["dx_px"] and r["dy_px"] == a["dy_px"], (r, a)
elif cmd == "same":  # two tables agree to tol (relative above 1) in every cell (nan = nan)
    n1, a = read_csv(sys.argv[2])
    n2, b = read_csv(sys.argv[3])
    tol = float(sys.argv[4])
    assert n1 == n2 and len(a) == len(b), (n1, n2, len(a), len(b))
    for r, s in zip(a, b):
        for k in n1:
            assert (math.isnan(r[k]) and math.isnan(s[k])) or abs(r[k] - s[k]) <= tol * max(1, abs(r[k])), (k, r, s)
elif cmd == "cube":  # a FITS cube of the given f32 images, one plane each
    planes, wh = [], None
    for p in sys.argv[3:]:
        w, h, data = read_fits(p)
        assert wh in (None, (w, h))
        wh = (w, h)
        planes.append(data)
    write_cube(sys.argv[2], wh[0], wh[1], planes)
elif cmd == "frames":  # the cube's rows: frames 0 and 2 are the image, 1 the reference
    names, rows = read_csv(sys.argv[2])
    _, one = read_csv(sys.argv[3])
    _, ref = read_csv(sys.argv[4])
    assert names[0] == "frame", names
    n = len(one)
    assert len(rows) == 3 * n, (len(rows), n)
    for f, src in ((0, one), (1, ref), (2, one)):
        part = rows[f * n:(f + 1) * n]
        assert all(int(r["frame"]) == f for r in part), f
        for r, s in zip(part, src):
            assert (int(r["ix"]), int(r["iy"])) == (int(s["ix"]), int(s["iy"]))
            assert r["x_px"] == s["x_px"] and r["y_px"] == s["y_px"], (f, r, s)
            assert abs(r["dx_px"]) < 1e-5 if f == 1 else r["dx_px"] == s["dx_px"], (f, r, s)
elif cmd == "masked":  # lenslet (0,0) invalid and absent from the slopes; the rest valid
    _, c = read_csv(sys.argv[2])
    _, s = read_csv(sys.argv[3])
    r0 = [r for r in c if r["ix"] == 0 and r["iy"] == 0][0]
    assert r0["valid"] == 0 and math.isnan(r0["x_px"]) and math.isnan(r0["dx_px"]), r0
    assert all(r["valid"] == 1 for r in c if r is not r0)
    assert len(s) == len(c) - 1 and not any(r["ix"] == 0 and r["iy"] == 0 for r in s)
elif cmd == "rad":  # dx_rad = dx_px * pixel_um / (focal_mm * 1000)
    _, s = read_csv(sys.argv[2])
    k = float(sys.argv[3]) / (float(sys.argv[4]) * 1000.0)
    assert all(abs(r["dx_rad"] - r["dx_px"] * k) <= 1e-6 * abs(r["dx_rad"]) + 1e-12 and
               abs(r["dy_rad"] - r["dy_px"] * k) <= 1e-6 * abs(r["dy_rad"]) + 1e-12 for r in s)
    assert any(r["dx_rad"] != 0 for r in s)
elif cmd == "json":
    r = json.loads(open(sys.argv[2]).read())
    assert eval(sys.argv[3]), r
EOF
check() { python3 "$tmp/check.py" "$@"; }

# ---------------------------------------------------------------- a frame, its reference, truth
# 11 x 9 lenslets of 21.5 px from (3.3, 4.7), defocus and astigmatism (spots moved up to ~4 px),
# noise-free float pixels: the centres of gravity must match the truth to 0.05 px.
cat >"$tmp/z.csv" <<'EOF'
n,m,coef_um
2,0,0.3
2,2,0.2
EOF
geom=(--pitch 21.5 --grid 11x9 --origin "3.3,4.7")
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 250x205 --noise none \
    --bits 32f --out "$tmp/a.fits" --truth "$tmp/a.csv" --reference "$tmp/ref.fits"
expect 0 --backend cpu sim sh "${geom[@]}" --size 250x205 --noise none --bits 32f \
    --out "$tmp/flat.fits" --truth "$tmp/flat.csv"

# Explicit geometry, no reference: centroids to stdout, one row per lenslet.
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}"
[[ -z $err ]] || fail "centroid wrote to stderr on success: $err"
printf '%s\n' "$out" >"$tmp/c_stdout.csv"
[[ $(head -1 "$tmp/c_stdout.csv") == "ix,iy,x_px,y_px,intensity,valid,saturated,status,x_var,y_var,snr" ]] ||
    fail "centroids header: $(head -1 "$tmp/c_stdout.csv")"
[[ $(wc -l <"$tmp/c_stdout.csv") == 100 ]] || fail "not 11 x 9 rows"
check truth "$tmp/c_stdout.csv" "$tmp/a.csv" 0.05 || fail "centroids differ from the truth"

# The reference's own centroids, then the frame with the reference image and a slopes file.
expect 0 --backend cpu centroid "$tmp/ref.fits" "${geom[@]}" --out "$tmp/r.csv"
check truth "$tmp/r.csv" "$tmp/flat.csv" 0.05 || fail "reference centroids differ from the truth"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --out "$tmp/c.csv" --slopes "$tmp/s.csv"
[[ $out == *"centroid: 1 frame of 250x205 f32, grid 11x9"* ]] || fail "text report: $out"
[[ $(head -1 "$tmp/c.csv") == "ix,iy,x_px,y_px,intensity,valid,dx_px,dy_px,saturated,status,x_var,y_var,snr" ]] ||
    fail "centroids header with a reference: $(head -1 "$tmp/c.csv")"
[[ $(head -1 "$tmp/s.csv") == "ix,iy,dx_px,dy_px" ]] || fail "slopes header: $(head -1 "$tmp/s.csv")"
check truth "$tmp/c.csv" "$tmp/a.csv" 0.05 || fail "centroids or slopes differ from the truth"
check slopes "$tmp/c.csv" "$tmp/s.csv" "$tmp/r.csv" || fail "slopes are not centroids - reference"

# The same reference as a CSV (the reference's centroids table): the same slopes; with the
# simulator's truth table as the reference, slopes within 0.05 px of the truth.
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r.csv" \
    --out "$tmp/c_refcsv.csv" --slopes "$tmp/s_refcsv.csv"
check same "$tmp/c.csv" "$tmp/c_refcsv.csv" 1e-6 || fail "reference CSV and image disagree"
check same "$tmp/s.csv" "$tmp/s_refcsv.csv" 1e-6 || fail "slopes from CSV and image disagree"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/flat.csv" \
    --out "$tmp/c_truth.csv"
check truth "$tmp/c_truth.csv" "$tmp/a.csv" 0.05 || fail "slopes against the truth reference"

# --geometry auto: the grid found in the reference image gives the same centroids; JSON report.
expect 0 --backend cpu centroid "$tmp/a.fits" --geometry auto --reference "$tmp/ref.fits" \
    --out "$tmp/c_auto.csv" --slopes "$tmp/s_auto.csv" --json
printf '%s\n' "$out" >"$tmp/auto.json"
check json "$tmp/auto.json" 'r["subcommand"] == "centroid" and r["geometry"] == "auto" and r["grid_nx"] == 11 and r["grid_ny"] == 9 and abs(r["pitch_px"] - 21.5) < 0.01 and abs(r["origin_x_px"] - 3.3) < 0.1 and abs(r["origin_y_px"] - 4.7) < 0.1 and r["valid_per_frame"] == [99] and r["lenslets_in_mask"] == 99 and r["backend"] == "cpu" and r["path"] == "host" and r["reference_kind"] == "image" and r["frames"] == 1 and r["run_ms"] >= 0 and r["rms_dx_px"] > 0.5 and abs(r["mean_dx_px"]) < 0.1' ||
    fail "auto report: $out"
check truth "$tmp/c_auto.csv" "$tmp/a.csv" 0.05 || fail "auto-geometry centroids differ from the truth"
check same "$tmp/c.csv" "$tmp/c_auto.csv" 1e-3 || fail "auto and explicit geometry disagree"

# JSON with explicit geometry: counts, slope statistics from the slopes file.
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --out "$tmp/c_j.csv" --json
printf '%s\n' "$out" >"$tmp/j.json"
python3 - "$tmp/j.json" "$tmp/s.csv" <<'EOF' || fail "JSON slope statistics: $out"
import json, sys
r = json.load(open(sys.argv[1]))
rows = [l.strip().split(",") for l in open(sys.argv[2])][1:]
dx = [float(x[2]) for x in rows]
dy = [float(x[3]) for x in rows]
n = len(dx)
assert r["geometry"] == "manual" and r["pitch_px"] == 21.5 and r["origin_x_px"] == 3.3
assert r["slopes_valid"] == n == 99 and r["valid_total"] == 99
assert abs(r["mean_dx_px"] - sum(dx) / n) < 1e-6 and abs(r["mean_dy_px"] - sum(dy) / n) < 1e-6
assert abs(r["rms_dx_px"] - (sum(v * v for v in dx) / n) ** 0.5) < 1e-6
assert abs(r["rms_dy_px"] - (sum(v * v for v in dy) / n) ** 0.5) < 1e-6
assert r["out"].endswith("c_j.csv") and r["slopes"] is None and r["kernel_us"] is None
EOF

# A FITS cube of three frames (image, reference, image): three frames of rows, a frame column.
check cube "$tmp/cube.fits" "$tmp/a.fits" "$tmp/ref.fits" "$tmp/a.fits"
expect 0 --backend cpu centroid "$tmp/cube.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --out "$tmp/c3.csv" --slopes "$tmp/s3.csv" --json
printf '%s\n' "$out" >"$tmp/c3.json"
check json "$tmp/c3.json" 'r["frames"] == 3 and r["valid_per_frame"] == [99, 99, 99]' ||
    fail "cube report: $out"
[[ $(head -1 "$tmp/c3.csv") == "frame,ix,iy,x_px,y_px,intensity,valid,dx_px,dy_px,saturated,status,x_var,y_var,snr" ]] ||
    fail "cube header: $(head -1 "$tmp/c3.csv")"
[[ $(head -1 "$tmp/s3.csv") == "frame,ix,iy,dx_px,dy_px" ]] || fail "cube slopes header"
check frames "$tmp/c3.csv" "$tmp/c.csv" "$tmp/r.csv" || fail "cube frames are not the images'"
check slopes "$tmp/c3.csv" "$tmp/s3.csv" "$tmp/r.csv" || fail "cube slopes"

# Interleaved library slopes give the same files; radians with the optics given.
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --out "$tmp/c_il.csv" --slopes "$tmp/s_il.csv" --interleaved
cmp -s "$tmp/c.csv" "$tmp/c_il.csv" || fail "--interleaved changed the centroids file"
cmp -s "$tmp/s.csv" "$tmp/s_il.csv" || fail "--interleaved changed the slopes file"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --out "$tmp/c_rad.csv" --slopes "$tmp/s_rad.csv" --pixel-um 5.5 --focal-mm 3.5
[[ $(head -1 "$tmp/s_rad.csv") == "ix,iy,dx_px,dy_px,dx_rad,dy_rad" ]] || fail "radian columns"
check rad "$tmp/s_rad.csv" 5.5 3.5 || fail "radians are not dx * pixel / focal"

# A mask leaving out lenslet (0,0); conditioning that keeps symmetric spots where they are.
printf 'ix,iy,valid\n0,0,0\n1,0,1\n' >"$tmp/mask.csv"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --mask "$tmp/mask.csv" --out "$tmp/c_m.csv" --slopes "$tmp/s_m.csv"
check masked "$tmp/c_m.csv" "$tmp/s_m.csv" || fail "the mask was not applied"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --threshold-fraction 0.1 --window 1 \
    --out "$tmp/c_t.csv"
check truth "$tmp/c_t.csv" "$tmp/a.csv" 0.05 || fail "thresholded centroids"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --threshold 5 --threshold-mode zero \
    --gamma 1 --out "$tmp/c_z.csv"
check truth "$tmp/c_z.csv" "$tmp/a.csv" 0.05 || fail "zero-mode thresholded centroids"

# 16-bit PGM in, a dark frame (all zero) and an identity look-up table change nothing.
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 250x205 --noise none \
    --bits 16 --flux 30000 --out "$tmp/p.pgm" --reference "$tmp/pref.pgm"
expect 0 --backend cpu centroid "$tmp/p.pgm" "${geom[@]}" --reference "$tmp/pref.pgm" \
    --out "$tmp/c_p.csv"
check truth "$tmp/c_p.csv" "$tmp/a.csv" 0.05 || fail "16-bit PGM centroids"
expect 0 --backend cpu sim sh "${geom[@]}" --size 250x205 --noise none --bits 16 --flux 0 \
    --out "$tmp/dark.pgm"
python3 -c 'print("value"); [print(i) for i in range(65536)]' >"$tmp/lut16.csv"
expect 0 --backend cpu centroid "$tmp/p.pgm" "${geom[@]}" --reference "$tmp/pref.pgm" \
    --dark "$tmp/dark.pgm" --lut "$tmp/lut16.csv" --out "$tmp/c_pl.csv"
check same "$tmp/c_p.csv" "$tmp/c_pl.csv" 1e-4 || fail "a zero dark and identity LUT changed things"

# 32-bit integer FITS frames are converted to float.
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 250x205 --noise none \
    --bits 32 --out "$tmp/u32.fits"
expect 0 --backend cpu centroid "$tmp/u32.fits" "${geom[@]}" --out "$tmp/c_u32.csv" --json
printf '%s\n' "$out" >"$tmp/u32.json"
check json "$tmp/u32.json" 'r["pixel_type"] == "f32" and r["valid_total"] == 99' ||
    fail "u32 report: $out"
check truth "$tmp/c_u32.csv" "$tmp/a.csv" 0.05 || fail "u32 centroids"

# ---------------------------------------------------------------- help
expect 0 centroid --help
for o in --geometry --grid --pitch --origin --mask --pixel-um --focal-mm --lut --dark --flat \
    --threshold --threshold-fraction --threshold-mode --gamma --window --algorithm --reference \
    --slopes --interleaved --out --path --json FITS PGM frame; do
    [[ $out == *"$o"* ]] || fail "centroid --help does not mention $o"
done
expect 0 help centroid
expect 0 --help
[[ $out == *"centroid"* ]] || fail "spotwave --help does not list centroid"

# ---------------------------------------------------------------- usage errors (2)
bad=(
    "centroid"
    "centroid $tmp/a.fits"
    "centroid $tmp/a.fits --pitch 0.5"
    "centroid $tmp/a.fits --pitch -3"
    "centroid $tmp/a.fits --pitch 21.5 --wat"
    "centroid $tmp/a.fits --pitch 21.5 --algorithm fancy"
    "centroid $tmp/a.fits --pitch 21.5 --grid 0x3"
    "centroid $tmp/a.fits --pitch 21.5 --origin 3"
    "centroid $tmp/a.fits --geometry auto"
    "centroid $tmp/a.fits --geometry auto --reference $tmp/r.csv"
    "centroid $tmp/a.fits --geometry auto --reference $tmp/ref.fits --pitch 21.5"
    "centroid $tmp/a.fits --geometry sideways --pitch 21.5"
    "centroid $tmp/a.fits --pitch 21.5 --threshold 3 --threshold-fraction 0.1"
    "centroid $tmp/a.fits --pitch 21.5 --threshold-fraction 1.5"
    "centroid $tmp/a.fits --pitch 21.5 --threshold-mode zero"
    "centroid $tmp/a.fits --pitch 21.5 --threshold-mode half --threshold 3"
    "centroid $tmp/a.fits --pitch 21.5 --gamma 0"
    "centroid $tmp/a.fits --pitch 21.5 --window -1"
    "centroid $tmp/a.fits --pitch 21.5 --path sideways"
    "centroid $tmp/a.fits --pitch 21.5 --json"
    "centroid $tmp/a.fits $tmp/ref.fits --pitch 21.5"
    "centroid $tmp/a.fits --pitch 21.5 --backend cpu"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect_usage $args
done
# the search algorithms take no conditioning (search.h reads the raw frame)
expect_usage centroid "$tmp/a.fits" --pitch 21.5 --algorithm pyramid --gamma 2
expect_usage centroid "$tmp/a.fits" --pitch 0.5
[[ $err == *"below one pixel"* ]] || fail "--pitch 0.5: $err"
expect_usage centroid "$tmp/a.fits" --pitch 300
[[ $err == *"above the largest supported (128 px)"* ]] || fail "--pitch 300: $err"
expect_usage centroid "$tmp/a.fits" --pitch 21.5 --out ''
[[ $err == *"--out: the file name is empty"* ]] || fail "--out '': $err"

# ---------------------------------------------------------------- failures while running (1)
fail1() { # ARGS... : exit 1, one line on stderr, no output file left behind
    expect 1 --backend cpu centroid "$@" --out "$tmp/never.csv"
    expect_one_line centroid "$@"
    [[ $err == "spotwave centroid: "* ]] || fail "'$*': stderr: $err"
    [[ ! -e $tmp/never.csv ]] || fail "'$*' left an output file"
}
fail1 "$tmp/missing.fits" "${geom[@]}"
[[ $err == *"missing.fits"* ]] || fail "missing file not named: $err"
head -c 3000 "$tmp/a.fits" >"$tmp/trunc.fits"
fail1 "$tmp/trunc.fits" "${geom[@]}"
printf 'hello\n' >"$tmp/text.fits"
fail1 "$tmp/text.fits" "${geom[@]}"
fail1 "$tmp/a.fits" --pitch 24 --grid 20x20 --origin 0,0
[[ $err == *"outside the 250x205 image"* ]] || fail "grid outside the image: $err"
fail1 "$tmp/a.fits" --pitch 21.5 --grid 11x9 --origin -2,0
[[ $err == *"outside"* ]] || fail "negative origin: $err"
fail1 "$tmp/a.fits" --pitch 128 --grid 2x2
[[ $err == *"does not fit its 250x205 pixels"* ]] || fail "grid larger than the image: $err"
printf 'ix,iy,valid\n0,0,0.5\n' >"$tmp/mask_half.csv"
fail1 "$tmp/a.fits" "${geom[@]}" --mask "$tmp/mask_half.csv"
[[ $err == *"valid = 0.5 (0 or 1)"* ]] || fail "mask value 0.5: $err"
# Reference CSVs that do not cover the grid exactly.
head -n 99 "$tmp/r.csv" >"$tmp/r_short.csv" # 98 lenslets
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r_short.csv"
[[ $err == *"lists 98 of the 99 lenslets"* ]] || fail "short reference CSV: $err"
{ cat "$tmp/r.csv"; echo "11,0,1,1,1,1,0,0,nan,nan,nan"; } >"$tmp/r_extra.csv"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r_extra.csv"
[[ $err == *"not in the 11x9 grid"* ]] || fail "reference CSV outside the grid: $err"
{ cat "$tmp/r.csv"; sed -n 2p "$tmp/r.csv"; } >"$tmp/r_twice.csv"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r_twice.csv"
[[ $err == *"twice"* ]] || fail "duplicate reference lenslet: $err"
fail1 "$tmp/a.fits" --pitch 21.5 --grid 10x9 --origin 3.3,4.7 --reference "$tmp/r.csv"
printf 'ix,iy,x\n0,0,1\n' >"$tmp/r_cols.csv"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r_cols.csv"
[[ $err == *"no column 'x_px'"* ]] || fail "reference CSV without x_px: $err"
# A reference lenslet with no light while the mask keeps it.
sed '2s/^0,0,[^,]*,[^,]*,/0,0,nan,nan,/' "$tmp/r.csv" >"$tmp/r_nan.csv"
printf 'ix,iy,valid\n0,0,1\n' >"$tmp/mask_keep.csv"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r_nan.csv" --mask "$tmp/mask_keep.csv"
[[ $err == *"--mask keeps it"* ]] || fail "invalid reference lenslet kept by the mask: $err"
# ... which, without --mask, leaves the mask.
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/r_nan.csv" \
    --out "$tmp/c_nan.csv" --slopes "$tmp/s_nan.csv" --json
printf '%s\n' "$out" >"$tmp/nan.json"
check json "$tmp/nan.json" 'r["lenslets_in_mask"] == 98 and r["mask_from_reference"] and r["reference_invalid"] == 1' ||
    fail "reference with a nan lenslet: $out"
check masked "$tmp/c_nan.csv" "$tmp/s_nan.csv" || fail "nan reference lenslet not masked"
# Reference images that do not fit, and a grid that cannot be found.
expect 0 --backend cpu sim sh --grid 4x4 --pitch 10 --noise none --out "$tmp/small.pgm"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/cube.fits"
[[ $err == *"3 frames"* ]] || fail "reference cube: $err"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/pref.pgm"
[[ $err == *"pixel"* ]] || fail "reference of another pixel type: $err"
fail1 "$tmp/a.fits" "${geom[@]}" --reference "$tmp/small.pgm"
[[ $err == *"40x40, the image 250x205"* ]] || fail "reference of another size: $err"
fail1 "$tmp/a.fits" --geometry auto --reference "$tmp/missing.fits"
fail1 "$tmp/p.pgm" --geometry auto --reference "$tmp/dark.pgm"
[[ $err == *"no spots"* || $err == *"no periodic"* ]] || fail "auto geometry on a dark image: $err"
# Conditioning files that do not fit.
fail1 "$tmp/a.fits" "${geom[@]}" --dark "$tmp/missing.pgm"
fail1 "$tmp/p.pgm" "${geom[@]}" --dark "$tmp/small.pgm"
[[ $err == *"40x40"* ]] || fail "dark of another size: $err"
fail1 "$tmp/p.pgm" "${geom[@]}" --flat "$tmp/cube.fits"
head -n 300 "$tmp/lut16.csv" >"$tmp/lut_short.csv"
fail1 "$tmp/p.pgm" "${geom[@]}" --lut "$tmp/lut_short.csv"
[[ $err == *"65536"* ]] || fail "short LUT: $err"
fail1 "$tmp/a.fits" "${geom[@]}" --lut "$tmp/lut16.csv"
[[ $err == *"f32"* ]] || fail "LUT on float frames: $err"
printf 'ix,iy,valid\n40,0,0\n' >"$tmp/mask_bad.csv"
fail1 "$tmp/a.fits" "${geom[@]}" --mask "$tmp/mask_bad.csv"
# A window that empties the regions, a GPU path on the CPU backend.
fail1 "$tmp/a.fits" "${geom[@]}" --window 11
fail1 "$tmp/a.fits" "${geom[@]}" --path device
# An output that cannot be written.
expect 1 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --out "$tmp/no/such/dir/c.csv"
expect_one_line centroid unwritable

echo "ok"
