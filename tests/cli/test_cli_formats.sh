#!/usr/bin/env bash
# CBF and TIFF inputs end to end: find gives the same spots on one image written as FITS, TIFF and
# CBF; a CBF written here by an independent writer (byte-offset compression in Python, as the CBF
# specification defines it) with a Pilatus mini-header and negative pixels reads with those pixels
# masked (--json's valid_pixels), its Count_cutoff as the overload and its geometry as find's (a
# spot's d-spacing by Bragg's law from the header's values); a three-page TIFF is three
# frames; centroid gives the same centroids on a TIFF as on the FITS of the same image.
# Usage: test_cli_formats.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
cd "$tmp"

# ---------------------------------------------------------------- one image, three formats
for ext in fits tif cbf; do
    expect 0 -q sim stars --random 25 --size 128x96 --seed 11 --bits 16 --out "s.$ext"
    expect 0 --backend cpu find "s.$ext" --out "s_$ext.csv"
done
cmp s_fits.csv s_tif.csv || fail "find: the TIFF gives other spots than the FITS"
cmp s_fits.csv s_cbf.csv || fail "find: the CBF gives other spots than the FITS"
[[ $(wc -l <s_fits.csv) -gt 10 ]] || fail "find: too few spots to compare ($(wc -l <s_fits.csv))"

# ---------------------------------------------------------------- a CBF from another writer
python3 - <<'PY'
import struct
W, H = 64, 48
img = [[100 + ((x * 7 + y * 13) % 5) for x in range(W)] for y in range(H)]
for dy in range(-2, 3):
    for dx in range(-2, 3):
        img[20 + dy][30 + dx] += 5000 // (1 + dx * dx + dy * dy)
for x in range(W):
    img[40][x] = -2          # a gap between modules
img[20][10] = -1             # a bad pixel
img[5][5] = 2000000          # above the Count_cutoff below: an overload
vals = [v for row in img for v in row]
# byte offset (CBF specification): deltas as int8, else 0x80 + int16, else 0x80 0x8000 + int32
out, prev = bytearray(), 0
for v in vals:
    d = v - prev
    if -127 <= d <= 127:
        out += struct.pack('<b', d)
    elif -32767 <= d <= 32767:
        out += b'\x80' + struct.pack('<h', d)
    else:
        out += b'\x80' + struct.pack('<h', -32768) + struct.pack('<i', d)
    prev = v
hdr = ('# Detector: PILATUS 6M, S/N 60-0000\r\n# Pixel_size 172e-6 m x 172e-6 m\r\n'
       '# Exposure_time 0.0990000 s\r\n# Count_cutoff 1048576 counts\r\n'
       '# Wavelength 0.97625 A\r\n# Detector_distance 0.19000 m\r\n'
       '# Beam_xy (31.50, 24.50) pixels\r\n')
text = ('###CBF: VERSION 1.5\r\n\r\ndata_test\r\n\r\n_array_data.header_convention "PILATUS_1.2"\r\n'
        '_array_data.header_contents\r\n;\r\n' + hdr + ';\r\n\r\n_array_data.data\r\n;\r\n'
        '--CIF-BINARY-FORMAT-SECTION--\r\n'
        'Content-Type: application/octet-stream;\r\n     conversions="x-CBF_BYTE_OFFSET"\r\n'
        'Content-Transfer-Encoding: BINARY\r\nX-Binary-Size: %d\r\nX-Binary-ID: 1\r\n'
        'X-Binary-Element-Type: "signed 32-bit integer"\r\n'
        'X-Binary-Element-Byte-Order: LITTLE_ENDIAN\r\n'
        'X-Binary-Number-of-Elements: %d\r\nX-Binary-Size-Fastest-Dimension: %d\r\n'
        'X-Binary-Size-Second-Dimension: %d\r\nX-Binary-Size-Padding: 0\r\n\r\n'
        % (len(out), W * H, W, H))
tail = b'\r\n--CIF-BINARY-FORMAT-SECTION----\r\n;\r\n\r\n'
open('pil.cbf', 'wb').write(text.encode() + b'\x0c\x1a\x04\xd5' + bytes(out) + tail)
PY
expect 0 --backend cpu find pil.cbf --out pil.csv --json
python3 - "$out" <<'PY' || fail "find on a Pilatus CBF: $out"
import json, sys
r = json.loads(sys.argv[1])
valid = r['valid_pixels']
assert r['pixel_mask_from_file'] is True, 'the negative pixels are not a pixel mask'
assert r['overload'] == 1048576, 'overload %r, not the Count_cutoff' % r['overload']
# the mini-header as find's geometry: Beam_xy (31.5, 24.5) is pixel (31, 24) in spotwave's
# convention (pixel edges at whole numbers in the header, as DIALS reads it)
g = r['geometry']
assert g['complete'] is True, g
assert g['wavelength_a'] == 0.97625 and g['distance_mm'] == 190, g
assert g['beam_center_px'] == [31, 24], g
assert abs(g['pixel_mm'][0] - 0.172) < 1e-12 and abs(g['pixel_mm'][1] - 0.172) < 1e-12, g
assert all(v == 'file' for v in g['from'].values()), g
# 64 gap pixels, one bad pixel, one overloaded pixel
assert valid == 64 * 48 - 64 - 1 - 1, 'valid pixels %r' % valid
PY
python3 - <<'PY' || fail "find on a Pilatus CBF: the spot at (30, 20) or its d-spacing: $(cat pil.csv)"
import csv, math
rows = list(csv.DictReader(open('pil.csv')))
spot = [r for r in rows if abs(float(r['x_px']) - 30) < 0.5 and abs(float(r['y_px']) - 20) < 0.5]
assert len(spot) == 1, rows
# Bragg's law from the header's geometry: d = lambda / (2 sin(theta)), tan(2 theta) = r / D
x, y = float(spot[0]['x_px']), float(spot[0]['y_px'])
rr = math.hypot((x - 31) * 0.172, (y - 24) * 0.172)
d = 0.97625 / (2 * math.sin(0.5 * math.atan2(rr, 190.0)))
assert abs(float(spot[0]['d_a']) - d) < 1e-3 * d, (spot, d)
PY
expect 0 --backend cpu find pil.cbf --out pil_nomask.csv --json --no-pixel-mask
[[ $out == *'"pixel_mask_from_file": false'* || $out == *'"pixel_mask_from_file":false'* ]] ||
    fail "--no-pixel-mask: the CBF's negative pixels are still a mask: $out"

# ---------------------------------------------------------------- a three-page TIFF
python3 - <<'PY'
import struct
W, H = 48, 40
def page(k):
    img = [[50 for _ in range(W)] for _ in range(H)]
    cx, cy = 10 + 10 * k, 12 + 5 * k
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            img[cy + dy][cx + dx] += 3000 // (1 + dx * dx + dy * dy)
    return b''.join(struct.pack('<H', v) for row in img for v in row)
pages = [page(k) for k in range(3)]
buf = bytearray(b'II*\0' + struct.pack('<I', 0))
offs = []
for p in pages:
    offs.append(len(buf))
    buf += p
ifd_offsets = []
for k, p in enumerate(pages):
    ifd_offsets.append(len(buf))
    tags = [(256, 4, W), (257, 4, H), (258, 3, 16), (259, 3, 1), (262, 3, 1), (273, 4, offs[k]),
            (277, 3, 1), (278, 4, H), (279, 4, len(p))]
    buf += struct.pack('<H', len(tags))
    for t, ty, v in tags:
        buf += struct.pack('<HHII', t, ty, 1, v) if ty == 4 else struct.pack('<HHIHH', t, ty, 1, v, 0)
    buf += struct.pack('<I', 0)
struct.pack_into('<I', buf, 4, ifd_offsets[0])
for k in range(2):
    struct.pack_into('<I', buf, ifd_offsets[k] + 2 + 9 * 12, ifd_offsets[k + 1])
open('three.tif', 'wb').write(bytes(buf))
PY
expect 0 --backend cpu find three.tif --out three.csv
for k in 0 1 2; do
    x=$((10 + 10 * k))
    grep -q "^$k,$x\." three.csv || fail "three-page TIFF: frame $k's spot at x = $x missing: $(cat three.csv)"
done

# ---------------------------------------------------------------- centroid on a TIFF
g=(--pitch 24 --grid 4x4 --origin 0,0)
expect 0 -q sim sh "${g[@]}" --size 96x96 --noise none --bits 16 --out sh.fits
expect 0 -q sim sh "${g[@]}" --size 96x96 --noise none --bits 16 --out sh.tif
expect 0 --backend cpu centroid sh.fits "${g[@]}" --out c_fits.csv
expect 0 --backend cpu centroid sh.tif "${g[@]}" --out c_tif.csv
cmp c_fits.csv c_tif.csv || fail "centroid: the TIFF gives other centroids than the FITS"
echo PASS
