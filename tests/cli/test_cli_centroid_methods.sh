#!/usr/bin/env bash
# `spotwave centroid --method` (centroid.h "Methods", "Status", "Error bars"): on a noise-free simulated
# Shack-Hartmann frame every method lands within 0.1 px of the truth, with error bars (--gain)
# and status ok; --min-snr flags every lenslet faint when set above the spots' SNR; --max-shift
# flags the lenslets whose spot moved farther; correlation against the reference image gives
# slopes that match the truth's displacements; bad method options are usage errors.
# Usage: test_cli_centroid_methods.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to read the tables"

cat >"$tmp/z.csv" <<'EOF'
n,m,coef_um
2,0,0.15
EOF
geom=(--pitch 20 --grid 8x8 --origin "0,0")
expect 0 --backend cpu sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 160x160 --noise none \
    --bits 32f --out "$tmp/a.fits" --truth "$tmp/a.csv" --reference "$tmp/ref.fits"

# check.py CSV TRUTH TOL [STATUS]: every lenslet's status is STATUS (default 0, ok); for ok rows the
# centroid is within TOL of the truth and x_var, y_var are positive and finite.
cat >"$tmp/check.py" <<'EOF'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
truth = {(r["ix"], r["iy"]): r for r in csv.DictReader(open(sys.argv[2]))}
tol = float(sys.argv[3])
want = sys.argv[4] if len(sys.argv) > 4 else "0"
assert list(rows[0].keys())[-4:] == ["status", "x_var", "y_var", "snr"], rows[0].keys()
bad = [r for r in rows if r["status"] != want]
assert not bad, bad[:3]
for r in rows:
    if want != "0":
        assert r["valid"] == "0" and r["x_px"] == "nan", r
        continue
    t = truth[(r["ix"], r["iy"])]
    assert abs(float(r["x_px"]) - float(t["x_px"])) < tol, (r, t)
    assert abs(float(r["y_px"]) - float(t["y_px"])) < tol, (r, t)
    if len(sys.argv) <= 5:
        assert 0 < float(r["x_var"]) < 1 and math.isfinite(float(r["snr"])), r
EOF
for m in "cog --gain 1" "wcog --fwhm 6 --iterations 5 --gain 1" "local --gain 1" \
    "brightest --brightest 30 --gain 1"; do
    # shellcheck disable=SC2086
    expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --method $m --out "$tmp/c.csv"
    python3 "$tmp/check.py" "$tmp/c.csv" "$tmp/a.csv" 0.1 || fail "--method $m"
done
# plain cog without --gain: no error bars (nan), still status ok
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --out "$tmp/c.csv"
python3 "$tmp/check.py" "$tmp/c.csv" "$tmp/a.csv" 0.1 0 noerr || fail "plain cog"
grep -q ',0,nan,nan,nan$' "$tmp/c.csv" || fail "plain cog: error bars are not nan"
# every lenslet faint above the spots' SNR
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --gain 1 --min-snr 1e9 --out "$tmp/c.csv"
python3 "$tmp/check.py" "$tmp/c.csv" "$tmp/a.csv" 0.1 6 || fail "--min-snr"
# correlation against the reference image: the slopes are the spots' displacements
expect 0 --backend cpu centroid "$tmp/a.fits" "${geom[@]}" --method correlation \
    --reference "$tmp/ref.fits" --search 4 --gain 1 --out "$tmp/c.csv"
python3 "$tmp/check.py" "$tmp/c.csv" "$tmp/a.csv" 0.15 || fail "--method correlation"

expect_usage centroid "$tmp/a.fits" "${geom[@]}" --method wcog
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --method nope
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --method correlation
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --method brightest
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --method wcog --fwhm -1
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --read-noise 3
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --edge-fraction 2
expect_usage centroid "$tmp/a.fits" "${geom[@]}" --algorithm pyramid --method wcog --fwhm 3
echo "ok"
