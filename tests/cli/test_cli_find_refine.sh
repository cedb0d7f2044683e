#!/usr/bin/env bash
# `spotwave find --refine`: a CCD-like star field from `spotwave sim stars` (sky, read noise,
# gain 1.5 e-/ADU, bias 200 ADU) found in CCD mode (the gains from the background) with
# --refine gauss, xwin and moffat over a mesh background: the refined columns are appended, and the
# refined positions are closer to the truth than the plain centroids, with variances that match
# their errors. Usage errors: --refine with --3d, --background without --refine, bad names.
# Usage: test_cli_find_refine.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"

"$SW" sim stars --random 40 --size 256x256 --sigma 1.5 --psf integrated --zero-point 40000 \
    --mag-range 0,2 --sky-e 100 --read-noise-e 5 --gain 1.5 --bias 200 --bits 16 --seed 4 \
    -o "$tmp/f.fits" --truth "$tmp/t.csv" >/dev/null 2>&1 || fail "sim stars"
"$SW" find "$tmp/f.fits" --ccd --bias 200 --read-noise 5 -o "$tmp/plain.csv" 2>"$tmp/err" ||
    fail "find --ccd: $(cat "$tmp/err")"
grep -q "CCD mode: .*detector gain 1\.[45]" "$tmp/err" || fail "CCD mode: $(cat "$tmp/err")"
for m in gauss xwin moffat; do
    "$SW" find "$tmp/f.fits" --ccd --bias 200 --read-noise 5 --refine $m --background mesh \
        --mesh-size 32 -o "$tmp/$m.csv" 2>/dev/null || fail "find --refine $m"
done
python3 - "$tmp" <<'PY' || fail "refined positions"
import math, sys
d = sys.argv[1]
def rows(p):
    lines = [l.strip().split(",") for l in open(p) if l.strip()]
    return lines[0], [dict(zip(lines[0], map(float, l))) for l in lines[1:]]
_, truth = rows(d + "/t.csv")
def score(name):
    head, spots = rows(d + "/" + name + ".csv")
    err2, pull = [], []
    for t in truth:
        if not (8 < t["x_px"] < 248 and 8 < t["y_px"] < 248):
            continue
        s = min(spots, key=lambda s: (s["x_px"] - t["x_px"]) ** 2 + (s["y_px"] - t["y_px"]) ** 2)
        dx, dy = s["x_px"] - t["x_px"], s["y_px"] - t["y_px"]
        if math.hypot(dx, dy) > 1.5:
            continue
        # isolated stars only: no other truth star within 10 px
        if any(0 < math.hypot(u["x_px"] - t["x_px"], u["y_px"] - t["y_px"]) < 10 for u in truth):
            continue
        err2.append(0.5 * (dx * dx + dy * dy))
        pull.append(0.5 * (dx * dx / s["x_var"] + dy * dy / s["y_var"]))
    return head, math.sqrt(sum(err2) / len(err2)), sum(pull) / len(pull), len(err2)
hp, plain, _, n = score("plain")
assert n >= 20, n
for m in ("gauss", "xwin", "moffat"):
    head, rms, pull, n = score(m)
    assert head[-4:] == ["refine_flags", "flux_adu", "sigma_px", "background_adu"], head
    assert head[:11] == hp[:11], head
    assert rms < 0.6 * plain, (m, rms, plain)
    assert 0.5 < pull < 2.0, (m, pull)
    print(m, "rms", rms, "plain", plain, "mean pull^2", pull, "stars", n)
PY
expect_usage find "$tmp/f.fits" --refine gauss --3d -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --background mesh -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --refine psf -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --refine gauss --background sky -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --refine gauss --stamp-radius 1 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --refine gauss --detector-gain 0 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --refine gauss --moffat-beta 3 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --refine moffat --moffat-beta 1 -o "$tmp/x.csv"
echo "ok"
