#!/usr/bin/env bash
# Files people open: every FITS file the command writes carries BUNIT, its pixel scale (WCS or
# XPIXSZ) and the parameters and command line that made it, read here from the 2880-byte header
# blocks by hand; sim stars --sky's celestial WCS puts the catalogue's stars where the simulator
# drew them; gzip-compressed (.fits.gz) and tile-compressed (.fz, written here by hand as the FITS
# standard section 10 lays them out) inputs give the same results as the plain file; sabre --map
# writes PNG as the other --map options do; the demo's pictures have titles and colour bars.
# Usage: test_cli_files.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

cat >"$tmp/files.py" <<'EOF'
import csv, gzip, math, random, struct, sys, zlib


def hdus(path):
    """[(cards, data offset)] of the file's HDUs; cards: the header's 80-character cards."""
    d = open(path, "rb").read()
    if d[:2] == b"\x1f\x8b":
        d = gzip.decompress(d)
    out, pos = [], 0
    while pos < len(d):
        cards = []
        while True:
            block = d[pos:pos + 2880]
            assert len(block) == 2880, "truncated header"
            pos += 2880
            cards += [block[i:i + 80].decode("ascii") for i in range(0, 2880, 80)]
            if any(c[:8] == "END     " for c in cards):
                break
        cards = cards[:[c[:8] for c in cards].index("END     ")]
        h = parse(cards)
        n = 0
        if h.get("NAXIS", 0) > 0:
            n = abs(h["BITPIX"]) // 8 * h.get("GCOUNT", 1)
            size = 1
            for k in range(1, h["NAXIS"] + 1):
                size *= h["NAXIS%d" % k]
            n *= size + h.get("PCOUNT", 0)
        out.append((h, pos, d))
        pos += (n + 2879) // 2880 * 2880
    return out


def parse(cards):
    h = {"HISTORY": "", "COMMENT": []}
    for c in cards:
        key = c[:8].strip()
        if key == "HISTORY":
            h["HISTORY"] += c[8:].rstrip()  # continued lines join without a break
            continue
        if key == "COMMENT":
            h["COMMENT"].append(c[8:].strip())
            continue
        if c.startswith("HIERARCH "):
            key, c = c[9:c.index("=")].strip(), " " * 8 + c[c.index("="):]
        if c[8:10] != "= ":
            continue
        v = c[10:].strip()
        if v.startswith("'"):
            s, i = "", 1
            while True:
                j = v.index("'", i)
                s += v[i:j]
                if v[j + 1:j + 2] == "'":
                    s, i = s + "'", j + 2
                else:
                    break
            h[key] = s.rstrip()
        else:
            v = v.split("/")[0].strip()
            h[key] = True if v == "T" else False if v == "F" else float(v) if any(
                ch in v for ch in ".EeD") else int(v)
    return h


def header(path):
    return hdus(path)[0][0]


def pixels(path):
    """(w, h, list of the primary image's physical values); BITPIX 8, 16 (+BZERO), -32."""
    h, pos, d = hdus(path)[0]
    w, hh = h["NAXIS1"], h["NAXIS2"]
    n = w * hh * (h["NAXIS3"] if h["NAXIS"] == 3 else 1)
    fmt = {8: "B", 16: "h", -32: "f", 32: "i"}[h["BITPIX"]]
    vals = struct.unpack(">%d%s" % (n, fmt), d[pos:pos + n * struct.calcsize(fmt)])
    z = h.get("BZERO", 0)
    return w, hh, [v + z for v in vals]


cmd = sys.argv[1]
if cmd == "keys":  # keys FITS EXPR: EXPR true of the primary header h
    h = header(sys.argv[2])
    if not eval(sys.argv[3], {"math": math}, {"h": h}):
        raise SystemExit("%s: not %s; header %r" % (sys.argv[2], sys.argv[3], h))
elif cmd == "sky":  # sky CATALOG.csv RA DEC: 60 stars about the boresight, distinct fluxes
    ra0, dec0 = float(sys.argv[3]), float(sys.argv[4])
    rnd = random.Random(5)
    with open(sys.argv[2], "w") as f:
        f.write("ra_deg,dec_deg,flux_e\n")
        for i in range(60):
            # uniform over 0.9 x 0.7 deg of the tangent plane (the image: 0.83 x 0.62 deg)
            xi, eta = math.radians(rnd.uniform(-0.45, 0.45)), math.radians(rnd.uniform(-0.35, 0.35))
            d0 = math.radians(dec0)
            den = math.cos(d0) - eta * math.sin(d0)
            ra = ra0 + math.degrees(math.atan2(xi, den))
            dec = math.degrees(math.atan2(eta * math.cos(d0) + math.sin(d0), math.hypot(xi, den)))
            f.write("%.12f,%.12f,%d\n" % (ra % 360.0, dec, 20000 + 11 * i))
elif cmd == "wcs":  # wcs FITS TRUTH.csv CATALOG.csv MIN_STARS: the TAN WCS vs the catalogue
    h = header(sys.argv[2])
    assert (h["CTYPE1"], h["CTYPE2"]) == ("RA---TAN", "DEC--TAN"), h
    cat = {int(r["flux_e"]): (float(r["ra_deg"]), float(r["dec_deg"]))
           for r in csv.DictReader(open(sys.argv[4]))}
    a0, d0, pp = (math.radians(h[k]) for k in ("CRVAL1", "CRVAL2", "LONPOLE"))
    worst, n = 0.0, 0
    for r in csv.DictReader(open(sys.argv[3])):
        # pixel -> intermediate world coordinates -> native spherical (TAN) -> celestial,
        # Calabretta & Greisen (2002) A&A 395, 1077, Eqs. 2, 12, 54, 2 of paper I
        dx = float(r["x_px"]) + 1 - h["CRPIX1"]
        dy = float(r["y_px"]) + 1 - h["CRPIX2"]
        x = h["CD1_1"] * dx + h["CD1_2"] * dy
        y = h["CD2_1"] * dx + h["CD2_2"] * dy
        phi = math.atan2(x, -y)
        theta = math.atan2(180.0 / math.pi, math.hypot(x, y))
        ra = a0 + math.atan2(-math.cos(theta) * math.sin(phi - pp),
                             math.sin(theta) * math.cos(d0) -
                             math.cos(theta) * math.sin(d0) * math.cos(phi - pp))
        dec = math.asin(math.sin(theta) * math.sin(d0) +
                        math.cos(theta) * math.cos(d0) * math.cos(phi - pp))
        tra, tdec = (math.radians(v) for v in cat[int(float(r["flux_e"]))])
        hav = (math.sin((dec - tdec) / 2) ** 2 +
               math.cos(dec) * math.cos(tdec) * math.sin((ra - tra) / 2) ** 2)
        worst = max(worst, math.degrees(2 * math.asin(math.sqrt(hav))) * 3600)
        n += 1
    assert n >= int(sys.argv[5]), ("stars on the image", n)
    assert worst < 1e-4, ("worst offset, arcsec", worst)
elif cmd == "gzip":  # gzip SRC DST
    open(sys.argv[3], "wb").write(gzip.compress(open(sys.argv[2], "rb").read()))
elif cmd == "fpack":  # fpack SRC.fits DST.fz ROWS: a u16 image as GZIP_1 tiles of ROWS rows
    w, hh, vals = pixels(sys.argv[2])
    rows = int(sys.argv[4])
    tiles, heap = [], b""
    for y0 in range(0, hh, rows):
        tile = vals[y0 * w:min(hh, y0 + rows) * w]
        # stored values (physical - BZERO) as big-endian 16-bit integers, then gzip
        raw = struct.pack(">%dh" % len(tile), *(int(v) - 32768 for v in tile))
        z = gzip.compress(raw)
        tiles.append((len(z), len(heap)))
        heap += z

    def block(cards):
        text = "".join(c.ljust(80) for c in cards + ["END"])
        return (text + " " * (-len(text) % 2880)).encode("ascii")

    prim = block(["SIMPLE  =                    T", "BITPIX  =                   16",
                  "NAXIS   =                    0", "EXTEND  =                    T"])
    table = b"".join(struct.pack(">ii", n, off) for n, off in tiles)
    maxlen = max(n for n, _ in tiles)
    ext = block(["XTENSION= 'BINTABLE'", "BITPIX  =                    8",
                 "NAXIS   =                    2", "NAXIS1  =                    8",
                 "NAXIS2  = %20d" % len(tiles), "PCOUNT  = %20d" % len(heap),
                 "GCOUNT  =                    1", "TFIELDS =                    1",
                 "TTYPE1  = 'COMPRESSED_DATA'", "TFORM1  = '1PB(%d)'" % maxlen,
                 "ZIMAGE  =                    T", "ZBITPIX =                   16",
                 "ZNAXIS  =                    2", "ZNAXIS1 = %20d" % w,
                 "ZNAXIS2 = %20d" % hh, "ZTILE1  = %20d" % w, "ZTILE2  = %20d" % rows,
                 "ZCMPTYPE= 'GZIP_1  '", "BZERO   =                32768",
                 "BSCALE  =                    1"])
    data = table + heap
    data += b"\0" * (-len(data) % 2880)
    open(sys.argv[3], "wb").write(prim + ext + data)
elif cmd == "samepix":  # samepix A.fits B.fits: the same primary image values
    a, b = pixels(sys.argv[2]), pixels(sys.argv[3])
    assert a == b, "the images differ"
elif cmd == "png":  # png FILE EXPR: EXPR true of w, h, colour (the IHDR's colour type)
    d = open(sys.argv[2], "rb").read()
    assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR", sys.argv[2]
    w, h, depth, colour = struct.unpack(">IIBB", d[16:26])
    if not eval(sys.argv[3], {}, {"w": w, "h": h, "colour": colour}):
        raise SystemExit("%s: not %s (w %d, h %d, colour %d)" % (sys.argv[2], sys.argv[3], w, h,
                                                                   colour))
else:
    raise SystemExit("unknown check " + cmd)
EOF
check() { python3 "$tmp/files.py" "$@"; }
B=(--backend cpu)

# ---------------------------------------------------------------- sim stars: units, parameters
expect 0 "${B[@]}" sim stars --random 40 --size 96x80 --sigma 1.5 --gain 2 --bias 100 \
    --read-noise-e 3 --seed 5 --out "$tmp/stars.fits"
check keys "$tmp/stars.fits" "h['BUNIT'] == 'adu' and h['SEED'] == 5 and h['SIGMA'] == 1.5 and \
h['GAIN'] == 2 and h['BIAS'] == 100 and h['RDNOISE'] == 3 and h['NSTARS'] == 40 and \
h['SOURCE'] == 'random' and h['CREATOR'].startswith('spotwave ') and \
h['HISTORY'] == 'command: spotwave --backend cpu sim stars --random 40 --size 96x80 --sigma 1.5 \
--gain 2 --bias 100 --read-noise-e 3 --seed 5 --out $tmp/stars.fits' and 'CTYPE1' not in h" ||
    fail "sim stars: the header"

# --sky: a celestial WCS that puts the catalogue's stars where they were drawn (0.1 mas), in the
# south, and across RA 0 near the north pole with a roll.
for att in "150,-60,25" "359.8,89.2,-70"; do
    IFS=, read -r ra dec _ <<<"$att"
    check sky "$tmp/sky.csv" "$ra" "$dec"
    expect 0 "${B[@]}" sim stars --sky "$tmp/sky.csv" --attitude "$att" --focal-mm 200 \
        --pixel-um 9 --size 320x240 --noise none --bits 32f --out "$tmp/sky.fits" \
        --truth "$tmp/sky_truth.csv"
    check wcs "$tmp/sky.fits" "$tmp/sky_truth.csv" "$tmp/sky.csv" 10 || fail "the WCS at $att"
    check keys "$tmp/sky.fits" "h['XPIXSZ'] == 9 and h['FOCALLEN'] == 200 and \
abs(h['PIXSCALE'] - 9e-3 / 200 * 180 / math.pi * 3600) < 1e-9 and h['RADESYS'] == 'ICRS'" ||
        fail "the pixel scale at $att"
done

# ---------------------------------------------------------------- sim sh and sim eye
expect 0 "${B[@]}" sim sh --grid 6x5 --pitch 16 --size 100x90 --turbulence r0=0.08,L0=20 \
    --diameter-m 4 --seed 9 --out "$tmp/sh.fits" --reference "$tmp/sh_ref.fits"
common="h['BUNIT'] == 'adu' and h['GRIDNX'] == 6 and h['GRIDNY'] == 5 and h['PITCH'] == 16 and \
h['XPIXSZ'] == 5.5 and h['LENSLET'] == 88 and h['SEED'] == 9"
check keys "$tmp/sh.fits" "$common and h['REFFRAME'] is False and h['R0'] == 0.08 and \
h['L0'] == 20 and h['DIAMETER'] == 4 and h['SOURCE'] == 'turbulence' and h['NOISESD'] == 9" ||
    fail "sim sh: the frame"
check keys "$tmp/sh_ref.fits" "$common and h['REFFRAME'] is True and h['NOISESD'] != 9" ||
    fail "sim sh: the reference"
expect 0 "${B[@]}" sim eye --binocular --size 640x320 --grid 20x10 --seed 2 --out "$tmp/eye.fits"
check keys "$tmp/eye.fits" "h['EYES'] == 2 and h['PUPIL'] > 0 and 'EYE2X' in h and \
h['SOURCE'] == 'population' and h['GLOW'] > 0" || fail "sim eye: the header"

# ---------------------------------------------------------------- compressed inputs
# The same u16 frame plain, gzip'd, and as GZIP_1 tiles of 7 rows (not dividing the 80 rows):
# find gives the same spots and strong pixels.
check gzip "$tmp/stars.fits" "$tmp/stars.fits.gz"
check fpack "$tmp/stars.fits" "$tmp/stars.fz" 7
for f in stars.fits stars.fits.gz stars.fz; do
    expect 0 "${B[@]}" find "$tmp/$f" --gain 2 --out "$tmp/$f.csv" --strong-mask "$tmp/$f.mask.fits"
    cmp -s "$tmp/stars.fits.csv" "$tmp/$f.csv" || fail "find: $f gives other spots than stars.fits"
    check samepix "$tmp/stars.fits.mask.fits" "$tmp/$f.mask.fits" ||
        fail "find: $f gives other strong pixels"
done
check keys "$tmp/stars.fz.mask.fits" "h['BUNIT'] == '' and h['GAIN'] == 2 and \
h['SIGMAB'] == 6 and h['SIGMAS'] == 3 and h['FRAME0'] == 0 and 'stars.fz' in h['HISTORY']" ||
    fail "find --strong-mask: the header"
printf 'not gzip data at all' | gzip -c | head -c 12 >"$tmp/cut.fits.gz"
expect 1 "${B[@]}" find "$tmp/cut.fits.gz" --out "$tmp/x.csv"
expect_one_line "${B[@]}" find "$tmp/cut.fits.gz"
[[ $err == *gzip* ]] || fail "a truncated .gz: $err"

# ---------------------------------------------------------------- maps
# sabre: FITS with the array's coordinates, PNG like the other --map pictures.
python3 - "$tmp/tilt.csv" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write("ix,iy,dx_rad,dy_rad\n")
    for iy in range(8):
        for ix in range(8):
            f.write("%d,%d,%g,%g\n" % (ix, iy, 1e-3, -2e-3 + 1e-4 * ix))
EOF
expect 0 "${B[@]}" sabre "$tmp/tilt.csv" --lenslet-um 150 --map "$tmp/w.fits" --map-size 64
check keys "$tmp/w.fits" "h['BUNIT'] == 'um' and h['CUNIT1'] == 'um' and \
h['CDELT1'] == 150 * 8 / 64 and h['CRPIX1'] == 0.5 and h['CRVAL1'] == -75 and \
h['METHOD'] == 'dsabre' and h['GRIDNX'] == 8 and h['NVALID'] == 64 and h['LENSLET'] == 150" ||
    fail "sabre --map: the FITS header"
expect 0 "${B[@]}" sabre "$tmp/tilt.csv" --map "$tmp/w_pitch.fits" --map-size 32
check keys "$tmp/w_pitch.fits" "h['BUNIT'] == '' and h['CUNIT1'] == '' and h['CDELT1'] == 0.25" ||
    fail "sabre --map without --lenslet-um: the FITS header"
expect 0 "${B[@]}" sabre "$tmp/tilt.csv" --lenslet-um 150 --map "$tmp/w.png" --map-size 64
check png "$tmp/w.png" "colour == 6 and w > 64 + 20 and h > 64" ||
    fail "sabre --map PNG: RGBA with a colour bar and a title"
expect_usage sabre "$tmp/tilt.csv" --map "$tmp/w.jpg"

# fit: a cube of wavefront maps over the pupil in millimetres.
printf 'n,m,coef_um\n2,0,0.3\n2,2,0.1\n' >"$tmp/z.csv"
geom=(--pitch 24 --grid 12x12 --origin 2,2)
expect 0 "${B[@]}" sim sh --zernike "$tmp/z.csv" "${geom[@]}" --size 300x300 --pupil-mm 1.2 \
    --noise none --bits 32f --out "$tmp/a.fits" --reference "$tmp/aref.fits"
expect 0 "${B[@]}" centroid "$tmp/a.fits" "${geom[@]}" --reference "$tmp/aref.fits" \
    --out "$tmp/c.csv" --slopes "$tmp/s.csv"
expect 0 "${B[@]}" fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.2 --order 3 --map "$tmp/fm.fits" \
    --map-size 50
check keys "$tmp/fm.fits" "h['BUNIT'] == 'um' and h['CTYPE1'] == 'PUPILX' and \
h['CUNIT1'] == 'mm' and abs(h['CDELT1'] - 1.2 / 50) < 1e-15 and h['CRPIX1'] == 25.5 and \
h['PUPIL'] == 1.2 and h['ORDER'] == 3 and h['TERMS'] == 10" || fail "fit --map: the header"
expect 0 "${B[@]}" fit "$tmp/s.csv" "${geom[@]}" --pupil-mm 1.2 --order 3 --map "$tmp/fm.png" \
    --map-size 50
check png "$tmp/fm.png" "colour == 6 and w > 50 and h > 50" || fail "fit --map PNG"

# aberrometry: each eye's map over its pupil at the eye, in millimetres.
grid=(--pitch 32 --grid 20x20 --origin 0,0)
expect 0 "${B[@]}" sim sh --size 640x640 "${grid[@]}" --flux 2000 --wavelength-um 0.78 --bits 8 \
    --gain 1.5 --seed 11 --out "$tmp/ref.pgm"
expect 0 "${B[@]}" sim eye --gain 1.5 --zernike "$tmp/z.csv" --seed 3 --out "$tmp/eye.pgm"
expect 0 "${B[@]}" aberrometry "$tmp/eye.pgm" --reference "$tmp/ref.pgm" "${grid[@]}" \
    --magnification 0.61875 --map "$tmp/am.fits" --out "$tmp/z1.csv"
check keys "$tmp/am.fits" "h['BUNIT'] == 'um' and h['CUNIT1'] == 'mm' and h['EYE'] == 1 and \
abs(h['CDELT1'] * 256 - h['PUPIL']) < 1e-12 and abs(h['PUPIL'] - 5.12) < 0.05 and \
h['MAGNIF'] == 0.61875 and h['TERMS'] == 28 and 'SPHERE' in h" || fail "aberrometry --map: the header"

# loop: the three phase maps over the telescope pupil in metres.
printf 'nx = 8\nmodel = geometric\nframes = 22\nwarmup = 20\nsamples = 4\n' >"$tmp/tiny.cfg"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --maps "$tmp/m_" --report "$tmp/r.csv"
for k in turbulence correction residual; do
    check keys "$tmp/m_$k.fits" "h['BUNIT'] == 'um' and h['MAP'] == '$k' and h['CUNIT1'] == 'm' \
and abs(h['CDELT1'] * 32 - h['DIAMETER']) < 1e-12 and h['GRIDNX'] == 8 and h['FRAME'] == 22 \
and 'R0' in h and 'loop --config' in h['HISTORY']" || fail "loop --maps: $k"
done

# ---------------------------------------------------------------- the demo's files
expect 0 "${B[@]}" demo --out "$tmp/demo" --size 96x64 --seed 3
check keys "$tmp/demo/demo.fits" "h['BUNIT'] == 'adu' and h['SEED'] == 3 and \
h['NSTARS'] == 300 and h['HISTORY'] == 'spotwave demo --seed 3 --size 96x64'" ||
    fail "demo.fits: the header"
check keys "$tmp/demo/demo_sabre.fits" "h['BUNIT'] == 'um' and h['CUNIT1'] == 'm' and \
h['R0'] == 0.15 and h['GRIDNX'] == 64" || fail "demo_sabre.fits: the header"
# demo.png: the 96x64 field with a title above and the colour bar beside it
check png "$tmp/demo/demo.png" "colour == 2 and w > 96 + 30 and h > 64 + 10" ||
    fail "demo.png: no room for a title and a colour bar"
for f in demo_wavefront demo_aberrometry_eye1 demo_eyes; do
    check png "$tmp/demo/$f.png" "w > 256 and h > 256" || fail "$f.png"
done
echo "ok"
