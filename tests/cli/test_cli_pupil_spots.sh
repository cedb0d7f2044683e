#!/usr/bin/env bash
# Pupils without retinal glow and given pupils through `spotwave pupil` and `spotwave
# aberrometry` (issue 22): `sim eye --glow 0` (a clean image of spots through a 576 px pupil, as
# an artificial eye or a bench gives) at a 20 px pitch is found by the spots path (CSV method
# "spots", within 2 px and 1.5 % of the truth; the JSON names the glow path's failure), not found
# with --pupil-method glow; aberrometry measures it (pupil_method "spots", a fallback reason, the
# truth's coefficients to 0.15 um RMS) and with the true pupil given (pupil_method "given", the
# same coefficients to 0.1 um); --pupil-ellipse is reported as given; the default magnification
# is reported as such; the contrast is reported in the frame's units. Bad given pupils are usage
# errors.
# Usage: test_cli_pupil_spots.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to read the reports"
cd "$tmp"

expect 0 sim eye --glow 0 --pitch 20 --grid 32x32 --focal-mm 2.1875 --rms-um 2 --seed 5 \
    --out e.pgm --truth t --reference r.pgm
expect 0 pupil e.pgm --pitch 20 --grid 32x32 --origin 0,0 --out p.csv --json
printf '%s\n' "$out" >p.json
expect 0 pupil e.pgm --pitch 20 --grid 32x32 --origin 0,0 --out g.csv --pupil-method glow
expect 0 pupil e.pgm --out n.csv
expect 0 pupil e.pgm --out q.csv --pupil-ellipse 300,310,250,240,30
expect 0 aberrometry e.pgm --reference r.pgm --focal-mm 2.1875 --out z.csv --json
printf '%s\n' "$out" >a.json
read -r cx cy a < <(python3 -c "
import csv; r = list(csv.DictReader(open('t_pupils.csv')))[0]; print(r['cx_px'], r['cy_px'], r['a_px'])")
expect 0 aberrometry e.pgm --reference r.pgm --focal-mm 2.1875 --out zg.csv --json \
    --pupil-center "$cx,$cy" --pupil-radius-px "$a"
printf '%s\n' "$out" >ag.json

python3 - <<'EOF' || fail "glow-less eye through pupil and aberrometry"
import csv, json, math

def rows(path):
    return list(csv.DictReader(open(path)))

t = rows("t_pupils.csv")[0]
tz = {int(r["j"]): float(r["coef_um"]) for r in rows("t_eye0_zernike.csv")}
(p,) = rows("p.csv")
assert p["valid"] == "1" and p["method"] == "spots", p
assert math.hypot(float(p["cx_px"]) - float(t["cx_px"]), float(p["cy_px"]) - float(t["cy_px"])) < 2, (p, t)
for k in ("a_px", "b_px"):
    assert abs(float(p[k]) / float(t[k]) - 1) < 0.015, (k, p, t)
(g,) = rows("g.csv")
assert g["valid"] == "0" and g["method"] == "glow" and g["cx_px"] == "nan", g
(n,) = rows("n.csv")  # no grid: the spots path cannot run
assert n["valid"] == "0" and n["method"] == "spots", n
(q,) = rows("q.csv")
assert q["valid"] == "1" and q["method"] == "given", q
assert [float(q[k]) for k in ("cx_px", "cy_px", "a_px", "b_px", "angle_deg")] == [300, 310, 250, 240, 30], q

pj = json.load(open("p.json"))
x = pj["frames"][0]["pupils"][0]
assert x["method"] == "spots" and x["fallback_reason"] and x["spots_failure"] is None, x
assert x["spots_lit"] > 500 and x["spots_points"] > 50, x
assert pj["pupil_method"] == "auto" and pj["given"] is False, pj

def coefs(rep):
    e = rep["frames"][0]["eyes"][0]
    assert e["valid"], e
    return e, {c["j"]: c["coef_um"] for c in e["coefficients"]}

a = json.load(open("a.json"))
ag = json.load(open("ag.json"))
e, c = coefs(a)
eg, cg = coefs(ag)
assert e["pupil_method"] == "spots" and e["pupil_fallback_reason"], e
assert e["pupil"]["method"] == "spots", e["pupil"]
assert eg["pupil_method"] == "given" and eg["pupil_fallback_reason"] is None, eg
assert a["pupil_tracking"] == "auto" and ag["pupil_tracking"] == "given", (a, ag)
assert a["magnification_default"] is True and a["magnification"] == 0.61875, a
assert a["pixel_type"] == "u8" and a["contrast_full_scale"] == 255 and a["discard_contrast_px"] == 15, a
rmse = lambda u, v: math.sqrt(sum((u[j] - v.get(j, 0.0)) ** 2 for j in range(3, 28)))
assert rmse(c, tz) < 0.15, rmse(c, tz)
assert rmse(c, cg) < 0.1, rmse(c, cg)
assert rmse(cg, tz) < 0.1, rmse(cg, tz)
print("spots: RMSE %.4f um; given: %.4f um" % (rmse(c, tz), rmse(cg, tz)))
EOF

# bad given pupils and methods: usage errors
expect_usage pupil e.pgm --pupil-center 10,10
expect_usage pupil e.pgm --pupil-radius-px 50
expect_usage pupil e.pgm --pupil-center 10,10 --pupil-radius-px 0.5
expect_usage pupil e.pgm --pupil-center 10 --pupil-radius-px 50
expect_usage pupil e.pgm --pupil-center 10,10 --pupil-radius-px 50 --pupil-ellipse 1,2,3,4,5
expect_usage pupil e.pgm --binocular --pupil-ellipse 100,100,50,50,0
expect_usage pupil e.pgm --pupil-ellipse 100,100,50,50,0 --overlay o.png
expect_usage pupil e.pgm --pupil-method sometimes
expect_usage aberrometry e.pgm --reference r.pgm --out z.csv --pupil-center 1,2,3 \
    --pupil-radius-px 9
expect_usage aberrometry e.pgm --reference r.pgm --out z.csv --pupil-method none
expect_usage aberrometry e.pgm --reference r.pgm --out z.csv --no-discard --full-scale 4095
expect 1 pupil e.pgm --out x.csv --pupil-center 100,100 --pupil-radius-px 5000
echo "test_cli_pupil_spots: ok"
