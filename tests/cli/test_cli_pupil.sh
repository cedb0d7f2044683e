#!/usr/bin/env bash
# `spotwave pupil` end to end on eyes from `spotwave sim eye` (whose --truth writes each pupil
# ellipse, PREFIX_pupils.csv): the documented CSV header; centre within 1.5 px and semi-axes
# within 3% of the truth for a round and an elliptical pupil, with the seed's artefacts on
# (reflection, brightness map, noise) and off (the glow alone), 8- and 16-bit, PGM, FITS and HDF5
# (the same pixels give the same table); two eyes give two rows, left then right, each on its
# eye, with the split found or given; several inputs add the frame column and --first/--count
# pick frames; --json parses and holds every field; the lenslet mask agrees with the truth
# ellipse and `spotwave centroid` takes it as --mask; --overlay writes a PNG of the frame's size
# with the ellipse drawn where the truth is; a dark or flat frame is reported not found (valid
# 0, nan, the reason) with exit 0. The threshold options move the threshold as pupil.h step 3
# says (a higher edge level, a higher threshold); the near-band test (step 9) turns a pupil
# into "clutter" exactly when near > --max-near-ratio x inliers, and thresholded noise is
# clutter; the default smallest radius is a tenth of the frame's smaller side. Exit codes: 2
# with one line pointing at --help for bad options, 1 with one clear line for inputs that
# cannot be used.
# Usage: test_cli_pupil.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"

cat >"$tmp/check.py" <<'EOF'
import json, math, struct, sys, zlib

COLUMNS = "pupil,cx_px,cy_px,a_px,b_px,angle_deg,inliers,valid,threshold,failure,near,method"

def read_csv(path):
    lines = [l.rstrip("\n") for l in open(path) if l.strip()]
    names = lines[0].split(",")
    rows = []
    for l in lines[1:]:
        cells = l.split(",")
        assert len(cells) == len(names), (names, l)
        r = {}
        for n, c in zip(names, cells):
            r[n] = c if n in ("failure", "method") else float(c)
        rows.append(r)
    return names, rows

def truth(prefix):
    _, rows = read_csv(prefix + "_pupils.csv")
    return rows

def close(r, t, angle=True):
    """centre within 1.5 px, semi-axes within 3%, angle within 3 degrees (modulo 180) when the
    pupil is clearly elliptical."""
    assert r["valid"] == 1 and r["failure"] == "", r
    assert math.hypot(r["cx_px"] - t["cx_px"], r["cy_px"] - t["cy_px"]) <= 1.5, (r, t)
    assert abs(r["a_px"] / t["a_px"] - 1) <= 0.03 and abs(r["b_px"] / t["b_px"] - 1) <= 0.03, (r, t)
    assert r["a_px"] >= r["b_px"] and 0 <= r["angle_deg"] < 180, r
    if angle and t["b_px"] < 0.95 * t["a_px"]:
        d = (r["angle_deg"] - t["angle_deg"]) % 180
        assert min(d, 180 - d) <= 3, (r, t)
    assert 0 <= r["threshold"] <= 254, r
    # most of the ellipse's perimeter is border pixels on the fit (min_coverage is 0.25)
    perim = math.pi * (3 * (r["a_px"] + r["b_px"]) - math.sqrt((3 * r["a_px"] + r["b_px"]) * (r["a_px"] + 3 * r["b_px"])))
    assert r["inliers"] >= 0.5 * perim, (r, perim)
    # a found pupil passed the near-band test at the default ratio (pupil.h step 9: 0.75)
    assert 0 <= r["near"] <= 0.75 * r["inliers"], r

cmd = sys.argv[1]
if cmd == "header":  # the documented columns, with the frame column when asked
    want = ("frame," if len(sys.argv) > 3 else "") + COLUMNS
    got = open(sys.argv[2]).readline().strip()
    assert got == want, got
elif cmd == "truth":  # table rows (of frame F when given) match the truth's pupils in order
    _, rows = read_csv(sys.argv[2])
    t = truth(sys.argv[3])
    if len(sys.argv) > 4:
        rows = [r for r in rows if r["frame"] == float(sys.argv[4])]
    assert len(rows) == len(t), (len(rows), len(t))
    for i, (r, q) in enumerate(zip(rows, t)):
        assert r["pupil"] == i, r
        close(r, q)
    if len(rows) == 2:
        assert rows[0]["cx_px"] < rows[1]["cx_px"], rows
elif cmd == "same":  # two tables agree (to 1e-4 px and one inlier: the GPU's refit rounds
    # differently, pupil.h: to 1e-6 px)
    _, a = read_csv(sys.argv[2])
    _, b = read_csv(sys.argv[3])
    assert len(a) == len(b) and a, (len(a), len(b))
    for x, y in zip(a, b):
        assert x.keys() == y.keys(), (x, y)
        for k in x:
            if k in ("failure", "method"):
                assert x[k] == y[k], (x, y)
            elif math.isnan(x[k]) or math.isnan(y[k]):
                assert math.isnan(x[k]) and math.isnan(y[k]), (k, x, y)
            else:
                assert abs(x[k] - y[k]) <= (1 if k in ("inliers", "near") else 1e-4), (k, x, y)
elif cmd == "frames":  # the frame column holds exactly these frames, pupils 0.. in each
    _, rows = read_csv(sys.argv[2])
    want = [int(f) for f in sys.argv[3].split(",")]
    n = int(sys.argv[4])
    assert [int(r["frame"]) for r in rows] == [f for f in want for _ in range(n)], rows
    assert [int(r["pupil"]) for r in rows] == list(range(n)) * len(want), rows
elif cmd == "notfound":  # one row per pupil, not found, nan, a reason
    _, rows = read_csv(sys.argv[2])
    assert len(rows) == int(sys.argv[3]), rows
    for r in rows:
        assert r["valid"] == 0 and len(r["failure"]) > 3, r
        assert all(math.isnan(r[k]) for k in ("cx_px", "cy_px", "a_px", "b_px", "angle_deg")), r
elif cmd == "json":  # the report: every field, agreeing with the table; then a condition
    rep = json.load(open(sys.argv[2]))
    _, rows = read_csv(sys.argv[3])
    assert rep["command"] == "pupil", rep
    for k in ("otsu_classes", "edge_level", "max_near_ratio", "min_radius_px"):
        assert k in rep, k
    flat = [(f, q) for f in rep["frames"] for q in f["pupils"]]
    assert len(flat) == len(rows) and rep["frame_count"] == len(rep["frames"]), (len(flat), len(rows))
    keys = {"pupil", "valid", "failure", "failure_code", "cx_px", "cy_px", "a_px", "b_px",
            "angle_deg", "inliers", "near", "border", "threshold", "candidate", "votes", "x0",
            "x1"}
    for (f, q), r in zip(flat, rows):
        assert keys <= set(q), set(q) ^ keys
        assert {"frame", "scale", "split_x", "pupils"} <= set(f), f
        assert q["pupil"] == r["pupil"] and q["valid"] == (r["valid"] == 1), (q, r)
        assert q["inliers"] == r["inliers"] and q["threshold"] == r["threshold"], (q, r)
        assert q["near"] == r["near"] and q["near"] >= 0, (q, r)
        # an inlier (d <= inlier_px) is never in the near band (2 to 4 inlier_px): both are
        # border pixels
        assert q["inliers"] + q["near"] <= q["border"], q
        if q["valid"]:
            assert q["failure"] is None and q["failure_code"] == 0, q
            for k in ("cx_px", "cy_px", "a_px", "b_px", "angle_deg"):
                assert abs(q[k] - r[k]) <= 1e-5, (k, q, r)
            assert 0 < q["inliers"] <= q["border"] and q["votes"] > 0 and q["candidate"] >= 0, q
            assert q["x0"] <= q["cx_px"] < q["x1"], q
        else:
            assert q["failure"] == r["failure"] and q["failure_code"] > 0, (q, r)
            assert q["cx_px"] is None, q
        assert f["scale"] is None or f["scale"] >= 0, f
    assert eval(sys.argv[4]), rep
elif cmd == "mask":  # lenslet mask vs the truth ellipses, whole squares (the default rule)
    names, rows = read_csv(sys.argv[2])
    t = truth(sys.argv[3])
    pitch, nx, ny = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    x0, y0 = float(sys.argv[7]), float(sys.argv[8])
    assert names == ["ix", "iy", "valid", "pupil"], names
    assert [(int(r["ix"]), int(r["iy"])) for r in rows] == [(ix, iy) for iy in range(ny) for ix in range(nx)]
    def inside(q, x, y, grow):
        a = math.radians(q["angle_deg"])
        dx, dy = x - q["cx_px"], y - q["cy_px"]
        u = (dx * math.cos(a) + dy * math.sin(a)) / (q["a_px"] + grow)
        v = (-dx * math.sin(a) + dy * math.cos(a)) / (q["b_px"] + grow)
        return u * u + v * v <= 1
    sure_in = sure_out = 0
    for r in rows:
        xl, yl = x0 - 0.5 + pitch * r["ix"], y0 - 0.5 + pitch * r["iy"]
        corners = [(xl, yl), (xl + pitch, yl), (xl, yl + pitch), (xl + pitch, yl + pitch)]
        assert r["valid"] == (r["pupil"] >= 0), r
        for k, q in enumerate(t):
            if all(inside(q, x, y, -2.0) for x, y in corners):  # well inside eye k
                assert r["valid"] == 1 and r["pupil"] == k, (r, k)
                sure_in += 1
            if not all(inside(q, x, y, 2.0) for x, y in corners):  # partly outside eye k
                assert r["pupil"] != k, (r, k)
                sure_out += 1
    assert sure_in >= 50, sure_in
elif cmd == "png":  # an RGB PNG of the frame's size, yellow (the fit) along the truth ellipse
    data = open(sys.argv[2], "rb").read()
    w, h = int(sys.argv[3]), int(sys.argv[4])
    t = truth(sys.argv[5])
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    pw, ph, depth, ctype = ihdr[:4]
    assert (pw, ph) == (w, h) and depth == 8 and ctype in (2, 6), ihdr
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    img, prev, p = [], bytearray(stride), 0
    for y in range(h):  # undo the PNG row filters
        f, row = raw[p], bytearray(raw[p + 1:p + 1 + stride])
        p += 1 + stride
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1: row[i] = (row[i] + a) & 255
            elif f == 2: row[i] = (row[i] + b) & 255
            elif f == 3: row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        img.append(row)
        prev = row
    def yellow(x, y):
        r, g, b = img[y][x * bpp:x * bpp + 3]
        return r > 200 and g > 180 and b < 100
    for q in t:
        ang = math.radians(q["angle_deg"])
        hits = total = 0
        for k in range(72):  # points of the truth ellipse: a yellow pixel within 2 px
            s = 2 * math.pi * k / 72
            u, v = q["a_px"] * math.cos(s), q["b_px"] * math.sin(s)
            x = q["cx_px"] + u * math.cos(ang) - v * math.sin(ang)
            y = q["cy_px"] + u * math.sin(ang) + v * math.cos(ang)
            xi, yi = int(round(x)), int(round(y))
            if not (2 <= xi < w - 2 and 2 <= yi < h - 2):
                continue
            total += 1
            hits += any(yellow(xi + dx, yi + dy) for dx in range(-2, 3) for dy in range(-2, 3))
        assert total >= 36 and hits >= 0.9 * total, (hits, total)
        assert yellow(int(round(q["cx_px"])), int(round(q["cy_px"]))), "no centre mark"
    # the picture is not all yellow: far from every ellipse there is none
    q = t[0]  # inside the first pupil, away from its centre mark, nothing is yellow
    far = sum(yellow(x, y) for y in range(h) for x in range(w)
              if 8 < math.hypot(x - q["cx_px"], y - q["cy_px"]) < 0.6 * q["b_px"])
    assert far == 0, far
else:
    raise SystemExit("unknown check " + cmd)
EOF
check() { python3 "$tmp/check.py" "$@"; }
col() { # FILE NAME [ROW]: column NAME of data row ROW (default 1) of a CSV
    awk -F, -v name="$2" -v row="${3:-1}" \
        'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i } NR == row + 1 { print $c }' "$1"
}

# ---------------------------------------------------------------- eyes with known pupils
# 640 x 640, one eye: a round pupil (the seed's look: glow, corneal reflection, brightness map,
# white noise), an elliptical one off centre, the glow alone (artefacts off), and 16 bits.
eye=(--backend cpu sim eye)
expect 0 "${eye[@]}" --seed 3 --out "$tmp/round.pgm" --truth "$tmp/round"
expect 0 "${eye[@]}" --seed 4 --eye-center 300,345 --pupil-px 420 --ellipse 0.8,30 \
    --out "$tmp/ell.pgm" --truth "$tmp/ell"
expect 0 "${eye[@]}" --seed 4 --eye-center 300,345 --pupil-px 420 --ellipse 0.8,30 \
    --out "$tmp/ell.fits" --truth "$tmp/ell_fits"
expect 0 "${eye[@]}" --seed 4 --eye-center 300,345 --pupil-px 420 --ellipse 0.8,30 \
    --out "$tmp/ell.h5"
expect 0 "${eye[@]}" --seed 5 --no-artefacts --glow 20 --eye-center 330,310 --pupil-px 360 \
    --ellipse 0.9,120 --out "$tmp/clean.pgm" --truth "$tmp/clean"
expect 0 "${eye[@]}" --seed 6 --bits 16 --gain 0.25 --eye-center 320,300 --pupil-px 500 \
    --out "$tmp/deep.pgm" --truth "$tmp/deep"
# Two eyes, not in fixed halves of the 1280 x 640 frame.
expect 0 "${eye[@]}" --seed 7 --binocular --eye-center 360,320 --eye-center 930,300 \
    --pupil-px 480 --out "$tmp/bino.pgm" --truth "$tmp/bino"

# ---------------------------------------------------------------- one eye
expect 0 --backend cpu pupil "$tmp/round.pgm" --out "$tmp/round.csv"
[[ -z $err ]] || fail "pupil wrote to stderr on success: $err"
check header "$tmp/round.csv" || fail "the CSV header"
check truth "$tmp/round.csv" "$tmp/round" || fail "round pupil vs the truth"
# Standard output: the same table.
expect 0 --backend cpu pupil "$tmp/round.pgm"
printf '%s\n' "$out" >"$tmp/round_stdout.csv"
cmp -s "$tmp/round.csv" "$tmp/round_stdout.csv" || fail "the table on stdout differs from --out"
# The default backend (the GPU where there is one) agrees with the CPU.
expect 0 pupil "$tmp/round.pgm" --out "$tmp/round_auto.csv"
check same "$tmp/round.csv" "$tmp/round_auto.csv" || fail "the default backend differs from the CPU"
# ... with the automatic edge level too (step 3d: the GPU's refits take the CPU's decisions), on
# one eye and on two whose glow falls off by 70 % at the edge (thresholds 37, 39 -> 23, 23)
expect 0 "${eye[@]}" --seed 8 --binocular --glow-falloff 0.7 --eye-center 350,320 \
    --eye-center 940,310 --pupil-px 460 --out "$tmp/fall.pgm"
for name in deep fall; do
    two=()
    [[ $name == fall ]] && two=(--binocular)
    expect 0 --backend cpu pupil "$tmp/$name.pgm" "${two[@]}" --edge-level auto --out "$tmp/${name}_ac.csv"
    expect 0 pupil "$tmp/$name.pgm" "${two[@]}" --edge-level auto --out "$tmp/${name}_ad.csv"
    check same "$tmp/${name}_ac.csv" "$tmp/${name}_ad.csv" ||
        fail "$name, --edge-level auto: the default backend differs from the CPU"
done

for name in ell clean deep; do
    expect 0 --backend cpu pupil "$tmp/$name.pgm" --out "$tmp/$name.csv"
    check truth "$tmp/$name.csv" "$tmp/$name" || fail "$name pupil vs the truth"
done
# The same pixels as FITS and HDF5: the same table.
expect 0 --backend cpu pupil "$tmp/ell.fits" --out "$tmp/ell_f.csv"
cmp -s "$tmp/ell.csv" "$tmp/ell_f.csv" || fail "FITS and PGM of the same frame differ"
expect 0 --backend cpu pupil "$tmp/ell.h5" --out "$tmp/ell_h.csv"
cmp -s "$tmp/ell.csv" "$tmp/ell_h.csv" || fail "HDF5 and PGM of the same frame differ"

# Options reach the library: a fixed 8-bit scale changes the threshold's scale and is reported;
# no refit (--refine 0) still finds the pupil (the RANSAC winner), at other numbers.
expect 0 --backend cpu pupil "$tmp/round.pgm" --scale 2 --refine 0 --candidates 512 \
    --gauss-radius 3 --gauss-sigma 2.5 --close-radius 5 --inlier-px 1.5 --seed 9 \
    --out "$tmp/opt.csv" --json
printf '%s\n' "$out" >"$tmp/opt.json"
check json "$tmp/opt.json" "$tmp/opt.csv" 'rep["frames"][0]["scale"] == 2 and rep["scale"] == 2 and rep["refine"] == 0 and rep["candidates"] == 512 and rep["gauss_radius"] == 3 and rep["gauss_sigma"] == 2.5 and rep["close_radius"] == 5 and rep["inlier_px"] == 1.5 and rep["seed"] == 9' ||
    fail "options in the report: $out"
cmp -s "$tmp/round.csv" "$tmp/opt.csv" && fail "the options changed nothing"
# A size range that excludes the pupil: not found, exit 0.
expect 0 --backend cpu pupil "$tmp/round.pgm" --max-radius 100 --out "$tmp/small.csv"
check notfound "$tmp/small.csv" 1 || fail "--max-radius 100 on a 288-pixel pupil"

# ---------------------------------------------------------------- the threshold (step 3)
# Step 3c: t = floor(b + F (p - b)), b the iris' mean, p the pupil's median (p > b): a higher
# --edge-level gives a higher threshold; --edge-level 0 is the Otsu split itself, which
# --otsu-classes chooses (here two and three classes split this eye differently).
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0.2 --out "$tmp/e2.csv"
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0.4 --out "$tmp/e4.csv"
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0.9 --out "$tmp/e9.csv" --json
printf '%s\n' "$out" >"$tmp/e9.json"
check json "$tmp/e9.json" "$tmp/e9.csv" 'rep["edge_level"] == 0.9 and rep["otsu_classes"] == 3' ||
    fail "--edge-level in the report: $out"
t2=$(col "$tmp/e2.csv" threshold) t4=$(col "$tmp/e4.csv" threshold) t9=$(col "$tmp/e9.csv" threshold)
((t2 <= t4 && t4 < t9)) || fail "thresholds at edge levels 0.2, 0.4, 0.9: $t2, $t4, $t9"
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0 --out "$tmp/o3.csv"
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0 --otsu-classes 2 --out "$tmp/o2.csv" --json
printf '%s\n' "$out" >"$tmp/o2.json"
check json "$tmp/o2.json" "$tmp/o2.csv" 'rep["edge_level"] == 0 and rep["otsu_classes"] == 2' ||
    fail "--otsu-classes in the report: $out"
check truth "$tmp/o2.csv" "$tmp/round" || fail "two-class Otsu: the round pupil"
[[ $(col "$tmp/o2.csv" threshold) != $(col "$tmp/o3.csv" threshold) ]] ||
    fail "--otsu-classes 2 and 3 give one threshold: $(col "$tmp/o2.csv" threshold)"
# A bright disc (200) on a dark ground (10): step 0's scale is 128 / 200 (the mean of the pixels
# above the frame's mean), so b is about rint(6.4) and p rint(128): t about b + F (p - b), within
# 2 levels (the smoothed edge's pixels move b a little). Discs of radius 40 and 60 on 640 x 480:
# the default smallest semi-axis, 48 (a tenth of 480), rejects the first only.
python3 - "$tmp" <<'EOF'
import sys
w, h = 640, 480
for r in (40, 60):
    px = bytearray(w * h)
    for y in range(h):
        for x in range(w):
            px[y * w + x] = 200 if (x - 300.5) ** 2 + (y - 250) ** 2 <= r * r else 10
    open("%s/disc%d.pgm" % (sys.argv[1], r), "wb").write(b"P5\n%d %d\n255\n" % (w, h) + bytes(px))
EOF
for F in 0.4 0.9; do
    expect 0 --backend cpu pupil "$tmp/disc60.pgm" --edge-level $F --out "$tmp/disc.csv" --json
    printf '%s\n' "$out" >"$tmp/disc.json"
    check json "$tmp/disc.json" "$tmp/disc.csv" 'abs(rep["frames"][0]["scale"] / (128 / 200) - 1) < 1e-12 and rep["min_radius_px"] == 48' ||
        fail "disc: the scale or the smallest radius: $out"
    t=$(col "$tmp/disc.csv" threshold)
    python3 -c "import sys; t = 6 + $F * (128 - 6); sys.exit(not (t - 2 <= $t <= t + 2))" ||
        fail "disc, --edge-level $F: threshold $t"
    [[ $(col "$tmp/disc.csv" valid) == 1 ]] || fail "disc of radius 60 not found: $(cat "$tmp/disc.csv")"
done
expect 0 --backend cpu pupil "$tmp/disc40.pgm" --out "$tmp/disc40.csv"
check notfound "$tmp/disc40.csv" 1 || fail "a disc of radius 40 with the smallest semi-axis 48"
expect 0 --backend cpu pupil "$tmp/disc40.pgm" --min-radius 30 --out "$tmp/disc40m.csv"
[[ $(col "$tmp/disc40m.csv" valid) == 1 ]] || fail "--min-radius 30: $(cat "$tmp/disc40m.csv")"
# --max-radius below the default smallest radius (64 on 640 x 640): a clear error (exit 1)
expect 1 --backend cpu pupil "$tmp/round.pgm" --max-radius 50 --out "$tmp/never.csv"
expect_one_line pupil --max-radius 50
[[ $err == *--min-radius* ]] || fail "--max-radius 50 alone: $err"
expect 0 --backend cpu pupil "$tmp/round.pgm" --max-radius 50 --min-radius 10 --out "$tmp/mr.csv"
check notfound "$tmp/mr.csv" 1 || fail "--max-radius 50 --min-radius 10 on a 288-pixel pupil"

# ---------------------------------------------------------------- the near band (step 9)
# Clutter exactly when near > --max-near-ratio x inliers; the counts do not depend on it. The
# seed's artefacts leave some border pixels near the round pupil's ellipse. A fixed edge level:
# with the automatic one (step 3d) a refit that fails the test keeps the pupil of the pass before.
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0.4 --out "$tmp/round04.csv"
near=$(col "$tmp/round04.csv" near) inl=$(col "$tmp/round04.csv" inliers)
((near > 0)) || fail "no near-band pixels on the round pupil: the test below tests nothing"
lo=$(awk -v n="$near" -v i="$inl" 'BEGIN { printf "%.9g", 0.999 * n / i }')
hi=$(awk -v n="$near" -v i="$inl" 'BEGIN { printf "%.9g", 1.001 * n / i }')
expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0.4 --max-near-ratio "$lo" --out "$tmp/nlo.csv" --json
printf '%s\n' "$out" >"$tmp/nlo.json"
check json "$tmp/nlo.json" "$tmp/nlo.csv" 'rep["max_near_ratio"] == '"$lo"' and rep["frames"][0]["pupils"][0]["failure_code"] == 7 and rep["frames"][0]["pupils"][0]["near"] == '"$near"' and rep["frames"][0]["pupils"][0]["inliers"] == '"$inl" ||
    fail "--max-near-ratio just below near / inliers: $out"
check notfound "$tmp/nlo.csv" 1 || fail "--max-near-ratio $lo"
for r in "$hi" inf; do
    expect 0 --backend cpu pupil "$tmp/round.pgm" --edge-level 0.4 --max-near-ratio "$r" --out "$tmp/nhi.csv"
    cmp -s "$tmp/round04.csv" "$tmp/nhi.csv" || fail "--max-near-ratio $r changed the table"
done
expect 0 --backend cpu pupil "$tmp/round.pgm" --max-near-ratio inf --out "$tmp/ninf.csv" --json
printf '%s\n' "$out" >"$tmp/ninf.json"
check json "$tmp/ninf.json" "$tmp/ninf.csv" 'rep["max_near_ratio"] is None' ||
    fail "--max-near-ratio inf in the report (null): $out"
# Thresholded white noise, neither smoothed nor closed: a border dense everywhere, clutter; the
# test off, the same counts pass it.
python3 - "$tmp/noise.pgm" <<'EOF'
import random, sys
random.seed(1)
w, h = 320, 240
open(sys.argv[1], "wb").write(b"P5\n%d %d\n255\n" % (w, h) + bytes(random.randrange(256) for _ in range(w * h)))
EOF
expect 0 --backend cpu pupil "$tmp/noise.pgm" --out "$tmp/noise.csv"
check notfound "$tmp/noise.csv" 1 || fail "white noise"
raw=(--backend cpu pupil "$tmp/noise.pgm" --gauss-radius 0 --close-radius 0)
expect 0 "${raw[@]}" --out "$tmp/noise0.csv" --json
printf '%s\n' "$out" >"$tmp/noise0.json"
check json "$tmp/noise0.json" "$tmp/noise0.csv" 'rep["frames"][0]["pupils"][0]["failure_code"] == 7 and rep["frames"][0]["pupils"][0]["near"] > 0.75 * rep["frames"][0]["pupils"][0]["inliers"]' ||
    fail "white noise, no smoothing, no close: not clutter: $out"
expect 0 "${raw[@]}" --max-near-ratio inf --out "$tmp/noise1.csv"
[[ $(col "$tmp/noise1.csv" near) == $(col "$tmp/noise0.csv" near) && $(col "$tmp/noise1.csv" failure) != $(col "$tmp/noise0.csv" failure) ]] ||
    fail "white noise with --max-near-ratio inf: $(cat "$tmp/noise1.csv")"

# ---------------------------------------------------------------- --json
expect 0 --backend cpu pupil "$tmp/ell.pgm" --out "$tmp/ell_j.csv" --json
printf '%s\n' "$out" >"$tmp/ell.json"
python3 -m json.tool "$tmp/ell.json" >/dev/null || fail "--json does not parse: $out"
cmp -s "$tmp/ell.csv" "$tmp/ell_j.csv" || fail "--json changed the table"
check json "$tmp/ell.json" "$tmp/ell.csv" 'rep["frame_count"] == 1 and rep["first_frame"] == 0 and rep["pupils"] == 1 and rep["frame_size"] == [640, 640] and rep["pixel_type"] == "u8" and rep["backend"] == "cpu" and rep["inputs"][0].endswith("ell.pgm") and rep["scale"] == "auto" and rep["frames"][0]["split_x"] == 640 and rep["pupils_found"] == 1 and rep["lenslet_grid"] is None' ||
    fail "JSON report: $out"
# pupil.h's defaults: three classes, the automatic edge level, near ratio 0.75, a tenth of 640
check json "$tmp/ell.json" "$tmp/ell.csv" 'rep["otsu_classes"] == 3 and rep["edge_level"] == "auto" and rep["max_near_ratio"] == 0.75 and rep["min_radius_px"] == 64' ||
    fail "JSON report, the defaults: $out"

# ---------------------------------------------------------------- two eyes
expect 0 --backend cpu pupil "$tmp/bino.pgm" --binocular --out "$tmp/bino.csv" --json
printf '%s\n' "$out" >"$tmp/bino.json"
check header "$tmp/bino.csv" || fail "binocular header"
check truth "$tmp/bino.csv" "$tmp/bino" || fail "two eyes vs the truth"
# the split found lies between the pupils' edges
check json "$tmp/bino.json" "$tmp/bino.csv" 'rep["pupils"] == 2 and rep["split"] == "auto" and 600 < rep["frames"][0]["split_x"] < 690 and [q["x1"] for q in rep["frames"][0]["pupils"]][0] == rep["frames"][0]["split_x"] and rep["min_radius_px"] == 64' ||
    fail "binocular JSON: $out"
# a given split between the eyes: the same pupils, that split reported
expect 0 --backend cpu pupil "$tmp/bino.pgm" --binocular --split 640 --out "$tmp/bino_s.csv" --json
printf '%s\n' "$out" >"$tmp/bino_s.json"
check truth "$tmp/bino_s.csv" "$tmp/bino" || fail "two eyes with --split 640"
check json "$tmp/bino_s.json" "$tmp/bino_s.csv" 'rep["split"] == 640 and rep["frames"][0]["split_x"] == 640' ||
    fail "--split in the report: $out"
# one pupil asked for on two eyes: one row (the whole frame is one region)
expect 0 --backend cpu pupil "$tmp/bino.pgm" --out "$tmp/bino_1.csv"
[[ $(($(wc -l <"$tmp/bino_1.csv") - 1)) == 1 ]] || fail "one pupil on a binocular frame: $(cat "$tmp/bino_1.csv")"

# ---------------------------------------------------------------- several frames
expect 0 --backend cpu pupil "$tmp/round.pgm" "$tmp/ell.pgm" "$tmp/clean.pgm" --out "$tmp/three.csv"
check header "$tmp/three.csv" frame || fail "several frames: the frame column"
check frames "$tmp/three.csv" 0,1,2 1 || fail "several frames: rows"
check truth "$tmp/three.csv" "$tmp/round" 0 || fail "frame 0"
check truth "$tmp/three.csv" "$tmp/ell" 1 || fail "frame 1"
check truth "$tmp/three.csv" "$tmp/clean" 2 || fail "frame 2"
expect 0 --backend cpu pupil "$tmp/round.pgm" "$tmp/ell.pgm" "$tmp/clean.pgm" --first 1 --count 1 \
    --out "$tmp/one.csv" --no-progress
check frames "$tmp/one.csv" 1 1 || fail "--first 1 --count 1"
check truth "$tmp/one.csv" "$tmp/ell" 1 || fail "--first 1 --count 1: the pupil"
# --progress draws on stderr, and only there
expect 0 --backend cpu pupil "$tmp/round.pgm" "$tmp/ell.pgm" --progress --out "$tmp/two.csv"
[[ $err == *"2/2 frames"* ]] || fail "--progress: $err"

# ---------------------------------------------------------------- lenslet mask
# sim eye's default grid on 640 x 640: 20 x 20 lenslets of 32 px from (0, 0).
expect 0 --backend cpu pupil "$tmp/ell.pgm" --pitch 32 --grid 20x20 --origin 0,0 \
    --lenslet-mask "$tmp/mask.csv" --out "$tmp/ell_m.csv" --json
printf '%s\n' "$out" >"$tmp/mask.json"
cmp -s "$tmp/ell.csv" "$tmp/ell_m.csv" || fail "the lenslet grid changed the table"
check mask "$tmp/mask.csv" "$tmp/ell" 32 20 20 0 0 || fail "lenslet mask vs the truth"
inside=$(awk -F, 'NR > 1 && $3 == 1' "$tmp/mask.csv" | wc -l)
check json "$tmp/mask.json" "$tmp/ell_m.csv" 'rep["frames"][0]["pupils"][0]["lenslets"] == '"$inside"' and rep["lenslet_grid"]["nx"] == 20' ||
    fail "lenslets in the report: $out"
expect 0 --backend cpu centroid "$tmp/ell.pgm" --pitch 32 --grid 20x20 --origin 0,0 \
    --mask "$tmp/mask.csv" --out "$tmp/cent.csv"
valid_c=$(awk -F, 'NR > 1 && $6 == 1' "$tmp/cent.csv" | wc -l)
((valid_c > 0 && valid_c <= inside)) || fail "centroid with the pupil's mask: $valid_c of $inside lenslets"
# the centre rule keeps at least as many lenslets as the whole-square rule
expect 0 --backend cpu pupil "$tmp/ell.pgm" --pitch 32 --grid 20x20 --origin 0,0 \
    --lenslet-rule centre --lenslet-mask "$tmp/mask_c.csv" --out "$tmp/ell_mc.csv"
inside_c=$(awk -F, 'NR > 1 && $3 == 1' "$tmp/mask_c.csv" | wc -l)
((inside_c > inside)) || fail "--lenslet-rule centre: $inside_c lenslets, full: $inside"
# two eyes: lenslets of each eye in its pupil
expect 0 --backend cpu pupil "$tmp/bino.pgm" --binocular --pitch 32 --grid 40x20 --origin 0,0 \
    --lenslet-mask "$tmp/mask_b.csv" --out "$tmp/bino_m.csv"
check mask "$tmp/mask_b.csv" "$tmp/bino" 32 40 20 0 0 || fail "binocular lenslet mask"

# ---------------------------------------------------------------- --overlay
expect 0 --backend cpu pupil "$tmp/ell.pgm" --overlay "$tmp/ell.png" --out "$tmp/ell_o.csv"
check png "$tmp/ell.png" 640 640 "$tmp/ell" || fail "the overlay picture"
expect 0 --backend cpu pupil "$tmp/bino.pgm" --binocular --overlay "$tmp/bino.png" --out "$tmp/bino_o.csv"
check png "$tmp/bino.png" 1280 640 "$tmp/bino" || fail "the binocular overlay picture"

# ---------------------------------------------------------------- nothing to find (exit 0)
python3 - "$tmp/dark.pgm" "$tmp/flat.pgm" <<'EOF'
import sys
w, h = 128, 96
open(sys.argv[1], "wb").write(b"P5\n%d %d\n255\n" % (w, h) + bytes(w * h))
open(sys.argv[2], "wb").write(b"P5\n%d %d\n255\n" % (w, h) + bytes([40]) * (w * h))
EOF
expect 0 --backend cpu pupil "$tmp/dark.pgm" --out "$tmp/dark.csv" --json
printf '%s\n' "$out" >"$tmp/dark.json"
check notfound "$tmp/dark.csv" 1 || fail "a dark frame"
# pupil.h: an empty frame (mean 0) is failure 1, a region without contrast 2
check json "$tmp/dark.json" "$tmp/dark.csv" 'rep["frames"][0]["pupils"][0]["failure_code"] == 1 and rep["pupils_found"] == 0 and abs(rep["min_radius_px"] - 9.6) < 1e-12' ||
    fail "dark frame JSON: $out"
expect 0 --backend cpu pupil "$tmp/flat.pgm" --binocular --out "$tmp/flat.csv" --json
printf '%s\n' "$out" >"$tmp/flat.json"
check notfound "$tmp/flat.csv" 2 || fail "a flat frame"
check json "$tmp/flat.json" "$tmp/flat.csv" 'all(q["failure_code"] == 2 for q in rep["frames"][0]["pupils"])' ||
    fail "flat frame JSON: $out"
[[ $(sed -n 2p "$tmp/dark.csv") != $(sed -n 2p "$tmp/flat.csv") ]] || fail "dark and flat give one reason"

# ---------------------------------------------------------------- help
expect 0 pupil --help
for o in --binocular --split --scale --gauss-radius --gauss-sigma --close-radius --candidates \
    --inlier-px --refine --min-radius --max-radius --min-coverage --seed --pitch --grid --origin \
    --otsu-classes --edge-level --max-near-ratio "a tenth of the" \
    --lenslet-rule --lenslet-mask --out --json --overlay --first --count --dataset --progress \
    FITS PGM HDF5 "Exit status"; do
    [[ $out == *"$o"* ]] || fail "pupil --help does not mention $o"
done
[[ $out == *"$(sed -n 1p "$tmp/round.csv")"* ]] || fail "pupil --help: the columns"
expect 0 help pupil
expect 0 --help
[[ $out == *"pupil"* ]] || fail "spotwave --help does not list pupil"

# ---------------------------------------------------------------- usage errors (2)
img=$tmp/round.pgm
bad=(
    "pupil"
    "pupil $img --wat"
    "pupil $img --split 300"
    "pupil $img --binocular --split 0"
    "pupil $img --binocular --split x"
    "pupil $img --scale 0"
    "pupil $img --scale -1"
    "pupil $img --gauss-radius 17"
    "pupil $img --gauss-sigma 0"
    "pupil $img --close-radius -1"
    "pupil $img --candidates 100"
    "pupil $img --candidates 16"
    "pupil $img --candidates 70000"
    "pupil $img --inlier-px 0"
    "pupil $img --refine 21"
    "pupil $img --min-radius -2"
    "pupil $img --min-radius 50 --max-radius 20"
    "pupil $img --min-coverage 1.5"
    "pupil $img --otsu-classes 1"
    "pupil $img --otsu-classes 4"
    "pupil $img --otsu-classes three"
    "pupil $img --edge-level 1"
    "pupil $img --edge-level -0.1"
    "pupil $img --edge-level nan"
    "pupil $img --max-near-ratio -1"
    "pupil $img --max-near-ratio -inf"
    "pupil $img --max-near-ratio lots"
    "pupil $img --seed -1"
    "pupil $img --pitch 32"
    "pupil $img --pitch 32 --grid 20x20"
    "pupil $img --pitch 0 --grid 20x20 --origin 0,0"
    "pupil $img --pitch 32 --grid 20 --origin 0,0"
    "pupil $img --pitch 32 --grid 20x20 --origin 0"
    "pupil $img --lenslet-mask $tmp/m.csv"
    "pupil $img --lenslet-rule centre"
    "pupil $img --pitch 32 --grid 20x20 --origin 0,0 --lenslet-rule middle"
    "pupil $img --json"
    "pupil $img --json --out -"
    "pupil $img --first -1"
    "pupil $img --count 0"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect_usage $args
done

# ---------------------------------------------------------------- failures while running (1)
fail1() { # ARGS... : exit 1, one line on stderr naming the command, no output file left behind
    expect 1 --backend cpu pupil "$@" --out "$tmp/never.csv"
    expect_one_line pupil "$@"
    [[ $err == "spotwave pupil: "* ]] || fail "'$*': stderr: $err"
    [[ ! -e $tmp/never.csv ]] || fail "'$*' left an output file"
}
fail1 "$tmp/missing.pgm"
[[ $err == *"missing.pgm"* ]] || fail "missing file not named: $err"
printf 'hello\n' >"$tmp/text.pgm"
fail1 "$tmp/text.pgm"
[[ $err == *"text.pgm"* ]] || fail "non-image file not named: $err"
fail1 "$tmp/round.pgm" "$tmp/bino.pgm"
[[ $err == *"bino.pgm"* ]] || fail "inputs of different sizes: $err"
fail1 "$tmp/round.pgm" "$tmp/deep.pgm"
fail1 "$tmp/round.pgm" --first 1
fail1 "$tmp/round.pgm" "$tmp/ell.pgm" --first 1 --count 2
fail1 "$tmp/bino.pgm" --binocular --split 1280
fail1 "$tmp/round.pgm" --pitch 32 --grid 21x20 --origin 0,0 --lenslet-mask "$tmp/never_m.csv"
[[ ! -e $tmp/never_m.csv ]] || fail "a grid that does not fit left a mask file"
python3 - "$tmp/tiny.pgm" <<'EOF'
import sys
open(sys.argv[1], "wb").write(b"P5\n8 8\n255\n" + bytes(range(64)))
EOF
fail1 "$tmp/tiny.pgm"
# An output that cannot be written.
expect 1 --backend cpu pupil "$tmp/round.pgm" --out "$tmp/no/such/dir/p.csv"
expect_one_line pupil unwritable
expect 1 --backend cpu pupil "$tmp/round.pgm" --out "$tmp/p.csv" --overlay "$tmp/no/such/dir/p.png"
expect_one_line pupil unwritable overlay
[[ ! -e $tmp/p.csv ]] || fail "a picture that cannot be written left the table behind"

echo "ok"
