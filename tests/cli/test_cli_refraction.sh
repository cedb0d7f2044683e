#!/usr/bin/env bash
# Refraction as clinicians read it, through the whole pipeline (issue 22): `spotwave sim eye`
# draws high-aberration population eyes (3 and 5 um RMS), `spotwave aberrometry` measures them,
# and the JSON's refraction must be the second-order power vectors (Thibos, Hong, Bradley &
# Applegate 2004: M = -4 sqrt3 c20 / r^2, J0 = -2 sqrt6 c22 / r^2, J45 = -2 sqrt6 c2-2 / r^2) of
# the truth's coefficients; refraction_2nd_order is the same moved from 0.78 to 0.555 um by the
# Chromatic Eye (Thibos, Ye, Zhang & Bradley 1992), refraction_higher_order adds the 4th and 6th
# orders of the truth, and --higher-order-rx puts that one in 'refraction'. Then the eye's side
# and the instrument's flips: --eye OS reports the coefficients mirrored about the vertical axis
# (ANSI Z80.28) with the refraction unchanged; --flip-x / --flip-y change the sign of the terms
# odd in x / y and turn the axis a into 180 - a; two eyes with --eyes auto (OD at smaller x,
# OS mirrored; swapped by --flip-x); the image-quality pictures of two eyes; usage errors.
# Usage: test_cli_refraction.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the reports"
cd "$tmp"

grid=(--pitch 32 --grid 20x20 --origin 0,0)
expect 0 --backend cpu sim sh --size 640x640 "${grid[@]}" --flux 2000 --wavelength-um 0.78 \
    --bits 8 --gain 1.5 --seed 11 --out ref.pgm
ab=(--backend cpu aberrometry --reference ref.pgm "${grid[@]}")

# ---------------------------------------------------------------- the power vectors of the truth
for case in "3 1" "5 2"; do
    read -r rms seed <<<"$case"
    expect 0 --backend cpu sim eye --gain 1.5 --rms-um "$rms" --seed "$seed" --out "e$seed.pgm" \
        --truth "t$seed"
    expect 0 "${ab[@]}" "e$seed.pgm" --out "z$seed.csv" --json
    printf '%s\n' "$out" >"a$seed.json"
    expect 0 "${ab[@]}" "e$seed.pgm" --out "zh$seed.csv" --json --higher-order-rx
    printf '%s\n' "$out" >"ah$seed.json"
    python3 - "t${seed}_eye0_zernike.csv" "a$seed.json" "ah$seed.json" "$rms" <<'PYEOF' ||
import json, math, sys
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()]
c = {}
for r in rows[1:]:
    d = dict(zip(rows[0], r))
    c[(int(d["n"]), int(d["m"]))] = float(d["coef_um"])
g = lambda n, m: c.get((n, m), 0.0)
rms = math.sqrt(sum(v * v for (n, m), v in c.items() if n >= 2))
assert abs(rms - float(sys.argv[4])) < 1e-6, rms
a = json.load(open(sys.argv[2]))
ah = json.load(open(sys.argv[3]))
e, eh = a["frames"][0]["eyes"][0], ah["frames"][0]["eyes"][0]
assert e["valid"] and eh["valid"], (e["failure"], eh["failure"])
r2 = (e["pupil_mm"] / 2) ** 2
assert abs(e["pupil_mm"] - 5.12) < 0.05, e["pupil_mm"]
M = -4 * math.sqrt(3) * g(2, 0) / r2
J0 = -2 * math.sqrt(6) * g(2, 2) / r2
J45 = -2 * math.sqrt(6) * g(2, -2) / r2
dM = (12 * math.sqrt(5) * g(4, 0) - 24 * math.sqrt(7) * g(6, 0)) / r2
dJ0 = (6 * math.sqrt(10) * g(4, 2) - 12 * math.sqrt(14) * g(6, 2)) / r2
dJ45 = (6 * math.sqrt(10) * g(4, -2) - 12 * math.sqrt(14) * g(6, -2)) / r2
rx = e["refraction"]
tol = 0.1  # dioptres
for k, v in (("M", M), ("J0", J0), ("J45", J45)):
    assert abs(rx[k] - v) < tol, ("second order", k, rx[k], v)
# the higher-order refraction of the truth is far from the second-order one on these eyes
assert max(abs(dM), abs(dJ0), abs(dJ45)) > 3 * tol, (dM, dJ0, dJ45)
rh = eh["refraction"]
for k, v in (("M", M + dM), ("J0", J0 + dJ0), ("J45", J45 + dJ45)):
    assert abs(rh[k] - v) < 2 * tol, ("higher orders", k, rh[k], v)
lca = 0.63346 / (0.78 - 0.21410) - 0.63346 / (0.555 - 0.21410)
for rep, q in ((a, e), (ah, eh)):
    s2, hi = q["refraction_2nd_order"], q["refraction_higher_order"]
    assert abs(s2["M_d"] - (M + lca)) < tol and abs(s2["J0_d"] - J0) < tol, (s2, M, J0)
    assert abs(hi["M_d"] - (M + dM + lca)) < 2 * tol, (hi, M + dM + lca)
    mc = s2["minus_cyl"]
    assert abs(mc["sphere_d"] + mc["cyl_d"] / 2 - s2["M_d"]) < 1e-9
    assert abs(mc["cyl_d"] + 2 * math.hypot(s2["J0_d"], s2["J45_d"])) < 1e-9
    assert 0 < mc["axis_deg"] <= 180 and 0 < s2["plus_cyl"]["axis_deg"] <= 180
# the same numbers whichever is chosen
assert abs(eh["refraction_2nd_order"]["M_d"] - e["refraction_2nd_order"]["M_d"]) < 1e-9
print("rms %s: M %.3f (truth %.3f), J0 %.3f (%.3f), J45 %.3f (%.3f); with orders 4, 6: M %.3f (%.3f)"
      % (sys.argv[4], rx["M"], M, rx["J0"], J0, rx["J45"], J45, rh["M"], M + dM))
PYEOF
        fail "the refraction of a $rms um eye against the truth's power vectors"
done

# ---------------------------------------------------------------- left eye, flips
expect 0 "${ab[@]}" e1.pgm --out od.csv --json --eye OD
printf '%s\n' "$out" >od.json
expect 0 "${ab[@]}" e1.pgm --out os.csv --json --eye OS
printf '%s\n' "$out" >os.json
expect 0 "${ab[@]}" e1.pgm --out fx.csv --json --flip-x
printf '%s\n' "$out" >fx.json
expect 0 "${ab[@]}" e1.pgm --out fy.csv --json --flip-y
printf '%s\n' "$out" >fy.json
python3 - a1.json od.json os.json fx.json fy.json <<'PYEOF' || fail "--eye OS, --flip-x, --flip-y"
import json, sys
eye = lambda p: json.load(open(p))["frames"][0]["eyes"][0]
plain, od, os_, fx, fy = (eye(p) for p in sys.argv[1:])
cf = lambda e: {(t["n"], t["m"]): t["coef_um"] for t in e["coefficients"]}
cp = cf(plain)
odd_x = lambda n, m: (m >= 0 and m % 2 == 1) or (m < 0 and m % 2 == 0)
odd_y = lambda n, m: m < 0
assert od["eye_side"] == "OD" and os_["eye_side"] == "OS" and plain["eye_side"] is None
for (n, m), v in cp.items():
    assert cf(od)[(n, m)] == v
    # OS: mirrored about the vertical axis (ANSI Z80.28), the same as a flipped camera
    assert abs(cf(os_)[(n, m)] - (-v if odd_x(n, m) else v)) < 1e-12, (n, m)
    assert abs(cf(fx)[(n, m)] - (-v if odd_x(n, m) else v)) < 1e-12, (n, m)
    assert abs(cf(fy)[(n, m)] - (-v if odd_y(n, m) else v)) < 1e-12, (n, m)
# the side does not change the refraction (the TABO axis is the examiner's for both eyes)
assert os_["refraction"] == plain["refraction"]
assert os_["refraction_2nd_order"] == plain["refraction_2nd_order"]
# a mirroring camera does: the axis a becomes 180 - a, the sphere and cylinder stay
for f in (fx, fy):
    a, b = plain["refraction_2nd_order"]["minus_cyl"], f["refraction_2nd_order"]["minus_cyl"]
    assert abs(a["sphere_d"] - b["sphere_d"]) < 1e-9 and abs(a["cyl_d"] - b["cyl_d"]) < 1e-9
    assert min(abs(a["axis_deg"] + b["axis_deg"] - 180), abs(a["axis_deg"] + b["axis_deg"] - 360)) < 1e-6, (a, b)
PYEOF

# ---------------------------------------------------------------- two eyes
expect 0 --backend cpu sim eye --gain 1.5 --binocular --size 1280x640 --grid 40x20 --rms-um 2 \
    --seed 7 --out bino.pgm --truth tb
expect 0 --backend cpu sim sh --size 1280x640 --pitch 32 --grid 40x20 --origin 0,0 --flux 2000 \
    --wavelength-um 0.78 --bits 8 --gain 1.5 --seed 12 --out ref2.pgm
b=(--backend cpu aberrometry bino.pgm --binocular --reference ref2.pgm --pitch 32 --grid 40x20
    --origin 0,0)
expect 0 "${b[@]}" --out b0.csv --json
printf '%s\n' "$out" >b0.json
expect 0 "${b[@]}" --out ba.csv --json --eyes auto --psf bpsf.png --mtf bmtf.png --quality-hoa
printf '%s\n' "$out" >ba.json
expect 0 "${b[@]}" --out bx.csv --json --eyes auto --flip-x
printf '%s\n' "$out" >bx.json
python3 - b0.json ba.json bx.json <<'PYEOF' || fail "two eyes: sides and mirroring"
import json, sys
eyes = lambda p: json.load(open(p))["frames"][0]["eyes"]
plain, auto, flipped = (eyes(p) for p in sys.argv[1:])
cf = lambda e: {(t["n"], t["m"]): t["coef_um"] for t in e["coefficients"]}
odd_x = lambda n, m: (m >= 0 and m % 2 == 1) or (m < 0 and m % 2 == 0)
assert [e["eye_side"] for e in plain] == [None, None]
assert [e["eye_side"] for e in auto] == ["OD", "OS"]
assert [e["eye_side"] for e in flipped] == ["OS", "OD"]
assert cf(auto[0]) == cf(plain[0])
for (n, m), v in cf(plain[1]).items():
    assert abs(cf(auto[1])[(n, m)] - (-v if odd_x(n, m) else v)) < 1e-12, (n, m)
    # with --flip-x every eye is flipped into the examiner's frame, and eye 2 (now OD) is not
    # mirrored back: the mirror image; eye 1 (OS) is flipped and mirrored: as measured
    assert abs(cf(flipped[1])[(n, m)] - (-v if odd_x(n, m) else v)) < 1e-12, (n, m)
assert cf(flipped[0]) == cf(plain[0])
for k in (0, 1):
    assert auto[k]["refraction"] == plain[k]["refraction"]
    q = auto[k]["quality"]
    assert q["terms"] == "orders >= 3" and 0 < q["strehl"] <= 1 and q["sampled"], q
PYEOF
for k in 1 2; do
    for p in bpsf bmtf; do
        [[ $(head -c 4 "${p}_eye$k.png" | od -An -c | tr -d ' ') == *PNG* ]] ||
            fail "two eyes: ${p}_eye$k.png is not a PNG"
    done
done

# ---------------------------------------------------------------- usage errors
for a in "e1.pgm --eyes auto" "bino.pgm --binocular --eye OS" "bino.pgm --binocular --eyes OD,OD" \
    "e1.pgm --eye OU" "e1.pgm --psf p.gif" "e1.pgm --wavelength-um 0.1" \
    "e1.pgm --quality-wavelength-um nan"; do
    # shellcheck disable=SC2086
    expect 2 --backend cpu aberrometry $a --reference ref.pgm --out never.csv
done
[[ ! -e never.csv ]] || fail "a usage error left a table"
expect 0 aberrometry --help
for o in --higher-order-rx --wavelength-um --reference-wavelength-um --flip-x --flip-y --eye \
    --eyes --quality --psf --mtf --quality-hoa --quality-wavelength-um Chromatic; do
    [[ $out == *"$o"* ]] || fail "aberrometry --help does not mention $o"
done
echo "test_cli_refraction: ok"
