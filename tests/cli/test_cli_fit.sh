#!/usr/bin/env bash
# `spotwave fit`: Zernike coefficients from the slopes of `spotwave centroid` (seed 001 section
# 3.3) end to end. Noise-free geometric frames of `spotwave sim sh` with a known Zernike CSV, their
# centroids against the simulated reference, then the fit with the same grid and pupil must give
# the input coefficients back:
#   tolerance 1e-3 um on every term (input order 4, fitted order 4 and 6). Measured on this setup:
#   at most 3e-5 um (the centroids of noise-free, well-separated spots are good to ~1e-4 px; the
#   simulator's mean slope over a part-lit lenslet is a 16 x 16 sample sum while the fit's is
#   exact). 1e-3 um of defocus is a spot shift of 0.005 px at the pupil's edge here, so the bound
#   still fails for any error of geometry, pupil, scale, sign or index (those are > 1e-2 um).
# Also: the QR method and --pupil-px give the same answer; the default pupil (inscribed in the
# grid) with --min-illum 1; a decentred pupil with --pupil-center; several frames (a FITS cube;
# a 'frame' column in and out); invalid lenslets (nan, valid 0); a centroids CSV as input; --index
# noll; --eye left (OSA mirror image); --rescale-mm against a fit over the smaller pupil and the
# defocus law c20' = c20 (d/D)^2; the JSON refraction of a pure defocus against Thibos et al.'s
# M = -4 sqrt3 c20 / r^2 (with a vertex distance, and with --higher-order-rx); --map (FITS values
# against the Zernike sum evaluated here, PNG, the modulo-one display); exit codes 2 for usage
# errors and 1 for inputs that cannot be used.
# Usage: test_cli_fit.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to compare the tables"

cat >"$tmp/check.py" <<'EOF'
import json, math, struct, sys, zlib

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    return names, [dict(zip(names, map(float, l.split(",")))) for l in lines[1:]]

def read_truth(path):  # an input Zernike CSV n,m,coef_um -> {(n, m): c}
    _, rows = read_csv(path)
    return {(int(r["n"]), int(r["m"])): r["coef_um"] for r in rows}

def read_fit(path, frame=None):  # a fit CSV -> {(n, m): c} (one frame)
    names, rows = read_csv(path)
    if frame is not None:
        rows = [r for r in rows if int(r["frame"]) == frame]
    return {(int(r["n"]), int(r["m"])): r["coef_um"] for r in rows}

def terms(order):
    return [(n, m) for n in range(order + 1) for m in range(-n, n + 1, 2)]

# The Zernike basis of zernike.h / DESIGN.md (OSA, orthonormal over the unit disc), written here
# from the definition, not taken from the code under test.
def radial(n, k, rho):
    return sum((-1) ** s * math.factorial(n - s) /
               (math.factorial(s) * math.factorial((n + k) // 2 - s) * math.factorial((n - k) // 2 - s))
               * rho ** (n - 2 * s) for s in range((n - k) // 2 + 1))

def zernike(n, m, x, y):
    rho, th = math.hypot(x, y), math.atan2(y, x)
    norm = math.sqrt(2 * (n + 1)) if m != 0 else math.sqrt(n + 1)
    ang = math.cos(m * th) if m >= 0 else math.sin(-m * th)
    return norm * radial(n, abs(m), rho) * ang

def wavefront(c, x, y):
    return sum(v * zernike(n, m, x, y) for (n, m), v in c.items())

def read_fits(path):  # BITPIX -32, 2-D or 3-D: (naxis list, values)
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
    axes = [int(cards["NAXIS%d" % (i + 1)]) for i in range(int(cards["NAXIS"]))]
    n = 1
    for a in axes:
        n *= a
    return axes, struct.unpack(">%df" % n, data[pos:pos + 4 * n])

def write_cube(path, planes):  # a FITS cube of 2-D BITPIX -32 images
    w = h = None
    body = b""
    for p in planes:
        axes, vals = read_fits(p)
        assert (w, h) in ((None, None), tuple(axes))
        w, h = axes
        body += struct.pack(">%df" % len(vals), *vals)
    cards = ["SIMPLE  = %20s" % "T", "BITPIX  = %20d" % -32, "NAXIS   = %20d" % 3,
             "NAXIS1  = %20d" % w, "NAXIS2  = %20d" % h, "NAXIS3  = %20d" % len(planes), "END"]
    head = "".join(c.ljust(80) for c in cards)
    head += " " * (-len(head) % 2880)
    body += b"\0" * (-len(body) % 2880)
    open(path, "wb").write(head.encode("ascii") + body)

def read_png(path):  # (width, height, colour type, rows of bytes) of an 8-bit PNG
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    w, h, depth, ctype = ihdr[:4]
    assert depth == 8, ihdr
    bpp = {0: 1, 2: 3, 6: 4}[ctype]
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, ctype, rows

cmd = sys.argv[1]
if cmd == "coef":  # FIT TRUTH TOL [FRAME]: every term of the fit within TOL of the input
    frame = int(sys.argv[5]) if len(sys.argv) > 5 else None
    fit, truth, tol = read_fit(sys.argv[2], frame), read_truth(sys.argv[3]), float(sys.argv[4])
    order = max(n for n, m in fit)
    assert sorted(fit) == sorted(terms(order)), sorted(fit)
    assert fit[(0, 0)] == 0.0, fit[(0, 0)]
    worst = max(abs(fit[t] - truth.get(t, 0.0)) for t in fit)
    assert worst < tol, (worst, fit)
    print("worst %.3g um" % worst)
elif cmd == "zero":  # FIT TOL FRAME: all coefficients of the frame below TOL
    fit = read_fit(sys.argv[2], int(sys.argv[4]))
    assert fit and max(abs(v) for v in fit.values()) < float(sys.argv[3]), fit
elif cmd == "same":  # A B TOL [FRAME_A FRAME_B]: the same coefficients
    fa = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] else None
    fb = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[6] else None
    a, b, tol = read_fit(sys.argv[2], fa), read_fit(sys.argv[3], fb), float(sys.argv[4])
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    assert all(abs(a[t] - b[t]) <= tol for t in a), [(t, a[t], b[t]) for t in a if abs(a[t] - b[t]) > tol]
elif cmd == "header":  # FILE: print the header line
    print(open(sys.argv[2]).readline().strip())
elif cmd == "noll":  # ANSI NOLL: the noll file holds the same terms, rows by the Noll index
    na, a = read_csv(sys.argv[2])
    nn, b = read_csv(sys.argv[3])
    assert na == ["j", "n", "m", "noll", "coef_um"] and nn == ["noll", "n", "m", "j", "coef_um"], (na, nn)
    assert [int(r["j"]) for r in a] == list(range(len(a)))
    assert [int(r["noll"]) for r in b] == list(range(1, len(b) + 1))
    byj = {int(r["j"]): r for r in a}
    for r in b:
        s = byj[int(r["j"])]
        assert (r["n"], r["m"], r["noll"], r["coef_um"]) == (s["n"], s["m"], s["noll"], s["coef_um"]), (r, s)
        n, m = int(r["n"]), int(r["m"])
        assert int(r["j"]) == (n * (n + 2) + m) // 2, r
    # Noll's ordering (by n, then |m|; even index cos, odd sin): spot checks from his table
    noll = {(int(r["n"]), int(r["m"])): int(r["noll"]) for r in b}
    assert noll[(1, 1)] == 2 and noll[(1, -1)] == 3 and noll[(2, 0)] == 4 and noll[(2, -2)] == 5
    assert noll[(2, 2)] == 6 and noll[(3, -1)] == 7 and noll[(3, 1)] == 8 and noll[(4, 0)] == 11
elif cmd == "mirror":  # RIGHT LEFT: the OSA mirror image x -> -x
    a, b = read_fit(sys.argv[2]), read_fit(sys.argv[3])
    for (n, m), v in a.items():
        # W(-x, y): cos(m (pi - t)) = (-1)^m cos(m t), sin(|m| (pi - t)) = -(-1)^|m| sin(|m| t)
        want = v * ((-1) ** m if m >= 0 else -((-1) ** abs(m)))
        assert abs(b[(n, m)] - want) <= 1e-9 * max(1, abs(v)), ((n, m), v, b[(n, m)])
    assert any(abs(b[t] + a[t]) < 1e-12 and abs(a[t]) > 1e-3 for t in a), "nothing changed sign"
elif cmd == "fitsmap":  # FITS FIT SIZE FRAMES: planes = the Zernike sum of the fit, nan outside
    axes, vals = read_fits(sys.argv[2])
    size, frames = int(sys.argv[4]), int(sys.argv[5])
    assert axes == ([size, size] if frames == 1 else [size, size, frames]), axes
    for f in range(frames):
        c = read_fit(sys.argv[3], f if frames > 1 else None)
        worst, inside = 0.0, 0
        for k in range(size):
            for i in range(size):
                x, y = (2 * i + 1) / size - 1, (2 * k + 1) / size - 1
                v = vals[f * size * size + k * size + i]
                if x * x + y * y > 1.0 + 1e-9:
                    assert math.isnan(v), (i, k, v)
                    continue
                if x * x + y * y > 1.0 - 1e-9:
                    continue  # on the rim: either way
                inside += 1
                worst = max(worst, abs(v - wavefront(c, x, y)))
        assert inside > 0.7 * size * size and worst < 1e-4, (f, inside, worst)
elif cmd == "png":  # PNG SIZE: a colour picture at least SIZE x SIZE (colour bar beside it)
    w, h, ctype, rows = read_png(sys.argv[2])
    size = int(sys.argv[3])
    assert w > size and h >= size and ctype in (2, 6), (w, h, ctype)
elif cmd == "wrapped":  # PNG FIT SIZE WRAP_UM: grey frac(W / wrap) * 255 (+-2 levels, cyclic)
    w, h, ctype, rows = read_png(sys.argv[2])
    c, size, wrap = read_fit(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    assert (w, h, ctype) == (size, size, 0), (w, h, ctype)
    worst, levels = 0, set()
    for k in range(size):
        for i in range(size):
            x, y = (2 * i + 1) / size - 1, (2 * k + 1) / size - 1
            r2 = x * x + y * y
            if r2 > 1.0 + 1e-9:
                assert rows[k][i] == 0, (i, k, rows[k][i])
                continue
            if r2 > 1.0 - 1e-9:
                continue
            want = (wavefront(c, x, y) / wrap) % 1.0 * 255.0
            d = abs(rows[k][i] - want) % 255.0
            worst = max(worst, min(d, 255.0 - d))
            levels.add(rows[k][i])
    assert worst <= 2.0 and len(levels) > 100, (worst, len(levels))
elif cmd == "cube":  # OUT IN...: a FITS cube of the 2-D images
    write_cube(sys.argv[2], sys.argv[3:])
elif cmd == "nan":  # IN OUT K: the slopes of the first K rows (of lenslets inside IX0..IX1) nan
    lines = open(sys.argv[2]).read().split("\n")
    k = int(sys.argv[4])
    out, done = [lines[0]], 0
    for l in lines[1:]:
        if not l:
            continue
        f = l.split(",")
        if done < k and 6 <= int(f[0]) <= 9 and 6 <= int(f[1]) <= 9:
            f[2] = f[3] = "nan"
            done += 1
        out.append(",".join(f))
    assert done == k
    open(sys.argv[3], "w").write("\n".join(out) + "\n")
elif cmd == "json":
    r = json.loads(open(sys.argv[2]).read())
    assert eval(sys.argv[3]), r
else:
    raise SystemExit("unknown check " + cmd)
EOF
check() { python3 "$tmp/check.py" "$@"; }
json_of() { printf '%s\n' "$out" >"$tmp/$1.json"; }

# ---------------------------------------------------------------- a frame, its reference, slopes
# 16 x 16 lenslets of 24 px (132 um) from (4, 6), a 1.8 mm pupil (radius 163.6 px, ~150 lenslets
# at least half lit), orders 2-4; spots move up to ~2.5 px, far from their regions' edges.
cat >"$tmp/z.csv" <<'EOF'
n,m,coef_um
2,0,0.3
2,2,0.15
2,-2,-0.05
3,-1,0.1
3,3,-0.08
4,0,0.05
EOF
geom=(--pitch 24 --grid 16x16 --origin "4,6")
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 400x400 --pupil-mm 1.8 \
    --noise none --bits 32f --out "$tmp/a.fits" --reference "$tmp/ref.fits"
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --out "$tmp/c.csv" --slopes "$tmp/s.csv"

# Order 4 (the input's) and 6 (more terms than the wavefront has: those come out ~0).
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4
[[ -z $err ]] || fail "fit wrote to stderr on success: $err"
printf '%s\n' "$out" >"$tmp/f4.csv"
[[ $(head -1 "$tmp/f4.csv") == "j,n,m,noll,coef_um" ]] || fail "header: $(head -1 "$tmp/f4.csv")"
[[ $(wc -l <"$tmp/f4.csv") == 16 ]] || fail "order 4 is not 15 rows"
check coef "$tmp/f4.csv" "$tmp/z.csv" 1e-3 || fail "order 4 coefficients differ from the input"
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --out "$tmp/f6.csv"
[[ $out == *"fit: 1 frame, grid 16x16 of 24 px"* ]] || fail "text report: $out"
[[ $(wc -l <"$tmp/f6.csv") == 29 ]] || fail "the default order is not 6 (28 rows)"
check coef "$tmp/f6.csv" "$tmp/z.csv" 1e-3 || fail "order 6 coefficients differ from the input"
# An order below the wavefront's aliases the missing terms: the check must see it.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 3 --out "$tmp/f3.csv"
if check coef "$tmp/f3.csv" "$tmp/z.csv" 1e-3 >/dev/null 2>&1; then
    fail "an order 3 fit of an order 4 wavefront passed the check (the check cannot fail)"
fi

# QR and the pseudo-inverse agree; --pupil-px R is --pupil-mm 2 R pixel / 1000.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --method qr \
    --out "$tmp/f4qr.csv"
check same "$tmp/f4.csv" "$tmp/f4qr.csv" 1e-6 || fail "qr and pinv disagree"
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-px 163.63636363636363 --order 4 \
    --out "$tmp/f4px.csv"
check same "$tmp/f4.csv" "$tmp/f4px.csv" 1e-6 || fail "--pupil-px and --pupil-mm disagree"
# Truncating the pseudo-inverse changes the answer (a little, here).
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --truncate 3 \
    --out "$tmp/f4t.csv"
if check same "$tmp/f4.csv" "$tmp/f4t.csv" 1e-9 >/dev/null 2>&1; then
    fail "--truncate 3 changed nothing"
fi

# The centroids CSV (valid, dx_px, dy_px columns) is the same input as the slopes CSV.
expect 0 --backend cpu fit "$tmp/c.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/f4c.csv"
cmp -s "$tmp/f4.csv" "$tmp/f4c.csv" || fail "centroids and slopes CSV give different fits"

# --index noll: the same terms, rows by the Noll index.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --index noll \
    --out "$tmp/f4n.csv"
check noll "$tmp/f4.csv" "$tmp/f4n.csv" || fail "--index noll"

# ---------------------------------------------------------------- JSON report
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fj.csv" \
    --json
json_of fj
cmp -s "$tmp/f4.csv" "$tmp/fj.csv" || fail "--json changed the coefficients file"
check json "$tmp/fj.json" 'r["subcommand"] == "fit" and r["frames"] == 1 and r["order"] == 4 and r["terms"] == 15 and r["grid_nx"] == 16 and r["pupil_mm"] == 1.8 and abs(r["pupil_radius_px"] - 900 / 5.5) < 1e-9 and r["pupil_cx_px"] == 4 - 0.5 + 24 * 8 and r["pupil_cy_px"] == 6 - 0.5 + 24 * 8 and r["method"] == "pinv" and r["backend"] == "cpu" and r["eye"] == "right" and 120 < r["lenslets_used"] < r["lenslets_in_mask"] and r["results"][0]["used_lenslets"] == r["lenslets_used"] and r["results"][0]["residual_px"] < 0.01 and r["frames_failed"] == 0 and r["map"] is None' ||
    fail "JSON report: $out"
python3 - "$tmp/fj.json" "$tmp/z.csv" <<'EOF' || fail "JSON coefficients, RMS or refraction: $out"
import json, math, sys
r = json.load(open(sys.argv[1]))["results"][0]
c = r["coef_um"]
assert len(c) == 15 and c[0] == 0
truth = {(2, 0): 0.3, (2, 2): 0.15, (2, -2): -0.05, (3, -1): 0.1, (3, 3): -0.08, (4, 0): 0.05}
osa = lambda n, m: (n * (n + 2) + m) // 2
for (n, m), v in truth.items():
    assert abs(c[osa(n, m)] - v) < 1e-3, (n, m, c)
# RMS without piston and tilts; of orders >= 3
assert abs(r["rms_um"] - math.sqrt(sum(v * v for v in c[3:]))) < 1e-12
# orders >= 3 start at OSA j = 6 (issue 22: once j >= 10, the 4th order only)
assert abs(r["rms_hoa_um"] - math.sqrt(sum(v * v for v in c[6:]))) < 1e-12
assert abs(r["hoa_rms_um"] - r["rms_hoa_um"]) < 1e-15
assert abs(r["rms_hoa_um"] - math.sqrt(0.1**2 + 0.08**2 + 0.05**2)) < 2e-3
by_order = r["rms_by_order_um"]
assert len(by_order) == 5 and abs(by_order[2] - math.sqrt(sum(v * v for v in c[3:6]))) < 1e-12
assert abs(math.sqrt(sum(v * v for v in by_order[3:])) - r["hoa_rms_um"]) < 1e-12
assert abs(r["rms_um"] - math.sqrt(sum(v * v for v in truth.values()))) < 2e-3
# Thibos et al. 2004 from the reported coefficients, r = 0.9 mm
rx, r2 = r["refraction"], 0.9 ** 2
M, J0, J45 = -4 * math.sqrt(3) * c[4] / r2, -2 * math.sqrt(6) * c[5] / r2, -2 * math.sqrt(6) * c[3] / r2
assert abs(rx["M_d"] - M) < 1e-9 and abs(rx["J0_d"] - J0) < 1e-9 and abs(rx["J45_d"] - J45) < 1e-9, rx
cyl = -2 * math.hypot(J0, J45)
assert abs(rx["cyl_d"] - cyl) < 1e-9 and abs(rx["sphere_d"] - (M - cyl / 2)) < 1e-9, rx
axis = math.degrees(math.atan2(J45, J0)) / 2 % 180
assert abs(rx["axis_deg"] - axis) < 1e-6, rx
EOF

# ---------------------------------------------------------------- refraction of a pure defocus
# c20 = 0.4 um over a 1.8 mm pupil: M = -4 sqrt3 c20 / r^2 (Thibos, Hong, Bradley & Applegate
# 2004), r = 0.9 mm: -3.4214 D; no cylinder. The tolerance 0.01 D is 1.2e-3 um of c20.
printf 'n,m,coef_um\n2,0,0.4\n' >"$tmp/defocus.csv"
expect 0 --backend cpu sim sh --zernike "$tmp/defocus.csv" "${geom[@]}" --size 400x400 \
    --pupil-mm 1.8 --noise none --bits 32f --out "$tmp/d.fits"
expect 0 --backend cpu centroid "$tmp/d.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --slopes "$tmp/sd.csv" --out "$tmp/cd.csv"
expect 0 --backend cpu fit "$tmp/sd.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fd.csv" \
    --json
json_of fd
check coef "$tmp/fd.csv" "$tmp/defocus.csv" 1e-3 || fail "defocus coefficients"
M='(-4 * 3 ** 0.5 * 0.4 / 0.9 ** 2)'
check json "$tmp/fd.json" "abs(r['results'][0]['refraction']['M_d'] - $M) < 0.01 and abs(r['results'][0]['refraction']['sphere_d'] - $M) < 0.01 and abs(r['results'][0]['refraction']['cyl_d']) < 0.01 and abs(r['results'][0]['refraction']['J0_d']) < 0.01 and abs(r['results'][0]['refraction']['J45_d']) < 0.01" ||
    fail "defocus refraction is not Thibos' M: $out"
# A myopic (positive c20) wavefront is corrected by a negative lens.
check json "$tmp/fd.json" "r['results'][0]['refraction']['M_d'] < -3" || fail "refraction sign"
# At a vertex distance of 12 mm: P' = P / (1 + 0.012 P).
expect 0 --backend cpu fit "$tmp/sd.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fdv.csv" \
    --json --vertex-mm 12
json_of fdv
check json "$tmp/fdv.json" "abs(r['results'][0]['refraction']['sphere_d'] - $M / (1 + 0.012 * $M)) < 0.01 and abs(r['results'][0]['refraction']['M_d'] - $M) < 0.01 and r['vertex_mm'] == 12" ||
    fail "refraction at the vertex distance: $out"
# With the higher orders (the first wavefront has c40 = 0.05): M = (-4 sqrt3 c20 + 12 sqrt5 c40)/r^2.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fh.csv" \
    --json --higher-order-rx
json_of fh
check json "$tmp/fh.json" "abs(r['results'][0]['refraction']['M_d'] - (-4 * 3 ** 0.5 * 0.3 + 12 * 5 ** 0.5 * 0.05) / 0.81) < 0.02 and r['higher_order_rx']" ||
    fail "higher-order refraction: $out"
# Order 1 has no second order: no refraction.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 1 --out "$tmp/f1.csv" \
    --json
json_of f1
check json "$tmp/f1.json" 'r["terms"] == 3 and r["results"][0]["refraction"] is None' ||
    fail "order 1 report: $out"

# ---------------------------------------------------------------- pupil transforms
# --rescale-mm 1.2: the same wavefront over the concentric 1.2 mm pupil; the slopes fitted over a
# 1.2 mm pupil directly must agree (both exact for this order-4 wavefront). The lenslets on the
# rim of the smaller pupil were lit wholly (the light's pupil is 1.8 mm), not only inside 1.2 mm
# as the fit over 1.2 mm assumes: --min-illum 1 keeps the ~50 lenslets wholly inside. Piston is
# written 0 in both (slopes do not see it).
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --rescale-mm 1.2 \
    --out "$tmp/fr.csv" --json
json_of fr
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.2 --order 4 --min-illum 1 \
    --out "$tmp/fsmall.csv"
check same "$tmp/fr.csv" "$tmp/fsmall.csv" 2e-3 || fail "--rescale-mm 1.2 differs from a 1.2 mm fit"
if check same "$tmp/fr.csv" "$tmp/f4.csv" 1e-2 >/dev/null 2>&1; then
    fail "--rescale-mm changed nothing"
fi
check json "$tmp/fr.json" 'r["report_pupil_mm"] == 1.2 and r["pupil_mm"] == 1.8' ||
    fail "rescale report: $out"
# A pure defocus keeps its power: c20' = c20 (d / D)^2 and the same M.
expect 0 --backend cpu fit "$tmp/sd.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --rescale-mm 0.9 \
    --out "$tmp/fdr.csv" --json
json_of fdr
printf 'n,m,coef_um\n2,0,0.1\n' >"$tmp/defocus_half.csv"
check coef "$tmp/fdr.csv" "$tmp/defocus_half.csv" 1e-3 || fail "rescaled defocus is not c20/4"
check json "$tmp/fdr.json" "abs(r['results'][0]['refraction']['M_d'] - $M) < 0.01" ||
    fail "the rescaled defocus changed its power: $out"

# --eye left (OS): the coefficients reported in the mirror image x -> -x (ANSI Z80.28's left-eye
# frame); the refraction is the examiner's (TABO axis, the same scale for both eyes): unchanged.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --eye left \
    --out "$tmp/fl.csv" --json
json_of fl
check mirror "$tmp/f4.csv" "$tmp/fl.csv" || fail "--eye left is not the mirror image"
python3 - "$tmp/fj.json" "$tmp/fl.json" <<'EOF' || fail "--eye left refraction"
import json, sys
a = json.load(open(sys.argv[1]))["results"][0]["refraction"]
b = json.load(open(sys.argv[2]))["results"][0]["refraction"]
assert abs(a["M_d"] - b["M_d"]) < 1e-9 and abs(a["J0_d"] - b["J0_d"]) < 1e-9
assert abs(a["J45_d"] - b["J45_d"]) < 1e-9 and abs(a["J45_d"]) > 0.1
assert abs(a["axis_deg"] - b["axis_deg"]) < 1e-9, (a, b)
EOF

# A decentred pupil: sim sh --pupil-center-mm 0.2,-0.1 moves it by (+36.36, -18.18) px.
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 400x400 --pupil-mm 1.5 \
    --pupil-center-mm 0.2,-0.1 --noise none --bits 32f --out "$tmp/b.fits" --reference "$tmp/bref.fits"
expect 0 --backend cpu centroid "$tmp/b.fits" "${geom[@]}" --reference "$tmp/bref.fits" \
    --slopes "$tmp/sb.csv" --out "$tmp/cb.csv"
expect 0 --backend cpu fit "$tmp/sb.csv" "${geom[@]}" --pupil-mm 1.5 --order 4 \
    --pupil-center 231.86363636363637,179.3181818181818 --out "$tmp/fb.csv"
check coef "$tmp/fb.csv" "$tmp/z.csv" 1e-3 || fail "decentred pupil"
expect 0 --backend cpu fit "$tmp/sb.csv" "${geom[@]}" --pupil-mm 1.5 --order 4 --out "$tmp/fb0.csv"
if check coef "$tmp/fb0.csv" "$tmp/z.csv" 1e-3 >/dev/null 2>&1; then
    fail "the pupil centre made no difference"
fi

# The default pupil: the circle inscribed in the grid, as sim sh's default Zernike circle. Every
# lenslet is lit there, so only lenslets wholly inside the circle carry its slopes: --min-illum 1.
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" --pitch 24 --grid 16x16 --noise none \
    --bits 32f --out "$tmp/e.fits" --reference "$tmp/eref.fits"
expect 0 --backend cpu centroid "$tmp/e.fits" --pitch 24 --grid 16x16 --reference "$tmp/eref.fits" \
    --slopes "$tmp/se.csv" --out "$tmp/ce.csv"
expect 0 --backend cpu fit "$tmp/se.csv" --pitch 24 --order 4 --min-illum 1 --out "$tmp/fe.csv" \
    --json
json_of fe
check coef "$tmp/fe.csv" "$tmp/z.csv" 1e-3 || fail "default pupil"
check json "$tmp/fe.json" 'r["grid_nx"] == 16 and r["grid_ny"] == 16 and r["pupil_radius_px"] == 192 and r["pupil_cx_px"] == 191.5 and abs(r["pupil_mm"] - 2.112) < 1e-12 and r["lenslets_in_mask"] == 256' ||
    fail "default pupil report: $out"

# ---------------------------------------------------------------- invalid lenslets
# Four lenslets near the centre without slopes (nan): still the input, four fewer lenslets used.
check nan "$tmp/s.csv" "$tmp/s_nan.csv" 4
expect 0 --backend cpu fit "$tmp/s_nan.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 \
    --out "$tmp/fn.csv" --json
json_of fn
check coef "$tmp/fn.csv" "$tmp/z.csv" 1e-3 || fail "fit with invalid lenslets"
python3 - "$tmp/fj.json" "$tmp/fn.json" <<'EOF' || fail "used lenslets with four nan slopes"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert b["lenslets_used"] == a["lenslets_used"] - 4, (a["lenslets_used"], b["lenslets_used"])
assert b["results"][0]["used_lenslets"] == a["results"][0]["used_lenslets"] - 4
EOF
# valid = 0 in a centroids CSV leaves its lenslet out although dx_px, dy_px are finite.
awk -F, 'BEGIN{OFS=","} NR>1 && $1==7 && $2==7 {$6=0} {print}' "$tmp/c.csv" >"$tmp/c_v0.csv"
expect 0 --backend cpu fit "$tmp/c_v0.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 \
    --out "$tmp/fv0.csv" --json
json_of fv0
check json "$tmp/fv0.json" "r['lenslets_used'] == $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["lenslets_used"])' "$tmp/fj.json") - 1" ||
    fail "valid 0 was not left out: $out"

# ---------------------------------------------------------------- several frames
# A cube (frame, reference, frame): a 'frame' column in the slopes and in the coefficients.
check cube "$tmp/cube.fits" "$tmp/a.fits" "$tmp/ref.fits" "$tmp/a.fits"
expect 0 --backend cpu centroid "$tmp/cube.fits" "${geom[@]}" --reference "$tmp/ref.fits" \
    --slopes "$tmp/s3.csv" --out "$tmp/c3.csv"
expect 0 --backend cpu fit "$tmp/s3.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/f3f.csv" \
    --json --map "$tmp/m3.fits" --map-size 48
json_of f3f
[[ $(check header "$tmp/f3f.csv") == "frame,j,n,m,noll,coef_um" ]] || fail "frames header"
[[ $(wc -l <"$tmp/f3f.csv") == 46 ]] || fail "three frames of 15 rows"
check same "$tmp/f4.csv" "$tmp/f3f.csv" 1e-9 "" 0 || fail "frame 0 differs from the single fit"
check same "$tmp/f4.csv" "$tmp/f3f.csv" 1e-9 "" 2 || fail "frame 2 differs from the single fit"
check zero "$tmp/f3f.csv" 1e-4 1 || fail "the reference frame has an aberration"
check json "$tmp/f3f.json" 'r["frames"] == 3 and [x["frame"] for x in r["results"]] == [0, 1, 2] and r["results"][1]["refraction"]["M_d"] ** 2 < 1e-6' ||
    fail "frames report: $out"
check fitsmap "$tmp/m3.fits" "$tmp/f3f.csv" 48 3 || fail "FITS map cube"
# PNG maps: one per frame.
expect 0 --backend cpu fit "$tmp/s3.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/f3p.csv" \
    --map "$tmp/m3.png" --map-size 40
for f in 0 1 2; do
    check png "$tmp/m3-$f.png" 40 || fail "PNG map of frame $f"
done
[[ ! -e $tmp/m3.png ]] || fail "several frames wrote the single-frame PNG name"

# ---------------------------------------------------------------- maps
# FITS: the Zernike sum of the written coefficients at the map's pixel centres, nan outside.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fm.csv" \
    --map "$tmp/m.fits" --map-size 64 --json
json_of fm
check fitsmap "$tmp/m.fits" "$tmp/fm.csv" 64 1 || fail "FITS map values"
check json "$tmp/fm.json" 'r["map"].endswith("m.fits") and r["map_files"] == 1 and r["wrapped"] is None' ||
    fail "map report: $out"
# PNG with the seed's modulo-one display (grey, the map's size) beside it.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fw.csv" \
    --map "$tmp/m.png" --map-size 64 --wrap-um 0.2
check png "$tmp/m.png" 64 || fail "PNG map"
check wrapped "$tmp/m-wrapped.png" "$tmp/fw.csv" 64 0.2 || fail "wrapped display"
# --eye left maps the mirrored coefficients.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --eye left \
    --out "$tmp/fml.csv" --map "$tmp/ml.fits" --map-size 32
check fitsmap "$tmp/ml.fits" "$tmp/fl.csv" 32 1 || fail "left-eye map"

# ---------------------------------------------------------------- clinical refraction, quality
# The clinical refractions (issue 22): second order and with the 4th and 6th orders, both at the
# reference wavelength, the defocus moved from 0.78 um by the Chromatic Eye (Thibos, Ye, Zhang &
# Bradley 1992): Rx = p - 0.63346 / (lambda - 0.21410); minus- and plus-cylinder forms agree.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fc.csv" \
    --json --eye OD
json_of fc
python3 - "$tmp/fc.json" <<'PYEOF' || fail "clinical refraction: $out"
import json, math, sys
rep = json.load(open(sys.argv[1]))
r = rep["results"][0]
lca = 0.63346 / (0.78 - 0.21410) - 0.63346 / (0.555 - 0.21410)
assert abs(lca + 0.7388) < 5e-4 and abs(rep["lca_d"] - lca) < 1e-12, rep["lca_d"]
assert rep["wavelength_um"] == 0.78 and rep["reference_wavelength_um"] == 0.555
assert rep["eye_side"] == "OD" and r["eye_side"] == "OD" and not rep["higher_order_rx"]
m, s2, h = r["refraction"], r["refraction_2nd_order"], r["refraction_higher_order"]
c = r["coef_um"]
assert sorted(m) == ["J0_d", "J45_d", "M_d", "axis_deg", "cyl_d", "sphere_d"], m
assert s2["terms"] == "second order" and h["terms"] != s2["terms"]
assert abs(s2["M_d"] - (m["M_d"] + lca)) < 1e-9 and abs(s2["J0_d"] - m["J0_d"]) < 1e-12
assert abs(s2["J45_d"] - m["J45_d"]) < 1e-12 and s2["wavelength_um"] == 0.555
# the higher-order one adds 12 sqrt5 c40 / r^2 (r = 0.9 mm)
assert abs(h["M_d"] - s2["M_d"] - 12 * math.sqrt(5) * c[12] / 0.81) < 1e-9, (h, s2)
for x in (s2, h):
    mc, pc = x["minus_cyl"], x["plus_cyl"]
    assert mc["cyl_d"] <= 0 and pc["cyl_d"] >= 0
    assert 0 < mc["axis_deg"] <= 180 and 0 < pc["axis_deg"] <= 180
    assert abs(pc["sphere_d"] - (mc["sphere_d"] + mc["cyl_d"])) < 1e-12
    assert pc["cyl_d"] == -mc["cyl_d"]
    assert abs((pc["axis_deg"] - mc["axis_deg"]) % 180 - 90) < 1e-9
    assert abs(mc["sphere_d"] + mc["cyl_d"] / 2 - x["M_d"]) < 1e-9
    assert abs(mc["cyl_d"] + 2 * math.hypot(x["J0_d"], x["J45_d"])) < 1e-9
assert abs(s2["minus_cyl"]["axis_deg"] % 180 - m["axis_deg"] % 180) < 1e-9
assert r["quality"] is None
PYEOF
# --reference-wavelength-um equal to the measurement's: no correction.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fc0.csv" \
    --json --reference-wavelength-um 0.78
json_of fc0
check json "$tmp/fc0.json" 'r["lca_d"] == 0 and abs(r["results"][0]["refraction_2nd_order"]["M_d"] - r["results"][0]["refraction"]["M_d"]) < 1e-12' ||
    fail "no chromatic correction at the measurement wavelength: $out"
# --higher-order-rx chooses the refraction the text and the 'refraction' key give.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fch.csv" \
    --json --higher-order-rx
json_of fch
check json "$tmp/fch.json" 'abs(r["results"][0]["refraction"]["M_d"] - r["results"][0]["refraction_higher_order"]["M_d"] + r["lca_d"]) < 1e-9 and r["higher_order_rx"]' ||
    fail "--higher-order-rx: $out"
# --flip-y (a camera that turns the image upside down): the terms odd in y change sign, the
# astigmatic axis a becomes 180 - a, the sphere and M stay; --flip-x likewise for x.
for fl in x y; do
    expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 \
        --out "$tmp/ff$fl.csv" --json --flip-$fl
    json_of "ff$fl"
    python3 - "$tmp/fc.json" "$tmp/ff$fl.json" "$fl" <<'PYEOF' || fail "--flip-$fl: $out"
import json, sys
a = json.load(open(sys.argv[1]))["results"][0]
b = json.load(open(sys.argv[2]))
assert b["flip_" + sys.argv[3]] and not b["flip_" + ("y" if sys.argv[3] == "x" else "x")]
b = b["results"][0]
osa = lambda n, m: (n * (n + 2) + m) // 2
for n in range(5):
    for m in range(-n, n + 1, 2):
        if sys.argv[3] == "y":
            odd = m < 0
        else:
            odd = (m >= 0 and m % 2 == 1) or (m < 0 and m % 2 == 0)
        s = -1 if odd else 1
        assert abs(b["coef_um"][osa(n, m)] - s * a["coef_um"][osa(n, m)]) < 1e-12, (n, m)
ra, rb = a["refraction_2nd_order"], b["refraction_2nd_order"]
assert abs(ra["M_d"] - rb["M_d"]) < 1e-12 and abs(ra["J45_d"] + rb["J45_d"]) < 1e-12
axes = ra["minus_cyl"]["axis_deg"] + rb["minus_cyl"]["axis_deg"]
assert min(abs(axes - 180), abs(axes - 360)) < 1e-9, (ra, rb)
PYEOF
done
# Image quality: the Strehl ratio, the visual Strehl ratios and the pictures (PSF in arc
# minutes, MTF in cycles per degree); of the higher orders alone they are better.
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fq.csv" \
    --json --psf "$tmp/psf.png" --mtf "$tmp/mtf.png" --psf-size 128
json_of fq
expect 0 --backend cpu fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.8 --order 4 --out "$tmp/fqh.csv" \
    --json --quality-hoa --psf-size 128
json_of fqh
python3 - "$tmp/fq.json" "$tmp/fqh.json" "$tmp/psf.png" "$tmp/mtf.png" <<'PYEOF' ||
import json, math, sys
a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))["results"][0]["quality"]
q = a["results"][0]["quality"]
assert a["psf"] == sys.argv[3] and a["mtf"] == sys.argv[4]
assert q["wavelength_um"] == 0.555 and q["grid"] == 128 and q["pupil_mm"] == 1.8
assert 0 < q["strehl"] < 1 and 0 < q["vsmtf"] < 1 and q["vsotf"] <= q["vsmtf"] + 1e-12, q
assert b["terms"] == "orders >= 3" and b["strehl"] > q["strehl"] and b["vsmtf"] > q["vsmtf"], (q, b)
# the orders >= 3 alone: near Marechal's exp(-(2 pi sigma / lambda)^2)
sigma = a["results"][0]["hoa_rms_um"]
assert abs(b["strehl"] - math.exp(-(2 * math.pi * sigma / 0.555) ** 2)) < 0.1, (b, sigma)
# the cut-off D / lambda in cycles per degree
assert abs(q["cutoff_cpd"] - 1.8e-3 / 0.555e-6 * math.pi / 180) < 1e-6
for f in sys.argv[3:]:
    assert open(f, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f
PYEOF
    fail "image quality: $out"

# ---------------------------------------------------------------- help
expect 0 fit --help
for o in --pitch --grid --origin --pixel-um --focal-mm --pupil-mm --pupil-px --pupil-center \
    --obscuration --order --method --truncate --min-illum --rescale-mm --eye --vertex-mm \
    --higher-order-rx --out --index --map --map-size --wrap-um --json frame nan --wavelength-um \
    --reference-wavelength-um --flip-x --flip-y --quality --quality-wavelength-um --quality-hoa \
    --psf --mtf --psf-size OD OS Chromatic Mannos; do
    [[ $out == *"$o"* ]] || fail "fit --help does not mention $o"
done
expect 0 help fit
expect 0 --help
[[ $out == *"fit "* ]] || fail "spotwave --help does not list fit"

# ---------------------------------------------------------------- usage errors (2)
s="$tmp/s.csv"
bad=(
    "fit"
    "fit $s"
    "fit $s --pitch 0"
    "fit $s --pitch 24 --wat"
    "fit $s --pitch 24 --order 11"
    "fit $s --pitch 24 --order 0"
    "fit $s --pitch 24 --order 2.5"
    "fit $s --pitch 24 --grid 0x3"
    "fit $s --pitch 24 --origin 3"
    "fit $s --pitch 24 --pupil-mm 0"
    "fit $s --pitch 24 --pupil-mm 2 --pupil-px 100"
    "fit $s --pitch 24 --pupil-center 3"
    "fit $s --pitch 24 --obscuration 1"
    "fit $s --pitch 24 --method svd"
    "fit $s --pitch 24 --method qr --truncate 1"
    "fit $s --pitch 24 --truncate -1"
    "fit $s --pitch 24 --min-illum 1.5"
    "fit $s --pitch 24 --index zemax"
    "fit $s --pitch 24 --map m.jpg"
    "fit $s --pitch 24 --map m.png --map-size 0"
    "fit $s --pitch 24 --wrap-um 0.5"
    "fit $s --pitch 24 --map m.png --wrap-um 0"
    "fit $s --pitch 24 --eye middle"
    "fit $s --pitch 24 --vertex-mm -1"
    "fit $s --pitch 24 --json"
    "fit $s --pitch 24 --rescale-mm -1"
    "fit $s $s --pitch 24"
    "fit $s --pitch 24 --backend cpu"
    "fit $s --pitch 24 --eye OU"
    "fit $s --pitch 24 --wavelength-um 0"
    "fit $s --pitch 24 --wavelength-um 780"
    "fit $s --pitch 24 --reference-wavelength-um x"
    "fit $s --pitch 24 --psf psf.jpg"
    "fit $s --pitch 24 --mtf -"
    "fit $s --pitch 24 --psf-size 100"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect_usage $args
done
expect_usage fit "$s" --pitch 24 --order 11
[[ $err == *"--order: '11' is not a radial order in 1..10"* ]] || fail "--order 11: $err"
expect_usage fit "$s" --pitch 24 --out ''
[[ $err == *"--out: the file name is empty"* ]] || fail "--out '': $err"
# A rescaled pupil larger than the fitted one.
expect_usage --backend cpu fit "$s" "${geom[@]}" --pupil-mm 1.8 --rescale-mm 2 --out "$tmp/never.csv"
[[ $err == *"larger than the fitted pupil"* ]] || fail "--rescale-mm 2: $err"
[[ ! -e $tmp/never.csv ]] || fail "a usage error left an output file"

# ---------------------------------------------------------------- failures while running (1)
fail1() { # ARGS... : exit 1, one line on stderr, no output file left behind
    expect 1 --backend cpu fit "$@" --out "$tmp/never.csv"
    expect_one_line fit "$@"
    [[ $err == "spotwave fit: "* ]] || fail "'$*': stderr: $err"
    [[ ! -e $tmp/never.csv ]] || fail "'$*' left an output file"
}
fail1 "$tmp/missing.csv" "${geom[@]}"
[[ $err == *"missing.csv"* ]] || fail "missing file not named: $err"
# The wrong columns: a centroids CSV without a reference has no dx_px.
printf 'ix,iy,x_px,y_px,intensity,valid\n0,0,1,1,1,1\n' >"$tmp/nodx.csv"
fail1 "$tmp/nodx.csv" "${geom[@]}"
[[ $err == *"no column 'dx_px'"* ]] || fail "no dx_px column: $err"
printf 'hello\n' >"$tmp/text.csv"
fail1 "$tmp/text.csv" "${geom[@]}"
printf 'ix,iy,dx_px,dy_px\n' >"$tmp/empty.csv"
fail1 "$tmp/empty.csv" "${geom[@]}"
[[ $err == *"no rows"* ]] || fail "empty table: $err"
# Too many modes for the lenslets: order 10 (65 unknowns) over a 0.6 mm pupil (~16 lenslets).
fail1 "$s" "${geom[@]}" --pupil-mm 0.6 --order 10
# Lenslets outside the grid, listed twice, bad cells.
fail1 "$s" --pitch 24 --grid 10x10 --origin 4,6 --pupil-mm 1.8
[[ $err == *"not in the 10x10 grid"* ]] || fail "lenslet outside the grid: $err"
{ cat "$s"; sed -n 2p "$s"; } >"$tmp/s_twice.csv"
fail1 "$tmp/s_twice.csv" "${geom[@]}" --pupil-mm 1.8
[[ $err == *"twice"* ]] || fail "duplicate lenslet: $err"
printf 'ix,iy,dx_px,dy_px\n0.5,0,1,1\n' >"$tmp/s_half.csv"
fail1 "$tmp/s_half.csv" "${geom[@]}"
printf 'ix,iy,dx_px,dy_px\n3,3,inf,1\n' >"$tmp/s_inf.csv"
fail1 "$tmp/s_inf.csv" "${geom[@]}"
[[ $err == *"infinite"* ]] || fail "infinite slope: $err"
printf 'ix,iy,dx_px,dy_px,valid\n3,3,1,1,2\n' >"$tmp/s_valid2.csv"
fail1 "$tmp/s_valid2.csv" "${geom[@]}"
printf 'frame,ix,iy,dx_px,dy_px\n-1,3,3,1,1\n' >"$tmp/s_frame.csv"
fail1 "$tmp/s_frame.csv" "${geom[@]}"
# No valid slope at all.
awk -F, 'BEGIN{OFS=","} NR>1 {$3="nan"} {print}' "$s" >"$tmp/s_allnan.csv"
fail1 "$tmp/s_allnan.csv" "${geom[@]}" --pupil-mm 1.8
# A pitch below one pixel (the library's geometry check).
fail1 "$s" --pitch 0.5 --grid 16x16 --pupil-mm 0.01
# An output that cannot be written.
expect 1 --backend cpu fit "$s" "${geom[@]}" --pupil-mm 1.8 --out "$tmp/no/such/dir/f.csv"
expect_one_line fit unwritable
expect 1 --backend cpu fit "$s" "${geom[@]}" --pupil-mm 1.8 --out "$tmp/ok.csv" \
    --map "$tmp/no/such/dir/m.png"
expect_one_line fit unwritable map
[[ ! -e $tmp/ok.csv ]] || fail "a failed map left the coefficients file"

echo "ok"
