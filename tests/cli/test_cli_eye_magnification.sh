#!/usr/bin/env bash
# `spotwave sim eye` with its defaults, through `spotwave aberrometry` with its defaults, gives the
# true refraction (issue 29: the two commands once assumed different magnifications, 0.61875 and
# 1, and the sphere came out 2.6x too strong). The eye gets -3 D sphere and -1 D cylinder at 30
# deg on top of its population aberrations, so that a wrong pupil scale shows. The truth's power
# vector is worked out here from sim eye's truth CSV (Thibos, Hong, Bradley & Applegate 2004,
# with the 4th and 6th orders, as aberrometry reports it), independently of the library; sim
# eye's report must give the same truth and the magnification, aberrometry's JSON the
# magnification it assumed (and the truth's pupils CSV the magnification the image was drawn
# with). --magnification 1 must miss the truth by far (the test can fail).
# Usage: test_cli_eye_magnification.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to read the reports"
cd "$tmp"

expect 0 sim eye --sphere-d -3 --cyl-d -1 --axis-deg 30 --out eye.pgm --reference ref.pgm \
    --truth t --json
printf '%s\n' "$out" >sim.json
expect 0 sim eye --sphere-d -3 --cyl-d -1 --axis-deg 30 --out eye.pgm
[[ $out == *"magnification 0.61875"* ]] || fail "sim eye's report does not give its magnification: $out"
[[ $out == *"true refraction"* ]] || fail "sim eye's report does not give the true refraction: $out"

expect 0 aberrometry eye.pgm --reference ref.pgm --out z.csv --json
printf '%s\n' "$out" >ab.json
expect 0 aberrometry eye.pgm --reference ref.pgm --out z.csv
[[ $out == *"magnification 0.61875 (the default"* ]] ||
    fail "aberrometry's report does not say the magnification it assumed: $out"
expect 0 aberrometry eye.pgm --reference ref.pgm --out z1.csv --json --magnification 1
printf '%s\n' "$out" >ab1.json

python3 - <<'EOF' || fail "the refraction of sim eye's default image through aberrometry's defaults"
import json, math

def power_vector(path, pupil_mm):
    rows = [l.strip().split(",") for l in open(path) if l.strip()]
    names = rows[0]
    c = {}
    for r in rows[1:]:
        d = dict(zip(names, r))
        c[(int(d["n"]), int(d["m"]))] = float(d["coef_um"])
    r2 = (pupil_mm / 2) ** 2
    g = lambda n, m: c.get((n, m), 0.0)
    # the second order (Thibos et al. 2004), aberrometry's default since issue 22
    M = -4 * math.sqrt(3) * g(2, 0) / r2
    J0 = -2 * math.sqrt(6) * g(2, 2) / r2
    J45 = -2 * math.sqrt(6) * g(2, -2) / r2
    return M, J0, J45

sim = json.load(open("sim.json"))
ab = json.load(open("ab.json"))
ab1 = json.load(open("ab1.json"))
pupil = sim["pupil_mm"]
assert pupil == 5.12, pupil
truth = power_vector("t_eye0_zernike.csv", pupil)
assert abs(truth[0] + 2.5) < 1.5, truth  # -3 D sphere, -1 D cylinder: M near -3.5 + population

se = sim["eye"][0]
assert abs(se["magnification"] - 0.61875) < 1e-12, se["magnification"]
for k, v in zip(("M", "J0", "J45"), truth):
    assert abs(se["refraction"][k] - v) < 1e-9, (k, se["refraction"][k], v)

assert ab["magnification"] == 0.61875 and ab["magnification_source"].startswith("default"), ab
e = ab["frames"][0]["eyes"][0]
assert e["valid"], e
assert abs(e["pupil_mm"] - pupil) < 0.05, e["pupil_mm"]
rx = e["refraction"]
for k, v in zip(("M", "J0", "J45"), truth):
    assert abs(rx[k] - v) < 0.1, (k, rx[k], v)

assert ab1["magnification"] == 1 and ab1["magnification_source"] == "option", ab1
# the truth file carries what the image was drawn with (issue 22), the report what it assumed
tp = [l.strip().split(",") for l in open("t_pupils.csv") if l.strip()]
tp = dict(zip(tp[0], tp[1]))
assert abs(float(tp["magnification"]) - 0.61875) < 1e-12 and float(tp["pixel_um"]) == 5.5, tp
assert ab["magnification_default"] is True and ab1["magnification_default"] is False, ab1
assert e["pupil_method"] == "glow" and e["pupil_fallback_reason"] is None, e
rx1 = ab1["frames"][0]["eyes"][0]["refraction"]
assert abs(rx1["M"] - truth[0]) > 1.0, (rx1, truth)  # the old default's error
print("truth M %.3f J0 %.3f J45 %.3f; measured M %.3f J0 %.3f J45 %.3f"
      % (truth + (rx["M"], rx["J0"], rx["J45"])))
EOF
echo "test_cli_eye_magnification: ok"
