#!/usr/bin/env bash
# `spotwave find` with a diffraction geometry given by options: the CSV gains d_a last (Bragg's law
# at each centroid, checked here in Python) and only then; --convention dials is the default's x
# and y + 0.5 with every other column the same; --d-min leaves no spot at or beyond it; an
# untrusted rectangle and a beam-stop circle leave no spot centroid inside them; --summary has one
# JSON line per frame whose counts and intensity agree with the CSV; --summary-plot is a PNG; the
# JSON report says where each geometry field came from; --3d spots count on DIALS's frame;
# outputs that name inputs are refused;
# masks by d without a complete geometry are a usage error; --panels masks the gap between two
# modules, and every spot lies on one module with the right panel number.
# Usage: test_cli_find_diffraction.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"

sim=(--backend cpu sim stars --random 60 --size 200x180 --sigma 1.2 --sky-e 10 --mag-range "4.5,9")
for i in 1 2 3; do
    expect 0 "${sim[@]}" --seed "$i" --out "$tmp/f$i.fits"
done
frames=("$tmp/f1.fits" "$tmp/f2.fits" "$tmp/f3.fits")
geom=(--wavelength-a 0.9763 --distance-mm 40 --beam-center 95.5,88 --pixel-mm 0.172,0.15)
find=(--backend cpu find "${frames[@]}" --no-progress)

expect 0 "${find[@]}" -o "$tmp/plain.csv"
expect 0 "${find[@]}" -o "$tmp/d.csv" "${geom[@]}"
expect 0 "${find[@]}" -o "$tmp/dials.csv" "${geom[@]}" --convention dials
expect 0 "${find[@]}" -o "$tmp/dmin.csv" "${geom[@]}" --d-min 3.5
expect 0 "${find[@]}" -o "$tmp/shapes.csv" --untrusted-rect 20,90,10,60 \
    --beamstop-circle 150,120,25 --json
cp "$tmp/out" "$tmp/shapes.json"
expect 0 "${find[@]}" -o "$tmp/sum.csv" "${geom[@]}" --summary "$tmp/sum.jsonl" \
    --summary-plot "$tmp/sum.png" --ice-rings --json
cp "$tmp/out" "$tmp/sum.json"
expect 0 "${find[@]}" -o "$tmp/nogeom.csv" --summary "$tmp/nogeom.jsonl"
expect 0 "${find[@]}" -o "$tmp/panels.csv" "${geom[@]}" --panels 96x180,8,0 --json \
    --out-h5 "$tmp/panels.h5"
cp "$tmp/out" "$tmp/panels.json"

python3 - "$tmp" <<'PY'
import json, math, sys
t = sys.argv[1]
HEADER = "frame,x_px,y_px,x_var,y_var,intensity,npix,bbox_x0,bbox_x1,bbox_y0,bbox_y1"

def read(name):
    lines = [l.strip() for l in open(f"{t}/{name}") if l.strip()]
    return lines[0], [l.split(",") for l in lines[1:]]

def bragg(x, y):  # the geometry above, spotwave's pixel convention
    r = math.hypot((x - 95.5) * 0.172, (y - 88.0) * 0.15)
    if r == 0:
        return math.inf
    return 0.9763 / (2 * math.sin(math.atan2(r, 40.0) / 2))

h, plain = read("plain.csv")
assert h == HEADER, h
h, d = read("d.csv")
assert h == HEADER + ",d_a", h
assert len(d) == len(plain) > 20, (len(d), len(plain))
for p, q in zip(plain, d):
    assert p == q[:-1], (p, q)  # the same spots, d_a appended
    want = bragg(float(q[1]), float(q[2]))
    assert abs(float(q[-1]) - want) < 2e-5 * want, (q, want)

h, dl = read("dials.csv")
assert h == HEADER + ",d_a", h
assert len(dl) == len(d)
for p, q in zip(d, dl):
    for k in (1, 2):
        assert abs(float(q[k]) - (float(p[k]) + 0.5)) < 1e-9, (p, q)
    assert [p[k] for k in range(len(p)) if k not in (1, 2)] == \
           [q[k] for k in range(len(q)) if k not in (1, 2)], (p, q)

_, dm = read("dmin.csv")
assert 0 < len(dm) < len(d), (len(dm), len(d))
assert sum(float(r[-1]) <= 3.5 for r in d) > 0  # some spots lay beyond 3.5 A
assert all(float(r[-1]) > 3.5 for r in dm), [r for r in dm if float(r[-1]) <= 3.5]

_, sh = read("shapes.csv")
for r in sh:
    x, y = float(r[1]), float(r[2])
    assert not (20 <= x < 90 and 10 <= y < 60), r
    assert math.hypot(x - 150, y - 120) >= 25, r
rep = json.load(open(f"{t}/shapes.json"))
gm = rep["geometry_masks"]
assert gm["untrusted_regions"] == 1 and gm["beamstop_circles"] == 1, gm
circle = sum(1 for y in range(180) for x in range(200) if (x - 150) ** 2 + (y - 120) ** 2 < 625)
assert gm["masked_pixels"] == 70 * 50 + circle, gm  # disjoint shapes
assert rep["geometry"]["complete"] is False and rep["geometry"]["from"] == {}, rep["geometry"]

rep = json.load(open(f"{t}/sum.json"))
g = rep["geometry"]
assert g["complete"] is True, g
assert g["from"] == {"wavelength_a": "options", "distance_mm": "options",
                     "beam_center_px": "options", "pixel_mm": "options"}, g
assert g["wavelength_a"] == 0.9763 and g["beam_center_px"] == [95.5, 88], g
assert rep["geometry_masks"]["ice_rings"] is True and rep["geometry_masks"]["masked_pixels"] > 0
_, spots = read("sum.csv")
lines = [json.loads(l) for l in open(f"{t}/sum.jsonl")]
assert [l["frame"] for l in lines] == [0, 1, 2], lines
keys = {"frame", "n_spots", "n_spots_d_lt_4A", "n_spots_d_gt_4A", "total_intensity",
        "resolution_estimate_a"}
for l in lines:
    assert set(l) == keys, l
    mine = [r for r in spots if int(r[0]) == l["frame"]]
    assert l["n_spots"] == len(mine) > 10, (l, len(mine))
    assert l["n_spots_d_lt_4A"] == sum(float(r[-1]) < 4 for r in mine), l
    assert l["n_spots_d_gt_4A"] == sum(float(r[-1]) > 4 for r in mine), l
    assert abs(l["total_intensity"] - sum(float(r[5]) for r in mine)) < 1e-6 * l["total_intensity"]
    est = l["resolution_estimate_a"]
    ds = [float(r[-1]) for r in mine]
    assert est is not None and min(ds) - 0.5 <= est <= max(ds), (est, min(ds), max(ds))
assert open(f"{t}/sum.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"

h, _ = read("nogeom.csv")
assert h == HEADER, h
for l in map(json.loads, open(f"{t}/nogeom.jsonl")):
    assert l["n_spots_d_lt_4A"] is None and l["resolution_estimate_a"] is None, l
# two panels side by side: columns 0-95 and 104-199, 8 dead columns between
h, pn = read("panels.csv")
assert h == HEADER + ",d_a,panel", h
assert {r[-1] for r in pn} == {"0", "1"}, {r[-1] for r in pn}
for r in pn:
    x0, x1 = int(r[7]), int(r[8])
    if r[-1] == "0":
        assert x1 <= 96, r  # never into the gap, never across it
    else:
        assert x0 >= 104, r
rep = json.load(open(f"{t}/panels.json"))["geometry_masks"]
assert rep["panels"] == {"module_px": [96, 180], "gap_px": [8, 0], "count": 2}, rep
assert rep["masked_pixels"] == 8 * 180, rep
assert open(f"{t}/panels.h5", "rb").read(8) == b"\x89HDF\r\n\x1a\n"  # read back: unit test
print("checked")
PY

# --3d: a spot over frames 0 and 1 (z = 0.5) counts on frame floor(z + 0.5) = 1, as DIALS's
# per-image analysis assigns it
expect 0 --backend cpu find "$tmp/f1.fits" "$tmp/f1.fits" --no-progress --3d -o "$tmp/3d.csv" \
    --summary "$tmp/3d.jsonl"
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
rows = [l.split(",") for l in open(f"{t}/3d.csv").read().split()[1:]]
lines = [json.loads(l) for l in open(f"{t}/3d.jsonl")]
assert all(float(r[0]) == 0.5 for r in rows) and len(rows) > 10, rows[:3]
assert [(l["frame"], l["n_spots"]) for l in lines] == [(0, 0), (1, len(rows))], lines
PY

# an incomplete geometry: a warning, no d_a column
expect 0 "${find[@]}" -o "$tmp/part.csv" --wavelength-a 1.0
[[ $err == *"warning: no d_a column"*"distance"* ]] || fail "no warning for a partial geometry: $err"
[[ $(head -1 "$tmp/part.csv") != *d_a* ]] || fail "d_a without a complete geometry"

# outputs that name inputs, or each other, are refused before any work
expect 2 "${find[@]}" -o "$tmp/x.csv" --summary "$tmp/f1.fits"
expect_one_line
[[ $err == *"names the input"* ]] || fail "--summary naming an input: $err"
expect 2 "${find[@]}" -o "$tmp/x.csv" --summary-plot "$tmp/x.csv"
expect_one_line
expect 2 "${find[@]}" -o "$tmp/x.csv" --out-h5 "$tmp/f2.fits"
expect_one_line
expect_usage "${find[@]}" -o "$tmp/x.csv" --d-max 10
expect_usage "${find[@]}" -o "$tmp/x.csv" --convention xds
expect_usage "${find[@]}" -o "$tmp/x.csv" --ice-ring-width 0.004
expect_usage "${find[@]}" -o "$tmp/x.csv" --untrusted-polygon 1,2,3,4
expect_usage "${find[@]}" -o "$tmp/x.csv" --panels 96x0,8,0
expect_usage "${find[@]}" -o "$tmp/x.csv" --panels 96,180
[[ ! -e $tmp/x.csv ]] || fail "a refused run left its output"
echo PASS
