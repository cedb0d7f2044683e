#!/usr/bin/env bash
# `spotwave find --deblend`: a frame from `spotwave sim stars` with one isolated star and two
# touching pairs (equal stars 4 sigma apart, 1:5 stars 4 sigma apart) over a sky: without
# --deblend each pair is one spot; with it each pair is two spots sharing a parent id in the new
# last column (the 1-based row of the blend's first child), near their stars, and the isolated
# star keeps parent 0 and the same row as without. --refine keeps the parent column last.
# Usage errors: --deblend with --3d, --deblend-levels/--deblend-contrast without --deblend, bad
# values.
# Usage: test_cli_find_deblend.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"

cat >"$tmp/cat.csv" <<'CSV'
x_px,y_px,flux_e
30.3,40.6,30000
80.2,40.1,30000
86.2,40.1,30000
50.7,90.4,30000
54.94,94.64,6000
CSV
"$SW" sim stars --catalog "$tmp/cat.csv" --size 128x128 --sigma 1.5 --psf integrated \
    --sky-e 20 --seed 3 -o "$tmp/f.fits" --truth "$tmp/t.csv" >/dev/null 2>&1 || fail "sim stars"
"$SW" find "$tmp/f.fits" --max-separation 0 -o "$tmp/plain.csv" 2>/dev/null || fail "find"
"$SW" find "$tmp/f.fits" --max-separation 0 --deblend -o "$tmp/db.csv" --json >"$tmp/db.json" ||
    fail "find --deblend"
"$SW" find "$tmp/f.fits" --max-separation 0 --deblend --deblend-levels 32 \
    --deblend-contrast 0.005 --refine gauss -o "$tmp/dbr.csv" 2>/dev/null || fail "--refine"
"$SW" find "$tmp/f.fits" --max-separation 0 --deblend --deblend-contrast 1 \
    -o "$tmp/c1.csv" 2>/dev/null || fail "--deblend-contrast 1"
python3 - "$tmp" <<'PY' || fail "deblended spots"
import json, math, sys
d = sys.argv[1]
def rows(p):
    lines = [l.strip().split(",") for l in open(p) if l.strip()]
    return lines[0], [dict(zip(lines[0], map(float, l))) for l in lines[1:]]
hp, plain = rows(d + "/plain.csv")
hd, db = rows(d + "/db.csv")
_, truth = rows(d + "/t.csv")
assert len(plain) == 3, plain
assert hd[:-1] == hp and hd[-1] == "parent", hd
assert len(db) == 5, db
parents = sorted(int(s["parent"]) for s in db)
assert parents.count(0) == 1, parents
for p in set(parents) - {0}:
    kids = [i for i, s in enumerate(db) if s["parent"] == p]
    assert len(kids) == 2 and kids[0] + 1 == p, (p, kids)
for t in truth:
    dist = min(math.hypot(s["x_px"] - t["x_px"], s["y_px"] - t["y_px"]) for s in db)
    assert dist < 0.3, (t, dist)
lone = [s for s in db if s["parent"] == 0][0]
assert any(all(lone[k] == s[k] for k in hp) for s in plain), lone
r = json.load(open(d + "/db.json"))
assert r["deblend"]["on"] and r["deblend"]["blends"] == 2 and r["deblend"]["children"] == 4, r
assert r["deblend"]["levels"] == 32 and r["deblend"]["contrast"] == 0.005, r
hr, dbr = rows(d + "/dbr.csv")
assert hr[-5:] == ["refine_flags", "flux_adu", "sigma_px", "background_adu", "parent"], hr
assert [s["parent"] for s in dbr] == [s["parent"] for s in db]
# the children of each blend fitted jointly (refine_flags 32), as close to their stars as the
# deblended centroids or closer
for s in dbr:
    assert (int(s["refine_flags"]) & 32) == (32 if s["parent"] else 0), s
def err(spots):
    return sum(min(math.hypot(s["x_px"] - t["x_px"], s["y_px"] - t["y_px"]) for s in spots)
               for t in truth)
assert err(dbr) < err(db), (err(dbr), err(db))
hc, c1 = rows(d + "/c1.csv")
assert len(c1) == 3 and all(s["parent"] == 0 for s in c1), c1
print("ok", len(db), "spots")
PY
expect_usage find "$tmp/f.fits" --deblend --3d -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend-levels 16 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend-contrast 0.1 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend --deblend-levels 0 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend --deblend-levels 5000 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend --deblend-contrast -0.5 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend --deblend-contrast 1.5 -o "$tmp/x.csv"
expect_usage find "$tmp/f.fits" --deblend --deblend-contrast nan -o "$tmp/x.csv"
echo "PASS"
