#!/usr/bin/env bash
# Hostile and broken inputs, one table: every case runs a subcommand on a file we broke on
# purpose (truncated, corrupt, absurd sizes, NaN, empty or saturated frames, impossible geometry,
# NUL bytes) and expects its exit code (1: a clear failure; 2: a usage error; 0 where the input
# is merely unusual) with one line on stderr starting "spotwave", never a signal (exit >= 128) or
# a hang; the input files are never changed. The table (case, exit code, the message) is printed
# for the record.
# Usage: test_cli_hostile.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
mkdir "$tmp/w"
cd "$tmp/w"

table=""
n_cases=0
# hostile WANT DESCRIPTION ARGS...: WANT is an exit code or codes ("1", "0|1")
hostile() {
    local want=$1 what=$2
    shift 2
    find . -type f -print0 | xargs -0 sha256sum >"$tmp/sums"
    set +e
    timeout 60 "$SW" --backend cpu "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    err=$(cat "$tmp/err")
    local first=${err%%$'\n'*}
    n_cases=$((n_cases + 1))
    table+=$(printf '%-44s %3s  %s' "$what" "$rc" "${first:0:110}")$'\n'
    [[ $rc -lt 124 ]] || fail "$what: 'spotwave $*' exited $rc (a signal or the time limit): $err"
    [[ "|$want|" == *"|$rc|"* ]] || fail "$what: 'spotwave $*' exited $rc, expected $want: $err"
    if [[ $rc != 0 ]]; then
        [[ $first == spotwave* ]] || fail "$what: stderr does not start with 'spotwave': $err"
    fi
    sha256sum --quiet -c "$tmp/sums" >/dev/null 2>&1 ||
        fail "$what: 'spotwave $*' changed a file it was given"
}

py() { python3 -c "$@"; }

# ---------------------------------------------------------------- good files to break
expect 0 sim stars --random 30 --size 96x96 --seed 5 --bits 16 --out good.fits --truth cat.csv
expect 0 sim stars --random 30 --size 96x96 --seed 5 --bits 16 --out good.pgm
expect 0 sim stars --random 30 --size 96x96 --seed 5 --bits 16 --out good_master.h5
expect 0 sim stars --random 30 --size 96x96 --seed 5 --bits 16 --out good.cbf
expect 0 sim stars --random 30 --size 96x96 --seed 5 --bits 16 --out good.tif
geom=(--pitch 24 --grid 4x4 --origin 0,0)
expect 0 sim sh "${geom[@]}" --size 96x96 --noise none --bits 16 --out sh.fits --reference ref.fits
expect 0 centroid sh.fits "${geom[@]}" --reference ref.fits --slopes s.csv --out c.csv

# ---------------------------------------------------------------- FITS
: >empty.fits
hostile 1 "FITS: empty file" find empty.fits
head -c 2880 good.fits >hdr_only.fits
hostile 1 "FITS: header only, no data" find hdr_only.fits
head -c 5000 good.fits >cut.fits
hostile 1 "FITS: data cut short" find cut.fits
py "
d = bytearray(open('good.fits','rb').read())
i = d.find(b'NAXIS1  =')
d[i:i+80] = b'NAXIS1  = %20d' % 2000000000 + b' ' * 50
open('huge.fits','wb').write(d)"
hostile 1 "FITS: NAXIS1 = 2e9 in a 10 KB file" find huge.fits
py "
d = bytearray(open('good.fits','rb').read())
i = d.find(b'BITPIX  =')
d[i:i+80] = b'BITPIX  = %20d' % 7 + b' ' * 50
open('bitpix.fits','wb').write(d)"
hostile 1 "FITS: BITPIX = 7" find bitpix.fits
head -c 4000 /dev/urandom >noise.fits
hostile 1 "FITS: random bytes" find noise.fits

# ---------------------------------------------------------------- PGM
printf 'P5\n0 10\n65535\n' >zero.pgm
hostile 1 "PGM: width 0" find zero.pgm
printf 'P5\n100000000 100000000\n65535\n' >vast.pgm
hostile 1 "PGM: 1e8 x 1e8 claimed, no data" find vast.pgm
head -c 3000 good.pgm >cut.pgm
hostile 1 "PGM: data cut short" find cut.pgm
printf 'P5\n4 4\n0\n0123456789abcdef' >maxval.pgm
hostile 1 "PGM: maxval 0" find maxval.pgm

# ---------------------------------------------------------------- CBF (CBFlib reads in a child)
printf '###CBF: VERSION 1.5\r\n' >hdr_only.cbf
hostile 1 "CBF: magic line only" find hdr_only.cbf
size=$(stat -c %s good.cbf)
head -c $((size - 300)) good.cbf >cut.cbf
hostile 1 "CBF: binary section cut short" find cut.cbf
py "
d = bytearray(open('good.cbf','rb').read())
i = d.index(b'\x0c\x1a\x04\xd5')
d[i + 100] ^= 0x10
open('digest.cbf','wb').write(d)
t = bytes(open('good.cbf','rb').read())
open('bigsize.cbf','wb').write(t.replace(b'X-Binary-Size: ', b'X-Binary-Size: 9999999'))
open('bigdim.cbf','wb').write(t.replace(b'X-Binary-Size-Fastest-Dimension: 96',
                                        b'X-Binary-Size-Fastest-Dimension: 2000000000'))
open('nelem.cbf','wb').write(t.replace(b'X-Binary-Number-of-Elements: 9216',
                                       b'X-Binary-Number-of-Elements: 92160'))
open('vast.cbf','wb').write(t.replace(b'X-Binary-Number-of-Elements: 9216',
                                      b'X-Binary-Number-of-Elements: 2147418112')
                             .replace(b'X-Binary-Size-Fastest-Dimension: 96',
                                      b'X-Binary-Size-Fastest-Dimension: 65536')
                             .replace(b'X-Binary-Size-Second-Dimension: 96',
                                      b'X-Binary-Size-Second-Dimension: 32767'))
"
hostile 1 "CBF: one data byte flipped (MD5 digest)" find digest.cbf
hostile 1 "CBF: X-Binary-Size beyond the file" find bigsize.cbf
hostile 1 "CBF: width 2e9" find bigdim.cbf
hostile 1 "CBF: 10x the elements the dimensions hold" find nelem.cbf
hostile 1 "CBF: 65536 x 32767 declared in 10 KB" find vast.cbf
cp "$(dirname "$0")/../fuzz/corpus/cbf/regress_cbflib_heap_overflow.cbf" overflow.cbf
hostile 1 "CBF: CBFlib overflows its array (fuzzed)" find overflow.cbf
for off in 30 120 200 400; do
    py "
d = bytearray(open('good.cbf','rb').read())
d[$off] ^= 0x5a
open('flip.cbf','wb').write(d)"
    hostile "0|1" "CBF: header byte $off flipped" find flip.cbf --out spots_flip.csv
    rm -f spots_flip.csv
done

# ---------------------------------------------------------------- TIFF (libtiff)
py "
import struct
def tiff(name, w, h, bps=16, fmt=1, data=None, spp=1):
    data = data if data is not None else bytes(w * h * spp * bps // 8)
    tags = [(256, 4, w), (257, 4, h), (258, 3, bps), (259, 3, 1), (262, 3, 1), (273, 4, 0),
            (277, 3, spp), (278, 4, h), (279, 4, len(data)), (339, 3, fmt)]
    off = 8 + 2 + 12 * len(tags) + 4
    ifd = struct.pack('<H', len(tags))
    for t, ty, v in tags:
        v = off if t == 273 else v
        ifd += struct.pack('<HHII', t, ty, 1, v) if ty == 4 else struct.pack('<HHIHH', t, ty, 1, v, 0)
    open(name, 'wb').write(b'II*\0' + struct.pack('<I', 8) + ifd + struct.pack('<I', 0) + data)
tiff('vast.tif', 2000000000, 2000000000, data=b'')
def tiled(name, w, h, tw, th, data):  # one tile of tw x th 16-bit pixels (TIFF 6.0 sec. 15)
    tags = [(256, 4, w), (257, 4, h), (258, 3, 16), (259, 3, 1), (262, 3, 1), (277, 3, 1),
            (322, 4, tw), (323, 4, th), (324, 4, 0), (325, 4, len(data)), (339, 3, 1)]
    off = 8 + 2 + 12 * len(tags) + 4
    ifd = struct.pack('<H', len(tags))
    for t, ty, v in tags:
        v = off if t == 324 else v
        ifd += struct.pack('<HHII', t, ty, 1, v) if ty == 4 else struct.pack('<HHIHH', t, ty, 1, v, 0)
    open(name, 'wb').write(b'II*\0' + struct.pack('<I', 8) + ifd + struct.pack('<I', 0) + data)
tiled('hugetile.tif', 16, 16, 65536, 65536, bytes(512))
tiff('nodata.tif', 4000, 4000, data=b'\x01' * 100)
tiff('signed.tif', 8, 8, fmt=2)
tiff('bits12.tif', 8, 8, bps=12, data=bytes(96))
tiff('ok.tif', 8, 8)
open('ifdloop.tif','wb').write(b'II*\0' + struct.pack('<I', 8) + struct.pack('<H', 0) +
                               struct.pack('<I', 8))
"
hostile 0 "TIFF: a minimal 8x8 file (control)" find ok.tif --out s_ok.csv
: >empty.tif
hostile 1 "TIFF: empty file" find empty.tif
printf 'II*\0' >magic.tif
hostile 1 "TIFF: magic only" find magic.tif
hostile 1 "TIFF: 2e9 x 2e9 claimed, no data" find vast.tif
hostile 1 "TIFF: 4000x4000 claimed, 100 bytes" find nodata.tif
hostile 1 "TIFF: 65536x65536 tiles (8 GiB) on 16x16" --max-memory 1G find hugetile.tif
hostile 1 "TIFF: signed 16-bit samples" find signed.tif
hostile 1 "TIFF: 12-bit samples" find bits12.tif
hostile "0|1" "TIFF: directory that points at itself" find ifdloop.tif --out s_loop.csv
size=$(stat -c %s good.tif)
head -c $((size / 2)) good.tif >cut.tif
hostile 1 "TIFF: cut in half" find cut.tif
for off in 4 9 20 40 100 $((size / 2)) $((size - 10)); do
    py "
d = bytearray(open('good.tif','rb').read())
d[$off] ^= 0xff
open('flip.tif','wb').write(d)"
    hostile "0|1" "TIFF: byte $off flipped" find flip.tif --out spots_flip.csv
    rm -f spots_flip.csv
done

# ---------------------------------------------------------------- HDF5
head -c 2000 good_master.h5 >cut.h5
hostile 1 "HDF5: truncated master" find cut.h5
size=$(stat -c %s good_master.h5)
for off in 0 8 40 96 200 400 800 1200 $((size / 2)) $((size - 200)) $((size - 8)); do
    py "
d = bytearray(open('good_master.h5','rb').read())
d[$off] ^= 0xff
open('flip.h5','wb').write(d)"
    hostile "0|1" "HDF5: byte $off flipped" find flip.h5 --out spots_flip.csv
    rm -f spots_flip.csv
done
rm flip.h5
hostile 1 "HDF5: a dataset that is not there" find good_master.h5 --dataset /entry/nope

# ---------------------------------------------------------------- frames
py "
import struct
def fits(name, bitpix, vals, w, h):
    cards = ['SIMPLE  = %20s' % 'T', 'BITPIX  = %20d' % bitpix, 'NAXIS   = %20d' % 2,
             'NAXIS1  = %20d' % w, 'NAXIS2  = %20d' % h, 'END']
    hdr = ''.join(c.ljust(80) for c in cards).ljust(2880).encode()
    fmt = '>%d%s' % (w * h, 'f' if bitpix == -32 else 'H')
    data = struct.pack(fmt, *vals)
    data += bytes(-len(data) % 2880)
    open(name, 'wb').write(hdr + data)
n = 64 * 64
fits('nan.fits', -32, [float('nan')] * n, 64, 64)
fits('inf.fits', -32, [float('inf')] * n, 64, 64)
fits('zeros.fits', -32, [0.0] * n, 64, 64)
fits('sat.fits', 16, [65535 - 32768] * n, 64, 64)
"
hostile "0|1" "frame: every pixel NaN" find nan.fits --out s_nan.csv
hostile "0|1" "frame: every pixel +inf" find inf.fits --out s_inf.csv
hostile 0 "frame: every pixel 0 (no spots)" find zeros.fits --out s_zero.csv
hostile "0|1" "frame: every pixel saturated" find sat.fits --out s_sat.csv
hostile "0|1" "centroid: a NaN frame" centroid nan.fits --pitch 32 --grid 2x2 --origin 0,0
hostile "0|1" "centroid: a saturated frame" centroid sat.fits --pitch 32 --grid 2x2 --origin 0,0

# ---------------------------------------------------------------- impossible geometry
hostile "1|2" "centroid: 10x10 lenslets of 24 px on 96 px" centroid sh.fits --pitch 24 \
    --grid 10x10 --origin 0,0
hostile "1|2" "centroid: origin outside the image" centroid sh.fits --pitch 24 --grid 4x4 \
    --origin 5000,0
hostile 2 "centroid: pitch 0" centroid sh.fits --pitch 0 --grid 4x4 --origin 0,0
dgeom=(--distance-mm 100 --beam-center 32,32 --pixel-mm 0.172 --out s_dg.csv)
hostile 2 "find: wavelength 0" find zeros.fits --wavelength-a 0 "${dgeom[@]}"
hostile 2 "find: distance -100 mm" find zeros.fits --wavelength-a 1 --distance-mm -100 \
    --beam-center 32,32 --pixel-mm 0.172 --out s_dg.csv
hostile 2 "find: pixel size 0,0.1" find zeros.fits --wavelength-a 1 --distance-mm 100 \
    --beam-center 32,32 --pixel-mm 0,0.1 --out s_dg.csv
hostile 2 "find: --d-min without a geometry" find zeros.fits --d-min 2 --out s_dg.csv
hostile 2 "find: --d-min 5 above --d-max 3" find zeros.fits --wavelength-a 1 "${dgeom[@]}" \
    --d-min 5 --d-max 3
hostile 2 "find: beam-stop circle of radius -4" find zeros.fits --beamstop-circle 32,32,-4 \
    --out s_dg.csv
hostile "1|2" "fit: pupil larger than the grid" fit s.csv "${geom[@]}" --pupil-px 1e9
hostile 2 "sim stars: size 0x0" sim stars --random 5 --size 0x0 --out x.fits

# ---------------------------------------------------------------- tables
: >empty.csv
hostile 1 "slopes CSV: empty" fit empty.csv "${geom[@]}"
printf 'ix,iy,dx_px,dy_px\n0,0,nan,inf\n' >inf.csv
hostile 1 "slopes CSV: an infinite slope" fit inf.csv "${geom[@]}"
printf 'ix,iy,dx_px,dy_px\n0,0,0.1,0\x00\n' >nul.csv
hostile 1 "slopes CSV: a NUL byte" fit nul.csv "${geom[@]}"
printf 'ix,iy,dx_px,dy_px\n-5,0,0.1,0.1\n' >neg.csv
hostile 1 "slopes CSV: lenslet index -5" fit neg.csv "${geom[@]}"
printf 'x_px,y_px,mag\n1e300,5,3\n' >far.csv
hostile "0|1" "star catalogue: x = 1e300" sim stars --catalog far.csv --size 64x64 --out far.fits
rm -f far.fits
printf 'x_px,y_px,mag\n"5,5,3\n' >quote.csv
hostile 1 "star catalogue: unbalanced quote" sim stars --catalog quote.csv --size 64x64 \
    --out q.fits
printf 'n,m,coef_um\n2,3,0.1\n' >badz.csv
hostile 1 "Zernike CSV: m = 3 for n = 2" sim sh --zernike badz.csv "${geom[@]}" --size 96x96 \
    --out z.fits
printf 'frames = 3\nwarmup = 1\nbogus = 4\n' >bad.cfg
hostile 2 "loop config: unknown key" loop --config bad.cfg

printf '%s' "$table"
echo "PASS ($n_cases cases)"
