#!/usr/bin/env bash
# `spotwave aberrometry` end to end: a reference from `spotwave sim sh` (a flat wavefront through
# every lenslet of sim eye's grid) and eyes from `spotwave sim eye` with a known Zernike CSV
# (1 um of defocus, some astigmatism): the CSV's coefficients match the input (defocus within
# 0.05 um) with the grid given and found in the reference; --json parses, names the refraction
# (its M follows the defocus over the measured pupil, Thibos et al.), the pupil and the counts;
# --index noll renumbers j; two eyes; several frames (the frame column, --first/--count);
# --pupil-mm rescales (and a larger one fails); --spots lists the lenslets; --map writes PNG
# and FITS maps (two eyes: _eye1/_eye2); a frame without a pupil gives nan with exit 0; a
# reference of another size exits 1 with a clear line; bad options exit 2. Then `spotwave
# centroid --algorithm pyramid|com` on a clean SH frame agrees with cog within 0.05 px, and a
# `bench_aberrometry --quick` smoke run when the bench program was built.
# Usage: test_cli_aberrometry.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"

cat >"$tmp/check.py" <<'EOF'
import json, math, sys

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    rows = []
    for l in lines[1:]:
        cells = l.split(",")
        assert len(cells) == len(names), (names, l)
        rows.append(dict(zip(names, map(float, cells))))
    return names, rows

def coef(rows, n, m, eye=1, frame=None):
    got = [r["coef_um"] for r in rows if r["n"] == n and r["m"] == m and r["eye"] == eye
           and (frame is None or r["frame"] == frame)]
    assert len(got) == 1, (n, m, eye, frame, got)
    return got[0]

def noll(n, m):
    """Noll's index (Noll 1976), worked out here independently of the library: order n takes
    n(n+1)/2 + 1 .. (n+1)(n+2)/2, |m| ascending; of a pair, the even index is the cosine term
    (m > 0) and the odd one the sine term (m < 0)."""
    j = n * (n + 1) // 2 + 1
    for am in range(n % 2, n + 1, 2):
        if am == 0:
            if m == 0:
                return j
            j += 1
            continue
        if abs(m) == am:
            even, odd = (j, j + 1) if j % 2 == 0 else (j + 1, j)
            return even if m > 0 else odd
        j += 2
    raise ValueError((n, m))

cmd = sys.argv[1]
if cmd == "coef":  # coef CSV [frame]: the input's terms within tol, the others small
    names, rows = read_csv(sys.argv[2])
    want = json.loads(sys.argv[3])  # {"n,m": value}
    tol, other = float(sys.argv[4]), float(sys.argv[5])
    frame = float(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[6] != "-" else None
    eye = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    for r in rows:
        if r["eye"] != eye or (frame is not None and r["frame"] != frame):
            continue
        k = "%d,%d" % (r["n"], r["m"])
        if r["n"] < 2:
            continue  # piston and tilts: alignment, not the eye
        w = want.get(k, 0.0)
        t = tol if k in want else other
        assert abs(r["coef_um"] - w) <= t, (k, r["coef_um"], w, t)
elif cmd == "header":
    got = open(sys.argv[2]).readline().strip()
    assert got == sys.argv[3], got
elif cmd == "rows":  # CSV eyes terms [frames]: the row set, j in OSA order 0..J-1
    names, rows = read_csv(sys.argv[2])
    eyes, terms = int(sys.argv[3]), int(sys.argv[4])
    frames = [int(f) for f in sys.argv[5].split(",")] if len(sys.argv) > 5 else [None]
    assert len(rows) == eyes * terms * len(frames), len(rows)
    k = 0
    for f in frames:
        for e in range(1, eyes + 1):
            for j in range(terms):
                r = rows[k]
                k += 1
                assert r["eye"] == e and r["j"] == j, (r, e, j)
                if f is not None:
                    assert r["frame"] == f, (r, f)
                n = int(math.ceil((-3 + math.sqrt(9 + 8 * j)) / 2))
                m = 2 * j - n * (n + 2)
                assert (r["n"], r["m"]) == (n, m), (r, n, m)
                if j == 0:
                    assert r["coef_um"] == 0, r
elif cmd == "noll":  # the Noll CSV holds the same coefficients as the OSA one, j renumbered
    _, a = read_csv(sys.argv[2])
    _, b = read_csv(sys.argv[3])
    assert len(a) == len(b)
    osa = {(r["eye"], r["n"], r["m"]): r for r in a}
    js = []
    for r in b:
        o = osa[(r["eye"], r["n"], r["m"])]
        assert r["coef_um"] == o["coef_um"], (r, o)
        assert r["j"] == noll(int(r["n"]), int(r["m"])), r
        js.append(int(r["j"]))
    assert js == list(range(1, len(b) + 1)), js
elif cmd == "nan":  # every coefficient of the eye is nan
    _, rows = read_csv(sys.argv[2])
    assert rows and all(math.isnan(r["coef_um"]) for r in rows), rows[:3]
elif cmd == "rescale":  # pure defocus over a smaller pupil: c20 (d/D)^2
    _, a = read_csv(sys.argv[2])
    _, b = read_csv(sys.argv[3])
    s = (float(sys.argv[4]) / float(sys.argv[5])) ** 2
    ca, cb = coef(a, 2, 0), coef(b, 2, 0)
    assert abs(cb - s * ca) <= 0.02 * abs(ca) + 0.005, (ca, cb, s)
elif cmd == "json":  # the report: keys, agreement with the CSV, then a condition
    rep = json.load(open(sys.argv[2]))
    _, rows = read_csv(sys.argv[3])
    assert rep["command"] == "aberrometry", rep
    for f in rep["frames"]:
        for q in f["eyes"]:
            for k in ("eye", "valid", "failure", "pupil", "analysis_circle", "pupil_mm", "counts",
                      "coefficients", "refraction", "residual_px"):
                assert k in q, k
            for k in ("sphere_d", "cyl_d", "axis_deg", "M", "J0", "J45"):
                assert k in q["refraction"], k
            c = q["counts"]
            for k in ("lenslets", "found", "kept", "discarded_empty", "discarded_spacing",
                      "discarded_isolated"):
                assert k in c, k
            if q["valid"]:
                assert q["failure"] is None
                assert 0 < c["kept"] <= c["found"] <= c["lenslets"], c
                assert c["found"] - c["kept"] == c["discarded_empty"] + c["discarded_spacing"] + c["discarded_isolated"], c
                for t in q["coefficients"]:
                    r = [x for x in rows if x["eye"] == q["eye"] and x["n"] == t["n"] and x["m"] == t["m"]
                         and ("frame" not in x or x["frame"] == f["frame"])]
                    assert len(r) == 1 and abs(r[0]["coef_um"] - t["coef_um"]) <= 1e-6 * (1 + abs(t["coef_um"])), (t, r)
                # the refraction from the coefficients (zernike_fit.h, Thibos et al. 2004): the
                # second order by default, the 4th and 6th too with --higher-order-rx (issue 22)
                cf = {(t["n"], t["m"]): t["coef_um"] for t in q["coefficients"]}
                rr = q["pupil_mm"] / 2
                M2 = -4 * math.sqrt(3) * cf[(2, 0)] / rr ** 2
                M = M2 + (12 * math.sqrt(5) * cf.get((4, 0), 0)
                          - 24 * math.sqrt(7) * cf.get((6, 0), 0)) / rr ** 2
                if not rep["higher_order_rx"]:
                    M = M2
                assert abs(q["refraction"]["M"] - M) <= 1e-6 * (1 + abs(M)), (q["refraction"], M)
                # the clinical ones: at the reference wavelength (the Chromatic Eye's shift)
                lca = 0.63346 / (rep["wavelength_um"] - 0.21410) - 0.63346 / (rep["reference_wavelength_um"] - 0.21410)
                assert abs(q["refraction_2nd_order"]["M_d"] - (M2 + lca)) <= 1e-6 * (1 + abs(M2)), q
                assert abs(q["refraction_higher_order"]["M_d"] - (M2 + lca) - (M - M2 if rep["higher_order_rx"] else
                           (12 * math.sqrt(5) * cf.get((4, 0), 0) - 24 * math.sqrt(7) * cf.get((6, 0), 0)) / rr ** 2)) <= 1e-6 * (1 + abs(M)), q
                assert abs(math.sqrt(sum(x * x for x in q["rms_by_order_um"][3:])) - q["hoa_rms_um"]) < 1e-9, q
            else:
                assert isinstance(q["failure"], str) and len(q["failure"]) > 3, q
    e = rep["frames"][-1]["eyes"][0]
    assert eval(sys.argv[4]), (sys.argv[4], json.dumps(rep)[:2000])
elif cmd == "spots":  # the lenslets of the last frame
    names, rows = read_csv(sys.argv[2])
    nx, ny = int(sys.argv[3]), int(sys.argv[4])
    assert names == ["ix", "iy", "eye", "x_px", "y_px", "x0_px", "y0_px", "status"], names
    assert [(int(r["ix"]), int(r["iy"])) for r in rows] == [(ix, iy) for iy in range(ny) for ix in range(nx)]
    ok = [r for r in rows if r["status"] == 0]
    assert len(ok) >= int(sys.argv[5]), len(ok)
    for r in rows:
        assert r["eye"] in (0, 1, 2) and 0 <= r["status"] <= 7, r
        if r["status"] == 0:
            assert r["eye"] >= 1 and math.isfinite(r["x_px"]) and math.isfinite(r["x0_px"]), r
            # a found spot lies within a pitch of where its search started
            assert math.hypot(r["x_px"] - r["x0_px"], r["y_px"] - r["y0_px"]) < 32, r
        if r["eye"] == 0:
            assert r["status"] == 1, r  # lenslets of no pupil are not searched
elif cmd == "png":
    d = open(sys.argv[2], "rb").read()
    assert d[:8] == b"\x89PNG\r\n\x1a\n", d[:8]
elif cmd == "fits":  # a 2-D float image of the map's size, nan outside the pupil
    import struct
    d = open(sys.argv[2], "rb").read()
    cards, pos = {}, 0
    while True:
        blk = d[pos:pos + 2880]
        pos += 2880
        end = False
        for i in range(0, 2880, 80):
            c = blk[i:i + 80].decode("ascii")
            if c[:8].strip() == "END":
                end = True
                break
            if c[8:10] == "= ":
                cards[c[:8].strip()] = c[10:].split("/")[0].strip()
        if end:
            break
    n = int(sys.argv[3])
    assert int(cards["BITPIX"]) == -32 and int(cards["NAXIS1"]) == n and int(cards["NAXIS2"]) == n, cards
    px = struct.unpack(">%df" % (n * n), d[pos:pos + 4 * n * n])
    assert math.isnan(px[0]) and math.isfinite(px[(n // 2) * n + n // 2]), (px[0], px[(n // 2) * n + n // 2])
elif cmd == "agree":  # two centroid tables: the same lenslets valid, positions within tol
    _, a = read_csv(sys.argv[2])
    _, b = read_csv(sys.argv[3])
    tol, need = float(sys.argv[4]), int(sys.argv[5])
    assert len(a) == len(b)
    n, worst = 0, 0.0
    for p, q in zip(a, b):
        assert (p["ix"], p["iy"]) == (q["ix"], q["iy"])
        if p["valid"] and q["valid"]:
            n += 1
            worst = max(worst, abs(p["x_px"] - q["x_px"]), abs(p["y_px"] - q["y_px"]))
    assert n >= need and worst <= tol, (n, worst)
elif cmd == "slopes0":  # dx, dy of a frame against itself: all valid lenslets near 0
    names, rows = read_csv(sys.argv[2])
    assert names[-2:] == ["dx_px", "dy_px"], names
    v = [r for r in rows if r["valid"]]
    assert len(v) >= int(sys.argv[3]) and all(abs(r["dx_px"]) < 0.01 and abs(r["dy_px"]) < 0.01 for r in v), len(v)
elif cmd == "bench":  # JSON lines of the bench's smoke run
    lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    kinds = {l["bench"] for l in lines}
    for k in ("aberrometry_accuracy", "aberrometry_stability", "aberrometry_cpu_run"):
        assert k in kinds, (k, kinds)
    for l in lines:
        if l["bench"] == "aberrometry_accuracy":
            assert 0 <= l["pct_rmse_lt_1"] <= 100 and l["images"] > 0, l
else:
    raise SystemExit("unknown check " + cmd)
EOF
check() { python3 "$tmp/check.py" "$@"; }

# ---------------------------------------------------------------- frames
# sim eye's default: 640 x 640, 20 x 20 lenslets of 32 px from (0, 0), 0.78 um, 2000 e- per
# lenslet, a 5.12 mm pupil of 576 px (magnification 576 x 5.5 um / 5.12 mm = 0.61875). Gain 1.5
# e-/ADU keeps the spots below 255.
grid=(--pitch 32 --grid 20x20 --origin 0,0)
expect 0 --backend cpu sim sh --size 640x640 "${grid[@]}" --flux 2000 --wavelength-um 0.78 \
    --bits 8 --gain 1.5 --seed 11 --out "$tmp/ref.pgm"
printf 'n,m,coef_um\n2,0,1.0\n2,2,0.3\n3,-1,0.15\n' >"$tmp/z.csv"
eye=(--backend cpu sim eye --gain 1.5)
expect 0 "${eye[@]}" --zernike "$tmp/z.csv" --seed 3 --out "$tmp/eye.pgm" --truth "$tmp/eye"
expect 0 "${eye[@]}" --zernike "$tmp/z.csv" --seed 4 --out "$tmp/eye2.pgm"
want='{"2,0": 1.0, "2,2": 0.3, "3,-1": 0.15}'
mag=(--magnification 0.61875)

# ---------------------------------------------------------------- one eye, one frame
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --out "$tmp/z1.csv"
check header "$tmp/z1.csv" "eye,j,n,m,coef_um" || fail "the CSV header"
check rows "$tmp/z1.csv" 1 28 || fail "the rows: one eye, OSA j = 0..27 (order 6)"
check coef "$tmp/z1.csv" "$want" 0.05 0.05 || fail "the coefficients vs the input: $(cat "$tmp/z1.csv")"
# Standard output: the same table.
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" "${mag[@]}"
printf '%s\n' "$out" >"$tmp/z1_stdout.csv"
cmp -s "$tmp/z1.csv" "$tmp/z1_stdout.csv" || fail "the table on stdout differs from --out"
# The grid found in the reference.
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${mag[@]}" \
    --out "$tmp/z1a.csv" --json
printf '%s\n' "$out" >"$tmp/z1a.json"
check coef "$tmp/z1a.csv" "$want" 0.05 0.05 || fail "grid from the reference: $(cat "$tmp/z1a.csv")"
check json "$tmp/z1a.json" "$tmp/z1a.csv" 'rep["lenslet_grid"]["source"] == "reference" and rep["lenslet_grid"]["nx"] == 20 and abs(rep["lenslet_grid"]["pitch_px"] - 32) < 0.05' ||
    fail "grid from the reference in the report: $out"
# The default backend (the GPU where there is one) agrees.
expect 0 aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" "${mag[@]}" --out "$tmp/z1d.csv"
check coef "$tmp/z1d.csv" "$want" 0.05 0.05 || fail "default backend: $(cat "$tmp/z1d.csv")"

# ---------------------------------------------------------------- --json
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --out "$tmp/z1j.csv" --json
printf '%s\n' "$out" >"$tmp/z1.json"
python3 -m json.tool "$tmp/z1.json" >/dev/null || fail "--json does not parse: $out"
cmp -s "$tmp/z1.csv" "$tmp/z1j.csv" || fail "--json changed the table"
# one valid eye; pupil ~288 px at the truth centre, pupil_mm = 2 R 5.5 um / (1000 x 0.61875)
# ~5.12 mm; a myopic defocus: M < 0 (about -4 sqrt3 / 2.56^2 = -1.06 D for 1 um)
check json "$tmp/z1.json" "$tmp/z1j.csv" 'e["valid"] and abs(e["pupil"]["a_px"] - 288) < 4 and abs(e["pupil_mm"] - 5.12) < 0.08 and -1.2 < e["refraction"]["M"] < -0.9 and e["refraction"]["sphere_d"] < 0 and e["counts"]["lenslets"] > 150 and rep["algorithm"] == "papycs" and rep["order"] == 6 and rep["eyes"] == 1 and rep["frame_count"] == 1 and rep["backend"] == "cpu" and rep["frame_size"] == [640, 640] and rep["pixel_type"] == "u8" and rep["lenslet_grid"]["source"] == "options" and abs(e["analysis_circle"]["radius_px"] - e["pupil"]["a_px"]) < 1e-9' ||
    fail "JSON report: $out"
[[ $out == *'"refraction"'* && $out == *'"sphere_d"'* ]] || fail "the report does not name the refraction"
# The seed's single-stage dynamic mesh (its orders only) without the mesh check: the same eye,
# the settings reported.
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --out "$tmp/z1s.csv" --json --mesh-stages 1 --prelim-order 2 --mesh-tolerance 0 \
    --mesh-slopes 0 --neighbour-window 0
printf '%s\n' "$out" >"$tmp/z1s.json"
check coef "$tmp/z1s.csv" "$want" 0.05 0.05 || fail "--mesh-stages 1: $(cat "$tmp/z1s.csv")"
check json "$tmp/z1s.json" "$tmp/z1s.csv" 'rep["mesh_stages"] == 1 and rep["mesh_tolerance"] == 0 and rep["prelim_order"] == 2 and rep["mesh_slopes_per_term"] == 0 and rep["neighbour_window"] == 0' ||
    fail "--mesh-stages 1 in the report: $out"
check json "$tmp/z1.json" "$tmp/z1j.csv" 'rep["mesh_slopes_per_term"] == 4 and rep["neighbour_window"] == 1' ||
    fail "the default --mesh-slopes in the report: $(cat "$tmp/z1.json")"
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --mesh-stages 9
# --edge-level: the glow path's level reaches the tracker (default auto: measured per frame)
# and the report; the fixed level finds the same eye within 1.5 px; 1 and words refused
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --out "$tmp/z1e.csv" --json --edge-level 0.4
printf '%s\n' "$out" >"$tmp/z1e.json"
check json "$tmp/z1e.json" "$tmp/z1e.csv" 'rep["edge_level"] == 0.4 and e["valid"] and abs(e["pupil"]["a_px"] - 288) < 1.5' ||
    fail "--edge-level 0.4: $out"
check json "$tmp/z1.json" "$tmp/z1j.csv" 'rep["edge_level"] == "auto"' || fail "default edge level in the report"
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --edge-level 1
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --edge-level high
check json "$tmp/z1.json" "$tmp/z1j.csv" 'rep["discard_ring_px"] == 1' || fail "criterion 1's distance at a 32-px pitch"
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --no-discard --discard-ring 2
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --discard-ring -1
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --mesh-slopes -1
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --mesh-residual 0
check json "$tmp/z1.json" "$tmp/z1j.csv" 'rep["mesh_raise_residual_px"] == 0.2' || fail "the default --mesh-residual in the report"
check json "$tmp/z1.json" "$tmp/z1j.csv" 'rep["outlier_sigma"] == 5 and rep["outlier_min_px"] == 1 and rep["frames"][0]["eyes"][0]["counts"]["outliers"] == 0' || fail "the outlier rejection's defaults and count in the report"
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --outlier-sigma -1
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --outlier-min-px nan
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --neighbour-window -1
expect_usage aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --mesh-tolerance -1
# --fit-radius-px 288 (the sim's circle): the same coefficients, the radius reported
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --fit-radius-px 288 --out "$tmp/z1r.csv" --json
printf '%s\n' "$out" >"$tmp/z1r.json"
check coef "$tmp/z1r.csv" "$want" 0.05 0.05 || fail "--fit-radius-px 288"
check json "$tmp/z1r.json" "$tmp/z1r.csv" 'e["analysis_circle"]["radius_px"] == 288 and abs(e["pupil_mm"] - 5.12) < 1e-9 and rep["fit_radius_px"] == 288' ||
    fail "--fit-radius-px in the report: $out"
# The other algorithms and options run and give a result.
for a in com reichenbach; do
    expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
        --algorithm "$a" --no-discard --prelim-order 0 --out "$tmp/z_$a.csv" --json
    printf '%s\n' "$out" >"$tmp/z_$a.json"
    check json "$tmp/z_$a.json" "$tmp/z_$a.csv" 'rep["algorithm"] == "'"$a"'" and rep["discard"] is False and rep["prelim_order"] == 0 and (not e["valid"] or e["counts"]["kept"] == e["counts"]["found"])' ||
        fail "--algorithm $a: $out"
done
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    --order 4 --index ansi --out "$tmp/z4.csv"
check rows "$tmp/z4.csv" 1 15 || fail "--order 4: 15 rows"

# ---------------------------------------------------------------- --index noll
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --index noll --out "$tmp/z1n.csv"
check noll "$tmp/z1.csv" "$tmp/z1n.csv" || fail "--index noll: $(head -8 "$tmp/z1n.csv")"

# ---------------------------------------------------------------- --pupil-mm
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --pupil-mm 4 --out "$tmp/z1p.csv" --json
printf '%s\n' "$out" >"$tmp/z1p.json"
check rescale "$tmp/z1.csv" "$tmp/z1p.csv" 4 5.12 || fail "--pupil-mm 4: $(cat "$tmp/z1p.csv")"
check json "$tmp/z1p.json" "$tmp/z1p.csv" 'e["pupil_mm"] == 4 and abs(e["measured_pupil_mm"] - 5.12) < 0.08 and rep["pupil_mm"] == 4' ||
    fail "--pupil-mm in the report: $out"
expect 1 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --pupil-mm 6 --out "$tmp/never.csv"
expect_one_line aberrometry --pupil-mm 6
[[ $err == *"--pupil-mm"* && ! -e $tmp/never.csv ]] || fail "--pupil-mm 6 larger than 5.12: $err"

# ---------------------------------------------------------------- --spots, --map
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    "${mag[@]}" --spots "$tmp/spots.csv" --map "$tmp/w.png" --out "$tmp/z1s.csv" --json
printf '%s\n' "$out" >"$tmp/z1s.json"
check spots "$tmp/spots.csv" 20 20 150 || fail "--spots"
check png "$tmp/w.png" || fail "--map PNG"
check json "$tmp/z1s.json" "$tmp/z1s.csv" 'e["map"].endswith("w.png") and rep["spots"].endswith("spots.csv")' ||
    fail "--map in the report: $out"
# the spots kept in the CSV number the report's count
kept=$(awk -F, 'NR > 1 && $3 == 1 && $8 == 0' "$tmp/spots.csv" | wc -l)
check json "$tmp/z1s.json" "$tmp/z1s.csv" 'e["counts"]["kept"] == '"$kept" || fail "--spots: $kept kept"
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    --map "$tmp/w.fits" --map-size 64 --out "$tmp/z1f.csv"
check fits "$tmp/w.fits" 64 || fail "--map FITS"

# ---------------------------------------------------------------- several frames
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" "$tmp/eye2.pgm" --reference "$tmp/ref.pgm" \
    "${grid[@]}" "${mag[@]}" --out "$tmp/z2.csv" --no-progress --json
printf '%s\n' "$out" >"$tmp/z2.json"
check header "$tmp/z2.csv" "frame,eye,j,n,m,coef_um" || fail "several frames: the header"
check rows "$tmp/z2.csv" 1 28 0,1 || fail "several frames: the rows"
check coef "$tmp/z2.csv" "$want" 0.05 0.05 0 || fail "frame 0"
check coef "$tmp/z2.csv" "$want" 0.05 0.05 1 || fail "frame 1"
check json "$tmp/z2.json" "$tmp/z2.csv" 'rep["frame_count"] == 2 and [f["frame"] for f in rep["frames"]] == [0, 1]' ||
    fail "several frames: the report"
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" "$tmp/eye2.pgm" --reference "$tmp/ref.pgm" \
    "${grid[@]}" --first 1 --count 1 --out "$tmp/z2b.csv"
check rows "$tmp/z2b.csv" 1 28 1 || fail "--first 1 --count 1"
expect 0 --backend cpu aberrometry "$tmp/eye.pgm" "$tmp/eye2.pgm" --reference "$tmp/ref.pgm" \
    "${grid[@]}" --progress --out "$tmp/z2c.csv"
[[ $err == *"2/2 frames"* ]] || fail "--progress: $err"

# ---------------------------------------------------------------- two eyes
expect 0 --backend cpu sim sh --size 1280x640 --pitch 32 --grid 40x20 --origin 0,0 --flux 2000 \
    --wavelength-um 0.78 --bits 8 --gain 1.5 --seed 12 --out "$tmp/ref2.pgm"
expect 0 "${eye[@]}" --binocular --zernike "$tmp/z.csv" --seed 5 --out "$tmp/bino.pgm"
expect 0 --backend cpu aberrometry "$tmp/bino.pgm" --binocular --reference "$tmp/ref2.pgm" \
    --pitch 32 --grid 40x20 --origin 0,0 --map "$tmp/b.png" --out "$tmp/zb.csv" --json
printf '%s\n' "$out" >"$tmp/zb.json"
check rows "$tmp/zb.csv" 2 28 || fail "two eyes: the rows"
for k in 1 2; do
    # the same coefficients in both eyes (sim eye gives both the file's)
    check coef "$tmp/zb.csv" "$want" 0.05 0.05 - "$k" || fail "two eyes, eye $k: $(cat "$tmp/zb.csv")"
    check png "$tmp/b_eye$k.png" || fail "two eyes: map b_eye$k.png"
done
check json "$tmp/zb.json" "$tmp/zb.csv" 'rep["eyes"] == 2 and len(rep["frames"][0]["eyes"]) == 2 and all(q["valid"] for q in rep["frames"][0]["eyes"]) and rep["frames"][0]["eyes"][0]["pupil"]["cx_px"] < rep["frames"][0]["eyes"][1]["pupil"]["cx_px"]' ||
    fail "two eyes: the report: $out"

# ---------------------------------------------------------------- no pupil: nan, exit 0
python3 - "$tmp/dark.pgm" <<'EOF'
import sys
open(sys.argv[1], "wb").write(b"P5\n640 640\n255\n" + bytes(640 * 640))
EOF
expect 0 --backend cpu aberrometry "$tmp/dark.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    --map "$tmp/dark.png" --out "$tmp/zd.csv" --json
printf '%s\n' "$out" >"$tmp/zd.json"
check nan "$tmp/zd.csv" || fail "a dark frame: $(cat "$tmp/zd.csv")"
check json "$tmp/zd.json" "$tmp/zd.csv" 'not e["valid"] and "pupil" in e["failure"] and e["map"] is None and rep["eyes_valid"] == 0' ||
    fail "a dark frame: the report: $out"
[[ ! -e $tmp/dark.png ]] || fail "a map was written for an eye without a result"

# ---------------------------------------------------------------- failures while running (1)
expect 0 --backend cpu sim sh --size 320x320 --pitch 32 --grid 10x10 --origin 0,0 --bits 8 \
    --out "$tmp/ref_small.pgm"
expect 1 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref_small.pgm" "${grid[@]}" \
    --out "$tmp/never.csv"
expect_one_line aberrometry small reference
[[ $err == *"ref_small.pgm"* && $err == *"320x320"* && $err == *"640x640"* ]] ||
    fail "a reference of another size: $err"
[[ ! -e $tmp/never.csv ]] || fail "a failed run left its table"
expect 1 --backend cpu aberrometry "$tmp/missing.pgm" --reference "$tmp/ref.pgm" --out "$tmp/never.csv"
expect_one_line aberrometry missing
[[ $err == *"missing.pgm"* ]] || fail "a missing image: $err"
expect 1 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" --pitch 32 \
    --grid 21x20 --origin 0,0 --out "$tmp/never.csv"
expect_one_line aberrometry grid outside
expect 1 --backend cpu aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    --out "$tmp/no/such/dir/z.csv"
expect_one_line aberrometry unwritable

# ---------------------------------------------------------------- help and usage errors (2)
expect 0 aberrometry --help
for o in --reference --pupil-mm --pixel-um --focal-mm --magnification --order --prelim-order \
    --index --algorithm papycs reichenbach --binocular --grid --pitch --origin --fit-radius-px \
    --window --no-discard --contrast --streams --spots --map --json --first --count "Exit status" \
    "eye,j,n,m,coef_um"; do
    [[ $out == *"$o"* ]] || fail "aberrometry --help does not mention $o"
done
expect 0 --help
[[ $out == *"aberrometry"* ]] || fail "spotwave --help does not list aberrometry"
img=$tmp/eye.pgm
ref="--reference $tmp/ref.pgm"
bad=(
    "aberrometry"
    "aberrometry $img"
    "aberrometry $img $ref --wat"
    "aberrometry $img $ref --order 0"
    "aberrometry $img $ref --order 11"
    "aberrometry $img $ref --order 4 --prelim-order 5"
    "aberrometry $img $ref --algorithm fancy"
    "aberrometry $img $ref --index zz"
    "aberrometry $img $ref --pitch 32"
    "aberrometry $img $ref --pitch 32 --grid 20x20"
    "aberrometry $img $ref --pitch 32 --grid 20 --origin 0,0"
    "aberrometry $img $ref --magnification 0"
    "aberrometry $img $ref --pupil-mm -1"
    "aberrometry $img $ref --fit-radius-px 0"
    "aberrometry $img $ref --window 2"
    "aberrometry $img $ref --streams 0"
    "aberrometry $img $ref --streams 9"
    "aberrometry $img $ref --central-fraction 1.5"
    "aberrometry $img $ref --no-discard --contrast 10"
    "aberrometry $img $ref --json"
    "aberrometry $img $ref --json --out -"
    "aberrometry $img $ref --map $tmp/w.jpg"
    "aberrometry $img $ref --map-size 2"
    "aberrometry $img $ref --spots -"
    "aberrometry $img $ref --first -1"
    "aberrometry $img $ref --count 0"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect_usage $args
done

# ---------------------------------------------------------------- centroid --algorithm pyramid|com
# A clean SH frame (no noise, float pixels) with small aberrations: the searches agree with the
# centre of gravity within 0.05 px; with the frame as its own reference, the slopes are ~0.
printf 'n,m,coef_um\n2,0,0.3\n2,-2,0.1\n' >"$tmp/zs.csv"
expect 0 --backend cpu sim sh --size 320x320 --pitch 32 --grid 10x10 --origin 0,0 --zernike "$tmp/zs.csv" \
    --flux 5000 --sigma 1.5 --noise none --bits 32f --out "$tmp/sh.fits"
cg=(--backend cpu centroid "$tmp/sh.fits" --pitch 32 --grid 10x10 --origin 0,0)
expect 0 "${cg[@]}" --out "$tmp/cog.csv"
for a in pyramid com; do
    expect 0 "${cg[@]}" --algorithm "$a" --out "$tmp/$a.csv" --json
    printf '%s\n' "$out" >"$tmp/$a.json"
    check header "$tmp/$a.csv" "ix,iy,x_px,y_px,intensity,valid" || fail "centroid --algorithm $a: header"
    check agree "$tmp/cog.csv" "$tmp/$a.csv" 0.05 100 || fail "centroid --algorithm $a vs cog"
    python3 -c 'import json,sys; r = json.load(open(sys.argv[1])); assert r["algorithm"] == sys.argv[2], r' \
        "$tmp/$a.json" "$a" || fail "centroid --algorithm $a: the report"
done
expect 0 "${cg[@]}" --algorithm pyramid --reference "$tmp/sh.fits" --discard --out "$tmp/pyr_ref.csv"
check slopes0 "$tmp/pyr_ref.csv" 100 || fail "centroid --algorithm pyramid against itself"
expect_usage centroid "$tmp/sh.fits" --pitch 32 --algorithm pyramid --gamma 2
expect_usage centroid "$tmp/sh.fits" --pitch 32 --algorithm com --threshold 3
expect_usage centroid "$tmp/sh.fits" --pitch 32 --discard

# ---------------------------------------------------------------- the benchmark, when built
bench=$(dirname "$SW")/bench/bench_aberrometry
if [[ -x $bench ]]; then
    set +e
    "$bench" --quick --backend cpu --json-only --images 1 --algorithm papycs >"$tmp/bench.jsonl" 2>"$tmp/bench.err"
    brc=$?
    set -e
    [[ $brc == 0 ]] || fail "bench_aberrometry --quick exited $brc: $(cat "$tmp/bench.err")"
    check bench "$tmp/bench.jsonl" || fail "bench_aberrometry --quick: $(cat "$tmp/bench.jsonl")"
    expect_bench_usage() {
        set +e
        "$bench" "$@" >/dev/null 2>"$tmp/bench.err"
        brc=$?
        set -e
        [[ $brc == 2 ]] || fail "bench_aberrometry $* exited $brc"
    }
    expect_bench_usage --algorithm fancy
    expect_bench_usage --images 0
else
    echo "bench_aberrometry not built: its smoke run skipped"
fi

echo "ok"
