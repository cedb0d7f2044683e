#!/usr/bin/env bash
# `spotwave find` end to end: star fields from `spotwave sim stars` (FITS and PGM, with their
# truth CSVs) give a spots CSV with the documented header that finds every bright, isolated star
# of the truth (within 1.5 px) for both algorithms; the JSON report parses and its counts match the
# CSV and the strong-mask file; --3d adds the z columns and joins a star field repeated over two
# frames; two inputs number their frames across both; --first/--count pick frames; the default
# backend gives the CPU's table; an Eiger-like HDF5 file (written with python3's h5py, when it
# can be imported; skipped otherwise) gives the FITS frames' spots. Exit codes: 2 with one line
# pointing at --help for usage errors, 1 with one clear line for inputs that cannot be used.
# Usage: test_cli_find.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the tables"

cat >"$tmp/check.py" <<'EOF'
import json, math, sys

HEADER = "frame,x_px,y_px,x_var,y_var,intensity,npix,bbox_x0,bbox_x1,bbox_y0,bbox_y1"

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    return names, [dict(zip(names, map(float, l.split(",")))) for l in lines[1:]]

def read_fits(path):
    """(bitpix, [naxis1, naxis2, ...], data bytes) of a FITS primary HDU."""
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
    naxes = [int(cards["NAXIS%d" % (k + 1)]) for k in range(int(cards["NAXIS"]))]
    n = 1
    for a in naxes:
        n *= a
    bitpix = int(cards["BITPIX"])
    bzero = float(cards.get("BZERO", "0"))
    return bitpix, naxes, bzero, data[pos:pos + n * abs(bitpix) // 8]

def u16_pixels(path):
    bitpix, naxes, bzero, raw = read_fits(path)
    assert bitpix == 16 and bzero == 32768, (bitpix, bzero)
    v = [int.from_bytes(raw[i:i + 2], "big", signed=True) + 32768 for i in range(0, len(raw), 2)]
    return naxes, v

def snr(f, sigma, sky):
    return f / math.sqrt(f + 4 * math.pi * sigma * sigma * sky)

cmd = sys.argv[1]
if cmd == "header":  # the documented header, exactly (plus the z columns with --3d)
    want = HEADER + (",z_var,bbox_z0,bbox_z1" if len(sys.argv) > 3 else "")
    got = open(sys.argv[2]).readline().strip()
    assert got == want, got
elif cmd == "truth":  # every bright isolated star has a spot within 1.5 px in the frame given
    _, spots = read_csv(sys.argv[2])
    _, truth = read_csv(sys.argv[3])
    frame, sigma, sky, w, h = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
    spots = [s for s in spots if round(s["frame"]) == frame]
    checked = 0
    for i, t in enumerate(truth):
        # SNR 30 (the unit tests find every star from SNR 20), >= 4 px from the edge, no other
        # star within 10 px (two bright stars closer than that can merge into one spot).
        if snr(t["flux_e"], sigma, sky) < 30:
            continue
        if min(t["x_px"] + 0.5, w - 0.5 - t["x_px"], t["y_px"] + 0.5, h - 0.5 - t["y_px"]) < 4:
            continue
        if any(j != i and math.hypot(u["x_px"] - t["x_px"], u["y_px"] - t["y_px"]) < 10
               for j, u in enumerate(truth)):
            continue
        checked += 1
        d = min((math.hypot(s["x_px"] - t["x_px"], s["y_px"] - t["y_px"]) for s in spots),
                default=1e9)
        assert d <= 1.5, ("star not found", t, d)
    assert checked >= 20, checked
    # every spot is near a star (no spots from noise)
    for s in spots:
        assert min(math.hypot(s["x_px"] - t["x_px"], s["y_px"] - t["y_px"]) for t in truth) < 6, s
elif cmd == "json":  # the report parses, agrees with the CSV, and passes a condition
    r = json.load(open(sys.argv[2]))
    _, spots = read_csv(sys.argv[3])
    assert r["command"] == "find", r
    assert r["spots"] == len(spots), (r["spots"], len(spots))
    assert r["components"] == r["spots"] + r["rejected"]["small"] + r["rejected"]["large"] + r["rejected"]["separation"], r
    assert 0 < r["strong_pixels"] < r["valid_pixels"], r
    assert eval(sys.argv[4]), r
elif cmd == "frames":  # table a's rows of frame fa equal table b's rows of frame fb
    _, a = read_csv(sys.argv[2])
    _, b = read_csv(sys.argv[4])
    fa, fb = int(sys.argv[3]), int(sys.argv[5])
    ra = [r for r in a if r["frame"] == fa]
    rb = [r for r in b if r["frame"] == fb]
    assert len(ra) == len(rb) and len(ra) > 0, (len(ra), len(rb))
    for x, y in zip(ra, rb):
        x = dict(x, frame=0)
        y = dict(y, frame=0)
        assert x == y, (x, y)
elif cmd == "only":  # every row has a frame in the list given
    _, a = read_csv(sys.argv[2])
    frames = set(int(f) for f in sys.argv[3].split(","))
    assert a and all(int(r["frame"]) in frames for r in a), frames
    assert set(int(r["frame"]) for r in a) == frames
elif cmd == "joined":  # --3d over the same field twice: 2-D spots of frame 0, each over [0, 2)
    _, a = read_csv(sys.argv[2])
    _, one = read_csv(sys.argv[3])
    assert len(a) == len(one), (len(a), len(one))
    for r, s in zip(a, one):
        assert r["bbox_z0"] == 0 and r["bbox_z1"] == 2 and abs(r["frame"] - 0.5) < 1e-6, r
        assert r["npix"] == 2 * s["npix"] and abs(r["intensity"] - 2 * s["intensity"]) < 1e-6, (r, s)
        assert abs(r["x_px"] - s["x_px"]) < 2e-4 and abs(r["y_px"] - s["y_px"]) < 2e-4, (r, s)
        assert r["z_var"] > 0, r
elif cmd == "single3d":  # --3d over one frame: z columns, frame 0 and [0, 1)
    _, a = read_csv(sys.argv[2])
    # z_var: the 1/12 frame^2 of one frame's extent over the counts (find.h), as x_var has;
    # the CSV keeps 6 digits
    assert a and all(r["bbox_z0"] == 0 and r["bbox_z1"] == 1 and r["frame"] == 0 and
                     abs(r["z_var"] - 1.0 / 12.0 / r["intensity"]) <= 1e-5 * r["z_var"] for r in a)
elif cmd == "algorithms":  # basic vs extended: both find the bright stars; the basic spots are cores
    _, basic = read_csv(sys.argv[2])
    _, ext = read_csv(sys.argv[3])
    smaller, pairs = 0, 0
    for s in ext:
        d, b = min(((math.hypot(s["x_px"] - t["x_px"], s["y_px"] - t["y_px"]), t) for t in basic),
                   key=lambda p: p[0], default=(1e9, None))
        if d < 1.0 and s["npix"] >= 20:
            pairs += 1
            smaller += b["npix"] < s["npix"]
    assert pairs >= 20 and smaller >= 0.9 * pairs, (pairs, smaller)
elif cmd == "mask":  # the strong-mask FITS: 8-bit, the frames' size, 0/1, as many 1s as strong pixels
    bitpix, naxes, _, raw = read_fits(sys.argv[2])
    r = json.load(open(sys.argv[3]))
    want = [int(x) for x in sys.argv[4].split(",")]
    assert bitpix == 8 and naxes[:len(want)] == want and all(a == 1 for a in naxes[len(want):]), (bitpix, naxes)
    assert set(raw) <= {0, 1}, set(raw)
    assert sum(raw) == r["strong_pixels"], (sum(raw), r["strong_pixels"])
elif cmd == "h5":  # an Eiger-like HDF5 file of the FITS frames, with h5py
    import h5py
    frames = []
    for p in sys.argv[3:]:
        naxes, v = u16_pixels(p)
        frames.append(v)
    w, h = naxes[0], naxes[1]
    with h5py.File(sys.argv[2], "w") as f:
        d = f.create_dataset("/entry/data/data", (len(frames), h, w), dtype="uint16",
                             chunks=(1, h, w))
        for k, v in enumerate(frames):
            d[k] = [v[y * w:(y + 1) * w] for y in range(h)]
else:
    raise SystemExit("unknown check " + cmd)
EOF
check() { python3 "$tmp/check.py" "$@"; }

# ---------------------------------------------------------------- frames with known stars
# 256 x 256, 80 stars each, magnitudes 4.5..10 with the default zero point 1e6 e- (fluxes
# ~16000..100 e-), Gaussian PSF sigma 1.2 px, sky 10 e-/px, Poisson noise, gain 1, 16-bit.
sim=(--backend cpu sim stars --random 80 --size 256x256 --sigma 1.2 --sky-e 10 --mag-range "4.5,10")
expect 0 "${sim[@]}" --seed 11 --out "$tmp/a.fits" --truth "$tmp/a.csv"
expect 0 "${sim[@]}" --seed 12 --out "$tmp/b.fits" --truth "$tmp/b.csv"
expect 0 "${sim[@]}" --seed 11 --out "$tmp/a.pgm"
expect 0 --backend cpu sim stars --random 20 --size 256x200 --seed 13 --out "$tmp/small.fits"
expect 0 --backend cpu sim stars --random 20 --size 256x256 --bits 8 --seed 14 --out "$tmp/a8.fits"
truth_args=(1.2 10 256 256)

# ---------------------------------------------------------------- one frame
expect 0 --backend cpu find "$tmp/a.fits" --out "$tmp/s.csv"
[[ -z $err ]] || fail "find wrote to stderr on success: $err"
check header "$tmp/s.csv" || fail "spots header"
check truth "$tmp/s.csv" "$tmp/a.csv" 0 "${truth_args[@]}" || fail "the default algorithm missed stars"

# Standard output: the same table.
expect 0 --backend cpu find "$tmp/a.fits"
printf '%s\n' "$out" >"$tmp/s_stdout.csv"
cmp -s "$tmp/s.csv" "$tmp/s_stdout.csv" || fail "the table on stdout differs from --out"

# The default backend (the GPU where there is one) gives the CPU's table.
expect 0 find "$tmp/a.fits" --out "$tmp/s_auto.csv"
cmp -s "$tmp/s.csv" "$tmp/s_auto.csv" || fail "the default backend's table differs from the CPU's"

# The same pixels as PGM: the same table.
expect 0 --backend cpu find "$tmp/a.pgm" --out "$tmp/s_pgm.csv"
cmp -s "$tmp/s.csv" "$tmp/s_pgm.csv" || fail "PGM and FITS of the same frame differ"

# --json: parses, counts agree with the table.
expect 0 --backend cpu find "$tmp/a.fits" --out "$tmp/s_j.csv" --json
printf '%s\n' "$out" >"$tmp/s.json"
cmp -s "$tmp/s.csv" "$tmp/s_j.csv" || fail "--json changed the table"
check json "$tmp/s.json" "$tmp/s_j.csv" 'r["frames"] == 1 and r["first_frame"] == 0 and r["valid_pixels"] == 65536 and r["algorithm"] == "dispersion_extended" and r["kernel_size"] == [3, 3] and r["connectivity"] == 4 and r["three_d"] is False and r["frame_size"] == [256, 256] and r["pixel_type"] == "u16" and r["backend"] == "cpu" and r["inputs"][0].endswith("a.fits") and r["out"].endswith("s_j.csv")' ||
    fail "JSON report: $out"

# --algorithm dispersion: also every bright star; its spots are the stars' cores (its local
# mean includes the star), so smaller than the extended algorithm's.
expect 0 --backend cpu find "$tmp/a.fits" --algorithm dispersion --out "$tmp/s_basic.csv" --json
printf '%s\n' "$out" >"$tmp/s_basic.json"
check json "$tmp/s_basic.json" "$tmp/s_basic.csv" 'r["algorithm"] == "dispersion"' || fail "basic JSON"
check truth "$tmp/s_basic.csv" "$tmp/a.csv" 0 "${truth_args[@]}" || fail "dispersion missed stars"
check algorithms "$tmp/s_basic.csv" "$tmp/s.csv" || fail "dispersion vs dispersion_extended"
cmp -s "$tmp/s.csv" "$tmp/s_basic.csv" && fail "--algorithm dispersion changed nothing"

# Options reach the library: a larger minimum spot size keeps fewer spots, counted as small.
expect 0 --backend cpu find "$tmp/a.fits" --min-spot-size 30 --out "$tmp/s_min.csv" --json
printf '%s\n' "$out" >"$tmp/s_min.json"
check json "$tmp/s_min.json" "$tmp/s_min.csv" 'r["min_spot_size"] == 30 and r["rejected"]["small"] > 0 and r["spots"] < '"$(($(wc -l <"$tmp/s.csv") - 1))" ||
    fail "--min-spot-size 30: $out"
expect 0 --backend cpu find "$tmp/a.fits" --kernel-size 2,4 --connectivity 8 --sigma-b 5 \
    --sigma-s 2.5 --min-local 0 --gain 1.5 --global-threshold 12 --out "$tmp/s_opt.csv" --json
printf '%s\n' "$out" >"$tmp/s_opt.json"
check json "$tmp/s_opt.json" "$tmp/s_opt.csv" 'r["kernel_size"] == [2, 4] and r["connectivity"] == 8 and r["sigma_b"] == 5 and r["sigma_s"] == 2.5 and r["min_local"] == 0 and r["gain"] == 1.5 and r["global_threshold"] == 12' ||
    fail "options in the report: $out"

# --strong-mask: an 8-bit FITS image of 0/1 with as many 1s as the report's strong pixels.
expect 0 --backend cpu find "$tmp/a.fits" --out "$tmp/s_m.csv" --strong-mask "$tmp/strong.fits" --json
printf '%s\n' "$out" >"$tmp/s_m.json"
[[ -s $tmp/strong.fits ]] || fail "--strong-mask wrote no file"
check mask "$tmp/strong.fits" "$tmp/s_m.json" 256,256 || fail "the strong-mask file"

# A mask file of the right size: masked pixels hold no spot. The mask blanks the left half.
python3 - "$tmp/a.fits" "$tmp/halfmask.pgm" <<'EOF'
import sys
w, h = 256, 256
rows = bytes(0 if x < 128 else 1 for x in range(w)) * h
open(sys.argv[2], "wb").write(b"P5\n%d %d\n255\n" % (w, h) + rows)
EOF
expect 0 --backend cpu find "$tmp/a.fits" --mask "$tmp/halfmask.pgm" --out "$tmp/s_half.csv" --json
printf '%s\n' "$out" >"$tmp/s_half.json"
check json "$tmp/s_half.json" "$tmp/s_half.csv" 'r["valid_pixels"] == 128 * 256' || fail "mask: $out"
python3 - "$tmp/s_half.csv" <<'EOF' || fail "a spot in the masked half"
import sys
rows = [l.split(",") for l in open(sys.argv[1])][1:]
assert rows and all(int(r[7]) >= 128 for r in rows), rows
EOF

# ---------------------------------------------------------------- several frames
# Two inputs: frames 0 (a) and 1 (b), each with the spots it has alone.
expect 0 --backend cpu find "$tmp/b.fits" --out "$tmp/sb.csv"
expect 0 --backend cpu find "$tmp/a.fits" "$tmp/b.fits" --out "$tmp/ab.csv" --json
printf '%s\n' "$out" >"$tmp/ab.json"
check json "$tmp/ab.json" "$tmp/ab.csv" 'r["frames"] == 2 and r["valid_pixels"] == 2 * 65536 and len(r["inputs"]) == 2' ||
    fail "two inputs: $out"
check frames "$tmp/ab.csv" 0 "$tmp/s.csv" 0 || fail "frame 0 of two inputs"
check frames "$tmp/ab.csv" 1 "$tmp/sb.csv" 0 || fail "frame 1 of two inputs"
check truth "$tmp/ab.csv" "$tmp/b.csv" 1 "${truth_args[@]}" || fail "stars of frame 1"
# --first / --count.
expect 0 --backend cpu find "$tmp/a.fits" "$tmp/b.fits" --first 1 --out "$tmp/f1.csv" --json
printf '%s\n' "$out" >"$tmp/f1.json"
check only "$tmp/f1.csv" 1 || fail "--first 1"
check frames "$tmp/f1.csv" 1 "$tmp/sb.csv" 0 || fail "--first 1 rows"
check json "$tmp/f1.json" "$tmp/f1.csv" 'r["first_frame"] == 1 and r["frames"] == 1' || fail "--first 1: $out"
expect 0 --backend cpu find "$tmp/a.fits" "$tmp/b.fits" --count 1 --out "$tmp/c1.csv"
check only "$tmp/c1.csv" 0 || fail "--count 1"
expect 0 --backend cpu find "$tmp/a.fits" "$tmp/b.fits" "$tmp/a.fits" --first 1 --count 2 \
    --out "$tmp/f1c2.csv"
check only "$tmp/f1c2.csv" 1,2 || fail "--first 1 --count 2"
check frames "$tmp/f1c2.csv" 2 "$tmp/s.csv" 0 || fail "--first 1 --count 2: frame 2"
# Strong masks of two frames: a cube (or frames stacked) of 256 x 256 planes.
expect 0 --backend cpu find "$tmp/a.fits" "$tmp/b.fits" --out "$tmp/ab2.csv" \
    --strong-mask "$tmp/strong2.fits" --json
printf '%s\n' "$out" >"$tmp/ab2.json"
check mask "$tmp/strong2.fits" "$tmp/ab2.json" 256,256,2 || fail "the strong masks of two frames"

# --3d: the z columns; one frame is a plain 2-D result; the same field twice joins into spots
# over frames [0, 2) with twice the pixels and intensity, at frame 0.5.
expect 0 --backend cpu find "$tmp/a.fits" --3d --out "$tmp/z1.csv"
check header "$tmp/z1.csv" 3d || fail "--3d header"
check single3d "$tmp/z1.csv" || fail "--3d on one frame"
expect 0 --backend cpu find "$tmp/a.fits" "$tmp/a.fits" --3d --max-spot-size 0 --out "$tmp/z2.csv" --json
printf '%s\n' "$out" >"$tmp/z2.json"
check header "$tmp/z2.csv" 3d || fail "--3d header (two frames)"
# (a star's 2-D spot, doubled, must pass the filters as the 2-D one did: the peak stays, the
# centroid stays, the size doubles; --max-spot-size 0 lifts the size limit)
expect 0 --backend cpu find "$tmp/a.fits" --max-spot-size 0 --out "$tmp/s_nomax.csv"
check joined "$tmp/z2.csv" "$tmp/s_nomax.csv" || fail "--3d over the same frame twice"
check json "$tmp/z2.json" "$tmp/z2.csv" 'r["three_d"] is True and r["frames"] == 2' || fail "--3d JSON: $out"

# ---------------------------------------------------------------- HDF5 (Eiger-like), with h5py
if python3 -c 'import h5py' 2>/dev/null; then
    check h5 "$tmp/ab.h5" "$tmp/a.fits" "$tmp/b.fits" || fail "writing the HDF5 file"
    expect 0 --backend cpu find "$tmp/ab.h5" --out "$tmp/h5.csv"
    cmp -s "$tmp/ab.csv" "$tmp/h5.csv" || fail "HDF5 and FITS frames give different spots"
    expect 0 --backend cpu find "$tmp/ab.h5" --first 1 --out "$tmp/h5_1.csv"
    cmp -s "$tmp/f1.csv" "$tmp/h5_1.csv" || fail "HDF5 --first 1"
else
    echo "note: python3 has no h5py: the HDF5 input is not tested here"
fi

# ---------------------------------------------------------------- help
expect 0 find --help
for o in --algorithm dispersion_extended --kernel-size --sigma-b --sigma-s --global-threshold \
    --min-local --gain --gain-map --mask --overload --connectivity --3d --min-spot-size \
    --max-spot-size --max-separation --max-strong-fraction --first --count --out --strong-mask \
    --json HDF5 FITS PGM bbox_x0; do
    [[ $out == *"$o"* ]] || fail "find --help does not mention $o"
done
[[ $out == *"frame,x_px,y_px,x_var,y_var,intensity,npix"* ]] || fail "find --help: the columns"

# ---------------------------------------------------------------- usage errors (2)
bad=(
    "find"
    "find $tmp/a.fits --wat"
    "find $tmp/a.fits --kernel-size 0"
    "find $tmp/a.fits --kernel-size 16"
    "find $tmp/a.fits --kernel-size 2.5"
    "find $tmp/a.fits --kernel-size abc"
    "find $tmp/a.fits --connectivity 6"
    "find $tmp/a.fits --json"
    "find $tmp/a.fits --json --out -"
    "find $tmp/a.fits --algorithm fancy"
    "find $tmp/a.fits --min-local 1"
    "find $tmp/a.fits --sigma-b -1"
    "find $tmp/a.fits --gain 0"
    "find $tmp/a.fits --min-spot-size 10 --max-spot-size 5"
    "find $tmp/a.fits --first -1"
    "find $tmp/a.fits --count 0"
    "find $tmp/a.fits --window sideways"
)
for args in "${bad[@]}"; do
    # shellcheck disable=SC2086
    expect_usage $args
done

# ---------------------------------------------------------------- failures while running (1)
fail1() { # ARGS... : exit 1, one line on stderr naming the command, no output file left behind
    expect 1 --backend cpu find "$@" --out "$tmp/never.csv"
    expect_one_line find "$@"
    [[ $err == "spotwave find: "* ]] || fail "'$*': stderr: $err"
    [[ ! -e $tmp/never.csv ]] || fail "'$*' left an output file"
}
fail1 "$tmp/missing.fits"
[[ $err == *"missing.fits"* ]] || fail "missing file not named: $err"
printf 'hello\n' >"$tmp/text.fits"
fail1 "$tmp/text.fits"
[[ $err == *"text.fits"* ]] || fail "non-image file not named: $err"
head -c 3000 "$tmp/a.fits" >"$tmp/trunc.fits"
fail1 "$tmp/trunc.fits"
fail1 "$tmp/a.fits" "$tmp/small.fits"
[[ $err == *"small.fits"* ]] || fail "inputs of different sizes: $err"
fail1 "$tmp/a.fits" "$tmp/a8.fits"
fail1 "$tmp/a.fits" --mask "$tmp/small.fits"
[[ $err == *"small.fits"* ]] || fail "mask of the wrong size: $err"
fail1 "$tmp/a.fits" --mask "$tmp/missing_mask.fits"
fail1 "$tmp/a.fits" --gain-map "$tmp/small.fits"
fail1 "$tmp/a.fits" --first 1
fail1 "$tmp/a.fits" "$tmp/b.fits" --first 2
fail1 "$tmp/a.fits" --count 2
fail1 "$tmp/a.fits" "$tmp/b.fits" --first 1 --count 2
# A frame that is all bright texture: more than max_strong_fraction strong, named.
python3 - "$tmp/texture.pgm" <<'EOF'
import random, sys
random.seed(5)
w, h = 64, 64
body = b"".join(random.randrange(0, 60000).to_bytes(2, "big") for _ in range(w * h))
open(sys.argv[1], "wb").write(b"P5\n%d %d\n65535\n" % (w, h) + body)
EOF
fail1 "$tmp/texture.pgm"
[[ $err == *"frame 0"* ]] || fail "the strong-fraction error does not name the frame: $err"
expect 0 --backend cpu find "$tmp/texture.pgm" --max-strong-fraction 0 --out "$tmp/tex.csv"
# An output that cannot be written.
expect 1 --backend cpu find "$tmp/a.fits" --out "$tmp/no/such/dir/s.csv"
expect_one_line find unwritable

echo "ok"
