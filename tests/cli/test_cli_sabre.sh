#!/usr/bin/env bash
# `spotwave sabre`: slopes of known wavefronts (a tilt and a quadratic, exact lenslet-mean
# gradients on a 17 x 17 grid, which 2, 4, 8 and 16 partitions tile without padding) through the
# three methods (D-SABRE with H-PME and D-PME, global SABRE, Fried), with the actuators, the
# spline's vertex values and the map checked against the truth (tilt: tight, the models are exact
# for it; quadratic: loose), pixel slopes equal to radian slopes, a nan row equal to a missing row,
# the JSON report, the CPU and automatic backends, `sim sh` -> `centroid --slopes` -> `sabre` end
# to end, splines of degree 2 and 3 (--degree) on a defocus from `sim sh` (exact for them), robust
# passes (--robust-passes) against injected outliers for D-SABRE and global SABRE of every degree,
# and
# exit codes: 2 (one line pointing at --help) for bad options, 1 (one clear line) for inputs that
# cannot be used.
# Usage: test_cli_sabre.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to make and check the tables"

cat >"$tmp/check.py" <<'EOF'
import json, math, os, struct, sys

P = float(os.environ.get("SW_P", "100"))  # lenslet pitch, um (--lenslet-um)

def wave(kind, nx, ny):
    """W(u, v) in um and its gradient (rad), u = x P, v = y P (lattice x, y)."""
    if kind == "tilt":
        a, b = 1.2e-3, -0.7e-3
        return (lambda u, v: a * u + b * v), (lambda u, v: (a, b))
    if kind == "defocus":  # sim sh: Z(2,0) = sqrt(3)(2 rho^2 - 1) of 0.5 um, circle inscribed;
        # the OPD is minus the Zernike sum (OSA sign, sim_sh.h)
        uc, vc, rr, c = (nx - 1) / 2 * P, (ny - 1) / 2 * P, min(nx, ny) * P / 2, -0.5
        return ((lambda u, v: c * math.sqrt(3) * (2 * ((u - uc) ** 2 + (v - vc) ** 2) / rr ** 2 - 1)),
                None)
    u0, v0 = 0.3 * nx * P, 0.6 * ny * P
    c, d, e = 2e-6, -1.3e-6, 0.8e-6
    return ((lambda u, v: c * (u - u0) ** 2 + d * (v - v0) ** 2 + e * u * v),
            (lambda u, v: (2 * c * (u - u0) + e * v, 2 * d * (v - v0) + e * u)))

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    rows = []
    for l in lines[1:]:
        cells = l.split(",")
        rows.append({k: (c if k == "kind" else float(c)) for k, c in zip(names, cells)})
    return names, rows

def valid_set(slopes):
    _, rows = read_csv(slopes)
    dx = "dx_rad" if "dx_rad" in rows[0] else "dx_px"
    return {(int(r["ix"]), int(r["iy"])) for r in rows
            if not math.isnan(r[dx]) and not math.isnan(r[dx.replace("x", "y", 1)])}

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
    assert int(cards["BITPIX"]) == -32 and int(cards["NAXIS"]) == 2, cards
    w, h = int(cards["NAXIS1"]), int(cards["NAXIS2"])
    return w, h, struct.unpack(">%df" % (w * h), data[pos:pos + 4 * w * h])

def compare(pairs, tol, what):
    """pairs of (got, truth): both with their mean removed, max error <= tol * PV(truth)."""
    assert pairs, what
    mg = sum(g for g, _ in pairs) / len(pairs)
    mt = sum(t for _, t in pairs) / len(pairs)
    pv = max(t for _, t in pairs) - min(t for _, t in pairs)
    err = max(abs((g - mg) - (t - mt)) for g, t in pairs)
    assert err <= tol * pv, "%s: max error %.3g > %.3g x PV %.3g" % (what, err, tol, pv)
    return mg, err / pv

cmd = sys.argv[1]
if cmd == "gen":  # gen NX NY KIND OUT MODE: rad, px (5.5 um pixels, 3.5 mm), nan I,J, drop I,J,
    # nanpair I,J (nan at (I, J) and (I + 1, J)), outliers (rad, 7 lenslets off by +-0.02 rad)
    nx, ny, kind, out, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
    hole = tuple(map(int, sys.argv[7].split(","))) if len(sys.argv) > 7 else None
    _, grad = wave(kind, nx, ny)
    k = 3.5 * 1000.0 / 5.5  # pixels per radian
    with open(out, "w") as f:
        f.write("ix,iy,dx_px,dy_px\n" if mode == "px" else "ix,iy,dx_rad,dy_rad\n")
        for iy in range(ny):
            for ix in range(nx):
                # the mean gradient over the lenslet: the gradient at its centre (W quadratic)
                gx, gy = grad(ix * P, iy * P)
                if (ix, iy) == hole and mode == "drop":
                    continue
                if hole and mode == "nanpair" and (ix, iy) in (hole, (hole[0] + 1, hole[1])):
                    f.write("%d,%d,nan,nan\n" % (ix, iy))
                elif (ix, iy) == hole and mode == "nan":
                    f.write("%d,%d,nan,nan\n" % (ix, iy))
                elif mode == "px":
                    f.write("%d,%d,%.12g,%.12g\n" % (ix, iy, gx * k, gy * k))
                elif mode == "outliers" and (ix * 7 + iy * 3) % 41 == 5:
                    s = 1 if (ix + iy) % 2 else -1
                    f.write("%d,%d,%.12g,%.12g\n" % (ix, iy, gx + 0.02 * s, gy - 0.02 * s))
                else:
                    f.write("%d,%d,%.12g,%.12g\n" % (ix, iy, gx, gy))
elif cmd == "act":  # act ACT.csv SLOPES.csv NX NY KIND TOL: actuators vs W at the lenslet corners
    nx, ny, kind, tol = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], float(sys.argv[7])
    names, rows = read_csv(sys.argv[2])
    assert names == ["cx", "cy", "w"], names
    assert len(rows) == (nx + 1) * (ny + 1), len(rows)
    valid = valid_set(sys.argv[3])
    W, _ = wave(kind, nx, ny)
    pairs, n = [], 0
    for i, r in enumerate(rows):
        cx, cy = int(r["cx"]), int(r["cy"])
        assert (cx, cy) == (i % (nx + 1), i // (nx + 1)), (i, r)
        active = any((ix, iy) in valid for ix in (cx - 1, cx) for iy in (cy - 1, cy))
        assert active != math.isnan(r["w"]), ("nan exactly at corners of no valid lenslet", r)
        if active:
            pairs.append((r["w"], W((cx - 0.5) * P, (cy - 0.5) * P)))
    mean, rel = compare(pairs, tol, "actuators")
    if os.environ.get("SW_REL"):  # the relative error instead of the truth's RMS
        print("%.6g" % rel)
        sys.exit(0)
    assert abs(mean) <= 1e-6 * max(abs(g) for g, _ in pairs), ("piston not removed", mean)
    mt = sum(t for _, t in pairs) / len(pairs)
    print("%.17g" % math.sqrt(sum((t - mt) ** 2 for _, t in pairs) / len(pairs)))
elif cmd == "same":  # same A.csv B.csv TOL: equal tables (nan = nan), cells within TOL x max |w|
    na, a = read_csv(sys.argv[2])
    nb, b = read_csv(sys.argv[3])
    tol = float(sys.argv[4])
    assert na == nb and len(a) == len(b), (na, nb, len(a), len(b))
    scale = max(abs(r["w"]) for r in a if not math.isnan(r["w"]))
    for r, s in zip(a, b):
        for k in na:
            if k == "w" and (math.isnan(r[k]) or math.isnan(s[k])):
                assert math.isnan(r[k]) and math.isnan(s[k]), (r, s)
            elif k == "w":
                assert abs(r[k] - s[k]) <= tol * scale, (r, s)
            else:
                assert r[k] == s[k], (r, s)
elif cmd == "values":  # values VALUES.csv NX NY KIND TOL SX SY: vertices inside the array vs W
    nx, ny, kind, tol = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
    sx, sy = int(sys.argv[7]), int(sys.argv[8])
    names, rows = read_csv(sys.argv[2])
    assert names == ["kind", "I", "J", "x", "y", "w"], names
    assert len(rows) == (sx + 1) * (sy + 1) + sx * sy, len(rows)
    assert rows[0]["kind"] == "corner" and rows[-1]["kind"] == "centre", (rows[0], rows[-1])
    W, _ = wave(kind, nx, ny)
    pairs = []
    for r in rows:
        half = 0.5 if r["kind"] == "centre" else 0.0
        assert r["kind"] in ("corner", "centre"), r
        assert r["x"] - r["I"] - half == rows[0]["x"] and r["y"] - r["J"] - half == rows[0]["y"], r
        if 0 <= r["x"] <= nx - 1 and 0 <= r["y"] <= ny - 1:
            assert not math.isnan(r["w"]), r
            pairs.append((r["w"], W(r["x"] * P, r["y"] * P)))
    compare(pairs, tol, "vertex values")
elif cmd == "map":  # map MAP.fits NX NY KIND TOL W H [HOLE]: pixels vs W, nan in the hole
    nx, ny, kind, tol = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
    ww, hh = int(sys.argv[7]), int(sys.argv[8])
    hole = tuple(map(int, sys.argv[9].split(","))) if len(sys.argv) > 9 else None
    w, h, px = read_fits(sys.argv[2])
    assert (w, h) == (ww, hh), (w, h)
    W, _ = wave(kind, nx, ny)
    pairs, nans = [], 0
    for k in range(h):
        for i in range(w):
            x, y = -0.5 + (i + 0.5) * nx / w, -0.5 + (k + 0.5) * ny / h
            v = px[k * w + i]
            if (int(math.floor(x + 0.5)), int(math.floor(y + 0.5))) == hole:
                assert math.isnan(v), (i, k, v)
                nans += 1
                continue
            assert not math.isnan(v), (i, k)
            pairs.append((v, W(x * P, y * P)))
    mean, _ = compare(pairs, tol, "map")
    assert abs(mean) <= 1e-5 * max(abs(g) for g, _ in pairs), ("map piston", mean)
    assert (nans > 0) == (hole is not None), nans
elif cmd == "e2e":  # e2e ACT.csv TRUTH.csv LENSLET_UM PIXEL_UM FOCAL_MM: the tilt's gradient
    _, act = read_csv(sys.argv[2])
    _, truth = read_csv(sys.argv[3])
    p, pix, foc = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    # the true slope (rad) from the simulator's spot displacements, mean over the lenslets
    sx = sum((r["x_px"] - r["ref_x_px"]) for r in truth) / len(truth) * pix / (foc * 1000)
    sy = sum((r["y_px"] - r["ref_y_px"]) for r in truth) / len(truth) * pix / (foc * 1000)
    w = {(int(r["cx"]), int(r["cy"])): r["w"] for r in act}
    n = max(c for c, _ in w)
    gx = sum(w[(c + 1, d)] - w[(c, d)] for c in range(n) for d in range(n + 1)) / (n * (n + 1))
    gy = sum(w[(c, d + 1)] - w[(c, d)] for c in range(n + 1) for d in range(n)) / (n * (n + 1))
    assert abs(sx * p) > 0.05 and abs(sy) < 1e-2 * abs(sx), (sx, sy)
    assert abs(gx - sx * p) < 0.01 * abs(sx * p), (gx, sx * p)
    assert abs(gy - sy * p) < 0.01 * abs(sx * p), (gy, sy * p)
elif cmd == "sh2slopes":  # sh2slopes TRUTH.csv OUT: the simulator's spots as dx_px,dy_px
    _, rows = read_csv(sys.argv[2])
    with open(sys.argv[3], "w") as f:
        f.write("ix,iy,dx_px,dy_px\n")
        for r in rows:
            f.write("%d,%d,%.9g,%.9g\n" % (r["ix"], r["iy"], r["x_px"] - r["ref_x_px"],
                                           r["y_px"] - r["ref_y_px"]))
elif cmd == "json":
    r = json.loads(open(sys.argv[2]).read())
    assert eval(sys.argv[3]), r
EOF
check() { python3 "$tmp/check.py" "$@"; }

N=17 # 17 = 2 x 8 + 1 = 4 x 4 + 1 = 8 x 2 + 1: no padding for 2, 4 or 8 partitions
check gen $N $N tilt "$tmp/tilt.csv" rad
check gen $N $N quad "$tmp/quad.csv" rad
check gen $N $N tilt "$tmp/tilt_px.csv" px
check gen $N $N tilt "$tmp/tilt_nan.csv" nan 5,6
check gen $N $N tilt "$tmp/tilt_drop.csv" drop 5,6
L=(--lenslet-um 100)

# ---------------------------------------------------------------- help, registration
expect 0 sabre --help
[[ $out == *"Usage: spotwave [GLOBAL OPTIONS] sabre SLOPES.csv"* ]] || fail "sabre --help: $out"
expect 0 --help
[[ $out == *"sabre "* ]] || fail "sabre is not listed in spotwave --help"

# ---------------------------------------------------------------- the three methods on a tilt
# The models are exact for a tilt (sabre.h): float precision only.
for be in cpu auto; do
    for m in "--method dsabre" "--method dsabre --pme distributed" "--method dsabre --partitions 4 --overlap 2" \
        "--method dsabre --partitions 2 --overlap 0" "--method dsabre --partitions 16" "--method global" "--method fried"; do
        # shellcheck disable=SC2086
        expect 0 --backend $be sabre "$tmp/tilt.csv" "${L[@]}" $m --actuators "$tmp/a.csv" --json
        printf '%s\n' "$out" >"$tmp/a.json"
        rms=$(check act "$tmp/a.csv" "$tmp/tilt.csv" $N $N tilt 2e-5) ||
            fail "tilt, $be, $m: actuators differ from the truth"
        check json "$tmp/a.json" "r['subcommand'] == 'sabre' and r['grid_nx'] == $N and r['grid_ny'] == $N and r['lenslets_valid'] == $N * $N and r['lenslets_listed'] == $N * $N and r['corners_active'] == ($N + 1) ** 2 and abs(r['rms'] - $rms) <= 1e-4 * $rms and r['pv'] > 3 * r['rms'] and r['run_us'] >= 0 and r['plan_us'] >= 0 and r['unit'] == 'um' and r['slopes'] == 'rad' and ('$be' != 'cpu' or r['backend'] == 'cpu') and r['path'] == ('gpu' if r['backend'] == 'cuda' and r['method'] == 'dsabre' else 'host')" ||
            fail "tilt, $be, $m: JSON report: $out"
    done
done

# ---------------------------------------------------------------- the quadratic (loose)
for m in "--method dsabre" "--method dsabre --pme distributed" "--method global" "--method fried"; do
    # shellcheck disable=SC2086
    expect 0 --backend cpu sabre "$tmp/quad.csv" "${L[@]}" $m --actuators "$tmp/q.csv"
    check act "$tmp/q.csv" "$tmp/quad.csv" $N $N quad 0.02 >/dev/null ||
        fail "quadratic, $m: actuators differ from the truth by more than 2% of PV"
done

# ---------------------------------------------------------------- JSON: the partitioning
# 17 x 17, 8 partitions: m = 2 (8 m + 1 >= 17), window 2 + 2 OL = 4, extended 17; H-PME has
# log2(8) = 3 levels, D-PME L_D = 8 iterations (the largest Manhattan distance to partition (4, 4)).
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['method'] == 'dsabre' and r['pme'] == 'hierarchical' and r['partitions'] == 8 and r['m'] == 2 and r['window'] == 4 and r['extended'] == 17 and r['iterations'] == 3 and r['overlap'] == 1 and r['actuators'] is None and r['map'] is None" ||
    fail "default D-SABRE report: $out"
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --pme distributed --partitions 4 --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['pme'] == 'distributed' and r['partitions'] == 4 and r['m'] == 4 and r['window'] == 6 and r['iterations'] == 4" ||
    fail "D-PME report: $out"
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --method fried --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['method'] == 'fried' and r['partitions'] is None and r['fried_reg'] == 1e-3 and r['path'] == 'host'" ||
    fail "Fried report: $out"

# Without an output option the actuators go to standard output (no report); the default
# partitions shrink for a small grid (5 x 5: 4 partitions, m = 1).
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --method global
printf '%s\n' "$out" >"$tmp/stdout.csv"
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --method global --actuators "$tmp/g.csv"
[[ $out == *"sabre: global, grid 17x17"* ]] || fail "text report: $out"
check same "$tmp/stdout.csv" "$tmp/g.csv" 0 || fail "actuators on stdout differ from the file"
check gen 5 5 tilt "$tmp/small.csv" rad
expect 0 --backend cpu sabre "$tmp/small.csv" "${L[@]}" --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['partitions'] == 4 and r['m'] == 1" || fail "small grid: $out"

# ---------------------------------------------------------------- pixels, nan rows, values, map
# dx_px,dy_px with --pixel-um and --focal-mm: the same wavefront as radians.
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --actuators "$tmp/r.csv"
expect 0 --backend cpu sabre "$tmp/tilt_px.csv" "${L[@]}" --pixel-um 5.5 --focal-mm 3.5 \
    --actuators "$tmp/p.csv" --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['slopes'] == 'px'" || fail "pixel slopes report: $out"
check same "$tmp/r.csv" "$tmp/p.csv" 1e-5 || fail "pixel and radian slopes disagree"

# A nan row is a lenslet without data: the same as leaving the row out; the corners of the
# other lenslets stay exact for the baselines (D-SABRE pads the hole with zero slopes).
for m in dsabre global fried; do
    expect 0 --backend cpu sabre "$tmp/tilt_nan.csv" "${L[@]}" --method $m --actuators "$tmp/n.csv" --json
    printf '%s\n' "$out" >"$tmp/j.json"
    check json "$tmp/j.json" "r['lenslets_valid'] == $N * $N - 1 and r['lenslets_listed'] == $N * $N" ||
        fail "nan row, $m: report: $out"
    expect 0 --backend cpu sabre "$tmp/tilt_drop.csv" "${L[@]}" --method $m --grid ${N}x$N \
        --actuators "$tmp/d.csv"
    check same "$tmp/n.csv" "$tmp/d.csv" 0 || fail "nan row, $m: not the same as a missing row"
    tol=2e-5
    [[ $m == dsabre ]] && tol=0.05
    check act "$tmp/n.csv" "$tmp/tilt_nan.csv" $N $N tilt $tol >/dev/null ||
        fail "nan row, $m: actuators differ from the truth"
done
# The hole's padding: nearest-lenslet padding keeps the tilt exact (every padded slope is the
# tilt's), fill passes keep it so; fill passes from zero padding bring it closer.
expect 0 --backend cpu sabre "$tmp/tilt_nan.csv" "${L[@]}" --padding nearest --fill 2 --actuators "$tmp/n.csv"
check act "$tmp/n.csv" "$tmp/tilt_nan.csv" $N $N tilt 2e-5 >/dev/null ||
    fail "nan row, nearest padding + fill: the tilt is not exact"
expect 0 --backend cpu sabre "$tmp/tilt_nan.csv" "${L[@]}" --fill 16 --actuators "$tmp/n.csv"
check act "$tmp/n.csv" "$tmp/tilt_nan.csv" $N $N tilt 0.01 >/dev/null ||
    fail "nan row, zero padding + 16 fill passes: actuators differ from the truth by > 1%"

# The spline's vertex values (global: the grid's own lattice, 16 x 16 squares; D-SABRE: the
# extended lattice of its partitions, here the same size).
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --method global --values "$tmp/v.csv"
check values "$tmp/v.csv" $N $N tilt 2e-5 16 16 || fail "global vertex values"
expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --values "$tmp/v.csv" --actuators "$tmp/a.csv"
check values "$tmp/v.csv" $N $N tilt 2e-5 16 16 || fail "D-SABRE vertex values"
expect 0 --backend cpu sabre "$tmp/quad.csv" "${L[@]}" --values "$tmp/v.csv"
check values "$tmp/v.csv" $N $N quad 0.02 16 16 || fail "D-SABRE vertex values, quadratic"

# Maps: the default size (16 pixels a lenslet), a given size, nan over an invalid lenslet.
for m in dsabre global fried; do
    expect 0 --backend cpu sabre "$tmp/tilt.csv" "${L[@]}" --method $m --map "$tmp/m.fits" --json
    printf '%s\n' "$out" >"$tmp/j.json"
    check json "$tmp/j.json" "r['map_width'] == 272 and r['map_height'] == 272" || fail "map size: $out"
    check map "$tmp/m.fits" $N $N tilt 2e-5 272 272 || fail "map of a tilt, $m"
    expect 0 --backend cpu sabre "$tmp/tilt_nan.csv" "${L[@]}" --method $m --map "$tmp/m.fits" --map-size 50
    tol=2e-5
    [[ $m == dsabre ]] && tol=0.05
    check map "$tmp/m.fits" $N $N tilt $tol 50 50 5,6 || fail "map with a hole, $m"
done
expect 0 --backend cpu sabre "$tmp/quad.csv" "${L[@]}" --map "$tmp/m.fits" --map-size 40
check map "$tmp/m.fits" $N $N quad 0.03 40 40 || fail "map of the quadratic"

# ---------------------------------------------------------------- end to end
# sim sh (a tilt, 9 x 9 lenslets of 32 px, 176 um) -> centroid --slopes (radians) -> sabre.
cat >"$tmp/z.csv" <<'EOF'
n,m,coef_um
1,1,0.6
EOF
geom=(--pitch 32 --grid 9x9 --origin 0,0)
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 288x288 --noise none \
    --bits 32f --out "$tmp/sh.fits" --truth "$tmp/sh.csv" --reference "$tmp/ref.fits"
expect 0 --backend cpu centroid "$tmp/sh.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --pixel-um 5.5 --focal-mm 3.5 --slopes "$tmp/e2e.csv" --out "$tmp/c.csv"
expect 0 sabre "$tmp/e2e.csv" --lenslet-um 176 --actuators "$tmp/e.csv"
check e2e "$tmp/e.csv" "$tmp/sh.csv" 176 5.5 3.5 || fail "end to end: the tilt is not recovered"

# ---------------------------------------------------------------- splines of degree 2 and 3
# A defocus (Z(2,0), 0.5 um) through `sim sh` (geometric spots, 9 x 9 lenslets of 176 um): its
# truth's spot displacements are the exact lenslet-mean gradients (a quadratic's gradient is
# linear: the sample mean is exact), and splines of degree >= 2 hold a quadratic, so they
# reproduce it to the float slopes' precision at the actuators, the vertices and every map pixel
# (the linear mesh does not: checked below). --continuity defaults to 1 for D >= 2.
cat >"$tmp/z2.csv" <<'EOF'
n,m,coef_um
2,0,0.5
EOF
geom2=(--pitch 32 --grid 9x9 --origin 0,0)
expect 0 --backend cpu sim sh --zernike "$tmp/z2.csv" "${geom2[@]}" --size 288x288 --noise none \
    --out "$tmp/sh2.fits" --truth "$tmp/sh2.csv"
check sh2slopes "$tmp/sh2.csv" "$tmp/def.csv"
O2=(--lenslet-um 176 --pixel-um 5.5 --focal-mm 3.5)
export SW_P=176
for d in 2 3; do
    for be in cpu auto; do
        expect 0 --backend $be sabre "$tmp/def.csv" "${O2[@]}" --degree $d --actuators "$tmp/a.csv" \
            --values "$tmp/v.csv" --map "$tmp/m.fits" --map-size 45 --json
        printf '%s\n' "$out" >"$tmp/j.json"
        check json "$tmp/j.json" "r['method'] == 'global' and r['degree'] == $d and r['continuity'] == 1 and r['smoothing'] > 0 and r['coefficients'] == 4 * 8 * 8 * ($d + 1) * ($d + 2) // 2 and r['path'] == 'host' and r['lattice']['sx'] == 8 and r['map_width'] == 45" ||
            fail "degree $d, $be: JSON report: $out"
        check act "$tmp/a.csv" "$tmp/def.csv" 9 9 defocus 1e-4 >/dev/null ||
            fail "degree $d, $be: the defocus is not reproduced at the actuators"
        check values "$tmp/v.csv" 9 9 defocus 1e-4 8 8 || fail "degree $d, $be: vertex values"
        check map "$tmp/m.fits" 9 9 defocus 1e-4 45 45 || fail "degree $d, $be: map"
    done
done
# r = 0 and a given smoothing: still exact (the soft conditions hold for a quadratic); the text
# report names the spline and where it ran.
expect 0 --backend cpu sabre "$tmp/def.csv" "${O2[@]}" --degree 2 --continuity 0 --smoothing 3 \
    --actuators "$tmp/a.csv"
[[ $out == *"spline     degree 2, C0, smoothing 3,"*"on the host"* ]] || fail "spline report: $out"
check act "$tmp/a.csv" "$tmp/def.csv" 9 9 defocus 1e-4 >/dev/null || fail "degree 2, C0"
# The linear mesh is not exact for it (what makes the tolerance above a real check).
expect 0 --backend cpu sabre "$tmp/def.csv" "${O2[@]}" --degree 1 --actuators "$tmp/a.csv" --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['method'] == 'global' and r['degree'] == 1 and r['smoothing'] is None" ||
    fail "degree 1 report: $out"
if check act "$tmp/a.csv" "$tmp/def.csv" 9 9 defocus 1e-3 >/dev/null 2>&1; then
    fail "the linear mesh reproduced the defocus to 1e-3: the spline check cannot tell"
fi
# --degree 1 keeps D-SABRE when its options are given; a spline's values on standard output.
expect 0 --backend cpu sabre "$tmp/def.csv" "${O2[@]}" --degree 1 --partitions 4 --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['method'] == 'dsabre' and r['degree'] == 1 and r['continuity'] == 0" ||
    fail "degree 1 with --partitions: $out"
expect 0 --backend cpu sabre "$tmp/def.csv" "${O2[@]}" --degree 3 --values -
printf '%s\n' "$out" >"$tmp/vs.csv"
check values "$tmp/vs.csv" 9 9 defocus 1e-4 8 8 || fail "degree 3: vertex values on stdout"
unset SW_P
# Two invalid lenslets side by side below valid ones (a pupil's lower rim): the corner between
# the four sits at the centre of a square whose bottom triangle has no valid corner, so it is not
# estimated; the spline there is its neighbours' (C0), and the tilt is still exact at every
# active corner (this corner was once nan: "internal error").
check gen $N $N tilt "$tmp/tilt_pair.csv" nanpair 5,6
for d in 2 3; do
    expect 0 --backend cpu sabre "$tmp/tilt_pair.csv" "${L[@]}" --degree $d --actuators "$tmp/a.csv" \
        --map "$tmp/m.fits" --map-size 34
    check act "$tmp/a.csv" "$tmp/tilt_pair.csv" $N $N tilt 1e-4 >/dev/null ||
        fail "degree $d, two invalid lenslets side by side: actuators"
done
# Bad splines: a usage error (one line, exit 2) and no file written.
rm -f "$tmp/x.csv" "$tmp/x.fits"
for bad in "--degree 4" "--degree 0" "--degree 1 --continuity 1" "--degree 2 --continuity 2" \
    "--degree 3 --continuity 3" "--degree 2 --smoothing -1" "--degree 2 --smoothing 0" \
    "--degree 2 --smoothing 1e7" "--degree 1 --smoothing 0.1" "--smoothing 0.1" "--continuity 1" \
    "--degree 2 --method dsabre" "--degree 2 --partitions 4" "--degree 3 --pme distributed" \
    "--degree 2 --method fried"; do
    # shellcheck disable=SC2086
    expect_usage --backend cpu sabre "$tmp/def.csv" "${O2[@]}" $bad --actuators "$tmp/x.csv" \
        --map "$tmp/x.fits"
    [[ ! -e $tmp/x.csv && ! -e $tmp/x.fits ]] || fail "$bad: wrote a file"
done
expect_usage sabre "$tmp/def.csv" --degree 2 --partitions 4
[[ $err == *"linear only"* && $err == *"--method global"* ]] || fail "--degree 2 with D-SABRE: $err"
expect_usage sabre "$tmp/def.csv" --degree 2 --continuity 2
[[ $err == *continuity* ]] || fail "--continuity 2: $err"
expect_usage sabre "$tmp/def.csv" --degree 1 --continuity 1
[[ $err == *"R < D"* ]] || fail "--continuity 1 at degree 1: $err"
expect_usage sabre "$tmp/def.csv" --degree 4
[[ $err == *"1..3"* ]] || fail "--degree 4: $err"

# ---------------------------------------------------------------- robust passes
# The quadratic with 7 wild lenslets (2.4 %, off by 0.02 rad against slopes of at most 4e-3):
# --robust-passes 6 cuts the actuators' largest error at least 2 times for every method that
# has them (D-SABRE's local solves, global SABRE of degree 1, 2 and 3), and the report says so.
# Measured (of PV): D-SABRE k 4 0.287 -> 0.114, global 0.253 -> 0.089, d 2 0.093 -> 0.0036, d 3
# 0.124 -> 0.022 (3 passes: 0.165, 0.127, 0.0088, 0.039: Huber's iteration converges at the rate
# of each lenslet's share of its own fit, slowest for the linear mesh here).
check gen $N $N quad "$tmp/quad_out.csv" outliers
for m in "--method dsabre --partitions 4" "--method global" "--degree 2" "--degree 3"; do
    for r in 0 6; do
        # shellcheck disable=SC2086
        expect 0 --backend cpu sabre "$tmp/quad_out.csv" "${L[@]}" $m --robust-passes $r \
            --actuators "$tmp/r$r.csv" --json
        printf '%s\n' "$out" >"$tmp/j.json"
        check json "$tmp/j.json" "r['robust_passes'] == $r and r['robust_threshold'] == 3" ||
            fail "$m --robust-passes $r: JSON report: $out"
    done
    e0=$(SW_REL=1 check act "$tmp/r0.csv" "$tmp/quad_out.csv" $N $N quad 10)
    e6=$(SW_REL=1 check act "$tmp/r6.csv" "$tmp/quad_out.csv" $N $N quad 10)
    echo "robust passes, $m: largest actuator error $e0 -> $e6 of PV"
    python3 -c "import sys; sys.exit(not ($e6 <= 0.5 * $e0))" ||
        fail "$m: 6 robust passes took the error from $e0 to only $e6"
done
expect 0 --backend cpu sabre "$tmp/quad_out.csv" "${L[@]}" --degree 2 --robust-passes 2 \
    --robust-threshold 4.5 --actuators "$tmp/a.csv" --map "$tmp/m.fits" --map-size 34
[[ $out == *"robust     2 passes, threshold 4.5 x the median residual"* ]] ||
    fail "robust passes in the report: $out"
expect 0 --backend cpu sabre "$tmp/quad_out.csv" "${L[@]}" --method fried --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['robust_passes'] is None and r['robust_threshold'] is None" ||
    fail "fried: robust keys: $out"
for bad in "--robust-passes -1" "--robust-passes 17" "--robust-passes 1 --robust-threshold 0.5" \
    "--robust-passes 1 --robust-threshold 1001" "--robust-threshold 3" \
    "--method fried --robust-passes 1"; do
    # shellcheck disable=SC2086
    expect_usage --backend cpu sabre "$tmp/quad_out.csv" "${L[@]}" $bad --actuators "$tmp/x.csv"
    [[ ! -e $tmp/x.csv ]] || fail "$bad: wrote a file"
done
expect_usage sabre "$tmp/quad_out.csv" --robust-threshold 3
[[ $err == *"--robust-passes"* ]] || fail "--robust-threshold alone: $err"
expect_usage sabre "$tmp/quad_out.csv" --method fried --robust-passes 2
[[ $err == *"fried"* ]] || fail "--robust-passes with fried: $err"

# ---------------------------------------------------------------- errors
expect_usage sabre
expect_usage sabre "$tmp/tilt.csv" --pme sideways
expect_usage sabre "$tmp/tilt.csv" --method zonal
expect_usage sabre "$tmp/tilt.csv" --partitions 0
expect_usage sabre "$tmp/tilt.csv" --overlap 65
expect_usage sabre "$tmp/tilt.csv" --fill 17
expect_usage sabre "$tmp/tilt.csv" --method global --fill 2
expect_usage sabre "$tmp/tilt.csv" --padding mirror
expect_usage sabre "$tmp/tilt.csv" --grid 1x17
expect_usage sabre "$tmp/tilt.csv" --method global --partitions 4
expect_usage sabre "$tmp/tilt.csv" --method fried --values "$tmp/v.csv"
expect_usage sabre "$tmp/tilt.csv" --fried-reg 1
expect_usage sabre "$tmp/tilt.csv" --dpme-iterations 3
expect_usage sabre "$tmp/tilt.csv" --json --actuators -
expect_usage sabre "$tmp/tilt.csv" --map "$tmp/m.jpg"
expect_usage sabre "$tmp/tilt.csv" --actuators "$tmp/x.csv" --values "$tmp/x.csv"
expect_usage sabre "$tmp/tilt.csv" --lenslet-um 0
expect_usage sabre "$tmp/tilt.csv" --frobnicate

expect 1 sabre "$tmp/missing.csv"
expect_one_line sabre missing
[[ $err == *missing.csv* ]] || fail "missing file: $err"
# 3 partitions with H-PME: the library's message (k must be a power of two).
expect 1 --backend cpu sabre "$tmp/tilt.csv" --partitions 3
expect_one_line sabre partitions 3
[[ $err == *"power of two"* ]] || fail "--partitions 3: $err"
# D-PME takes 3 (on 16 x 16 = 3 x 5 + 1 lenslets, no padding: the tilt stays exact).
check gen 16 16 tilt "$tmp/tilt16.csv" rad
expect 0 --backend cpu sabre "$tmp/tilt16.csv" "${L[@]}" --partitions 3 --pme distributed \
    --actuators "$tmp/a.csv" --json
printf '%s\n' "$out" >"$tmp/j.json"
check json "$tmp/j.json" "r['partitions'] == 3 and r['m'] == 5 and r['extended'] == 16" ||
    fail "3 partitions: $out"
check act "$tmp/a.csv" "$tmp/tilt16.csv" 16 16 tilt 2e-5 >/dev/null || fail "3 partitions, D-PME"
expect 1 --backend cpu sabre "$tmp/tilt.csv" --partitions 17
expect_one_line sabre partitions 17
expect_usage sabre "$tmp/tilt.csv" --method fried --fried-reg 0

{ cat "$tmp/tilt.csv"; echo "3,4,0.1,0.2"; } >"$tmp/dup.csv"
expect 1 sabre "$tmp/dup.csv"
expect_one_line sabre dup
[[ $err == *"(3,4) is listed twice"* ]] || fail "duplicate row: $err"
{ cat "$tmp/tilt.csv"; echo "3,4,abc,0.2"; } >"$tmp/text.csv"
expect 1 sabre "$tmp/text.csv"
expect_one_line sabre text
[[ $err == *text.csv* ]] || fail "non-numeric cell: $err"
printf 'ix,iy,dx_rad,dy_rad\n0,0,nan,nan\n1,1,nan,0.1\n2,2,nan,nan\n' >"$tmp/none.csv"
expect 1 sabre "$tmp/none.csv"
expect_one_line sabre none
[[ $err == *"no valid lenslet"* ]] || fail "no valid lenslet: $err"
expect 1 sabre "$tmp/tilt.csv" --grid 8x8
expect_one_line sabre grid 8x8
[[ $err == *"not in the 8x8 grid"* ]] || fail "lenslet outside the grid: $err"
expect 1 sabre "$tmp/tilt_px.csv"
expect_one_line sabre px
[[ $err == *"--pixel-um and --focal-mm"* ]] || fail "pixel slopes without optics: $err"
{ cat "$tmp/tilt.csv"; echo "20,4,inf,0.2"; } >"$tmp/inf.csv"
expect 1 sabre "$tmp/inf.csv"
expect_one_line sabre inf
[[ $err == *infinite* ]] || fail "infinite slope: $err"
printf 'ix,iy,dx_rad\n0,0,0.1\n' >"$tmp/half.csv"
expect 1 sabre "$tmp/half.csv"
expect_one_line sabre half
printf 'frame,ix,iy,dx_rad,dy_rad\n0,0,0,0.1,0.1\n1,1,1,0.1,0.1\n' >"$tmp/frames.csv"
expect 1 sabre "$tmp/frames.csv"
expect_one_line sabre frames
[[ $err == *"several frames"* ]] || fail "several frames: $err"

echo "test_cli_sabre: ok"
