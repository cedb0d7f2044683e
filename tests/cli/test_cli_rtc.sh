#!/usr/bin/env bash
# The simulated bench through image streams (issue "streams"): sim camera -> spotwave rtc -> sim
# mirror as separate processes, 1000 frames in lockstep, every frame's commands bit for bit those
# of the in-process simulator (sim bench --twin runs it beside the bench), no frame missed; the
# chain's files written by --rtc-config; D-SABRE's distributed projection on the pupil only
# (local-pupil) against the whole-window one (local) and against sw_rtc; spotwave calibrate
# through the streams gives the simulator's own control matrix (push-pull: bit for bit; Hadamard:
# to 1e-3); SIGTERM leaves the streams whole; bad chains, streams and options refused.
set -euo pipefail
source "$(dirname "$0")/common.bash"

export MILK_SHM_DIR="$tmp/shm"
mkdir -p "$MILK_SHM_DIR"
cd "$tmp"

# a small noisy system with a circular pupil (invalid corner lenslets), one thread per process
SYS=(--set nx=8 --set recon=mvm --set samples=4 --set model=geometric --set diameter_m=3
    --set square_pupil=0 --set magnitude=8 --set read_noise_e=1 --set seed=5)
# the CPU backend: bit for bit (the GPU is checked with a tolerance by the GPU round)
expect 0 --backend cpu --threads 1 sim bench "${SYS[@]}" --rtc-config chain --frames 0
for f in rtc.conf cm.fits valid.fits; do [[ -s chain/$f ]] || fail "--rtc-config wrote no $f"; done
grep -q '^cm = cm.fits$' chain/rtc.conf || fail "rtc.conf: $(cat chain/rtc.conf)"

# the chain first (it waits for the camera stream), then the bench; the lockstep timeouts (60 s)
# only end a hung pair: a loaded 2-core machine once starved a 20 s one (make test, 2026-11-27)
"$SW" --backend cpu --threads 1 rtc --config chain/rtc.conf --in cam --out dm --slopes sl --telemetry tel \
    --frames 1000 --timeout 60 --json >rtc.json 2>rtc.err &
rtc_pid=$!
expect 0 --backend cpu --threads 1 sim bench "${SYS[@]}" --camera cam --dm dm --frames 1000 --twin --json \
    --timeout 60
cp "$tmp/out" bench.json
wait "$rtc_pid" || fail "rtc failed: $(cat rtc.err)"
python3 - bench.json rtc.json <<'PY' || fail "bench and chain disagree: $(cat bench.json rtc.json)"
import json, sys
b = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert b["frames"] == 1000 and b["twin_identical_frames"] == 1000, b
assert b["twin_first_difference"] == 0 and b["twin_max_rel_difference"] == 0, b
assert r["frames"] == 1000 and r["missed"] == 0 and r["first_cnt0"] == 1, r
assert r["actuators"] == 81 and r["stopped_by"] == "frames", r
assert r["frames_read"] == "in place" and r["torn"] == 0, r  # lockstep: never overwritten
assert r["slopes"] == 2 * 52, r  # 52 lenslets of 64 lit to half or more
assert 0 < r["latency_median_us"] <= r["latency_p99_us"] <= r["latency_max_us"] + 0.1, r
# the loop corrected: residual well below the turbulence
assert b["residual_mean_nm"] < 0.5 * b["turbulence_mean_nm"], b
PY
# slopes and telemetry streams: the last frame's, in their documented shapes
expect 0 stream info tel --json
python3 - "$tmp/out" <<'PY' || fail "telemetry stream: $out"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["type"] == "f64" and r["size"][0] == 2 + 104 + 81 and r["cnt0"] == 1000, r
PY
expect 0 stream info sl --json
[[ $out == *'"cnt0": 1000'* ]] || fail "slopes stream: $out"

# the D-SABRE chain (Brunner et al. 2018, distributed projection) through the same streams
DS=(--set nx=8 --set recon=dsabre-local --set partitions=2 --set samples=4 --set model=geometric
    --set diameter_m=3 --set seed=2)
expect 0 --backend cpu --threads 1 sim bench "${DS[@]}" --rtc-config dchain --frames 0
grep -q '^recon = dsabre$' dchain/rtc.conf || fail "dsabre rtc.conf: $(cat dchain/rtc.conf)"
[[ ! -e dchain/cm.fits ]] || fail "a D-SABRE chain has no control matrix"
"$SW" --backend cpu --threads 1 rtc --config dchain/rtc.conf --in dcam --out ddm --frames 300 \
    --timeout 60 --json >drtc.json 2>drtc.err &
rtc_pid=$!
expect 0 --backend cpu --threads 1 sim bench "${DS[@]}" --camera dcam --dm ddm --frames 300 \
    --twin --json --timeout 60
wait "$rtc_pid" || fail "rtc (dsabre) failed: $(cat drtc.err)"
[[ $out == *'"twin_identical_frames": 300'* ]] || fail "dsabre twin: $out"
grep -q '"missed": 0' drtc.json || fail "dsabre rtc: $(cat drtc.json)"
printf 'nx = 8\nny = 8\npitch_px = 8\nrecon = dsabre\ncm = x.fits\n' >dchain/bad.conf
expect_usage rtc --config dchain/bad.conf --in dcam --out ddm

# a D-SABRE loop with modes of negative gain (partitions of 2 x 2 lenslets on an 8 x 8 annulus,
# loop.h negative_filter): the chain gets the loop's whole filter as filter.fits, and the
# commands stay bit for bit the simulator's (unfiltered they run away: test_loop_long)
NEG=(--set nx=8 --set recon=dsabre-local --set partitions=4 --set samples=4 --set model=geometric
    --set diameter_m=3 --set square_pupil=0 --set obscuration=0.3 --set coupling=0.4
    --set gain=0.7 --set seed=2)
expect 0 --backend cpu --threads 1 sim bench "${NEG[@]}" --rtc-config nchain --frames 0
grep -q '^filter = filter.fits$' nchain/rtc.conf || fail "rtc.conf: $(cat nchain/rtc.conf)"
grep -q '^unseen' nchain/rtc.conf && fail "rtc.conf names unseen beside filter"
"$SW" --backend cpu --threads 1 rtc --config nchain/rtc.conf --in ncam --out ndm --frames 200 \
    --timeout 60 --open-timeout 60 --json >nrtc.json 2>nrtc.err &
rtc_pid=$!
expect 0 --backend cpu --threads 1 sim bench "${NEG[@]}" --camera ncam --dm ndm --frames 200 \
    --twin --json --timeout 60
wait "$rtc_pid" || fail "rtc (filter) failed: $(cat nrtc.err)"
[[ $out == *'"twin_identical_frames": 200'* ]] || fail "filter twin: $out"
# bad filters: not a row per actuator, rows not orthonormal, and both filter and unseen
cp nchain/rtc.conf nchain/bad1.conf
sed -i 's/^filter = filter.fits$/filter = valid.fits/' nchain/bad1.conf
expect 1 rtc --config nchain/bad1.conf --in ncam --out ndm --frames 1 --timeout 5
[[ $err == *"one row of 81 commands"* ]] || fail "filter size: $err"
python3 - nchain/filter.fits nchain/scaled.fits <<'PY'
import sys
import struct
raw = bytearray(open(sys.argv[1], "rb").read())
end = next(c for c in range(0, len(raw), 80) if raw[c:c + 3] == b"END")
h = (end // 2880 + 1) * 2880  # the header's blocks
n = (len(raw) - h) // 4
for i in range(n):  # every entry doubled: the rows' norms become 2
    o = h + 4 * i
    v, = struct.unpack(">f", raw[o:o + 4])
    raw[o:o + 4] = struct.pack(">f", 2 * v)
open(sys.argv[2], "wb").write(raw)
PY
sed 's/^filter = filter.fits$/filter = scaled.fits/' nchain/rtc.conf >nchain/bad2.conf
expect 1 rtc --config nchain/bad2.conf --in ncam --out ndm --frames 1 --timeout 5
[[ $err == *"not orthonormal"* ]] || fail "filter orthonormality: $err"
cp nchain/rtc.conf nchain/bad3.conf
echo 'unseen = piston' >>nchain/bad3.conf
expect_usage rtc --config nchain/bad3.conf --in ncam --out ndm

# a camera whose rows the chain's buffer pads (100 u8 pixels; rows of 128 bytes), read with
# --copy: the slopes the chain publishes are those of spotwave centroid on the same frame
# (D-SABRE at the corners needs no matrix)
expect 0 sim sh --grid 10x10 --pitch 10 --bits 8 --out odd.pgm
printf 'nx = 10\nny = 10\npitch_px = 10\nrecon = dsabre\nprojection = corners\npartitions = 1\n' \
    >odd.conf
expect 0 stream write ocam odd.pgm
"$SW" rtc --config odd.conf --in ocam --out odm --slopes osl --frames 1 --timeout 10 --copy \
    >odd.json 2>odd.err &
odd_pid=$!
for _ in $(seq 200); do # frames until the chain has taken one
    "$SW" stream write ocam odd.pgm 2>/dev/null
    kill -0 "$odd_pid" 2>/dev/null || break
    sleep 0.05
done
wait "$odd_pid" || fail "rtc on a 100-pixel-wide camera: $(cat odd.err)"
expect 0 stream read osl --out osl.fits
expect 0 centroid odd.pgm --grid 10x10 --pitch 10 --origin 0,0 --slopes osl.csv
python3 - osl.fits osl.csv <<'PY' || fail "the chain's slopes differ from spotwave centroid's"
import csv, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
s = np.frombuffer(raw[2880:2880 + 800], ">f4").astype(float)
rows = list(csv.DictReader(open(sys.argv[2])))
dx = np.array([float(r["dx_px"]) for r in rows])
dy = np.array([float(r["dy_px"]) for r in rows])
assert len(rows) == 100, len(rows)
assert np.abs(s[:100] - dx).max() < 1e-6 and np.abs(s[100:] - dy).max() < 1e-6
PY

# the distributed projection on the pupil only (projection = local-pupil: Brunner et al. 2018,
# section 4.A, Fig. 14's "MV", a matrix per partition) on an annular pupil of 12 x 12 lenslets:
# the JSON names it; the corners no measured lenslet touches get exactly 0 (left out of the fit),
# where projection = local (each window fitted whole, "MM") moves them; the two differ; with the
# Python package of the build, the commands are bit for bit those of sw_rtc built with
# SW_RTC_PROJ_LOCAL_PUPIL (spotwave.loop.RTC) on the same frame
printf 'j,coef_um\n4,0.1\n5,0.08\n7,-0.05\n8,0.04\n' >ann_z.csv
expect 0 sim sh --grid 12x12 --pitch 10 --bits 8 --flux 1500 --sigma 1.2 --noise none \
    --zernike ann_z.csv --out ann.pgm
python3 - <<'PY' || fail "annular mask"
import numpy as np
c = np.arange(12) - 5.5
r = np.hypot(*np.meshgrid(c, c))
valid = ((r >= 2.0) & (r <= 6.0)).astype(np.uint8) * 255
open("ann_valid.pgm", "wb").write(b"P5\n12 12\n255\n" + valid.tobytes())
PY
printf '%s\n' 'nx = 12' 'ny = 12' 'pitch_px = 10' 'pixel_um = 5.5' 'focal_mm = 3.5' \
    'valid = ann_valid.pgm' 'recon = dsabre' 'partitions = 2' >ann.conf
# ann_chain NAME [--set ...]: one frame of ann.pgm through the chain; commands in NAME.fits
ann_chain() {
    local name=$1
    shift
    expect 0 stream write "${name}_cam" ann.pgm
    "$SW" --backend cpu --threads 1 rtc --config ann.conf "$@" --in "${name}_cam" \
        --out "${name}_dm" --frames 1 --timeout 20 --copy --json >"$name.json" 2>"$name.err" &
    local pid=$!
    for _ in $(seq 200); do # frames until the chain has taken one
        "$SW" stream write "${name}_cam" ann.pgm 2>/dev/null
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    wait "$pid" || fail "rtc ($name): $(cat "$name.err")"
    expect 0 stream read "${name}_dm" --out "$name.fits"
}
ann_chain annpupil --set projection=local-pupil
ann_chain annlocal --set projection=local
grep -q '"projection": "local-pupil"' annpupil.json || fail "local-pupil JSON: $(cat annpupil.json)"
grep -q '"recon": "dsabre"' annpupil.json || fail "local-pupil JSON: $(cat annpupil.json)"
grep -q '"projection": "local"' annlocal.json || fail "local JSON: $(cat annlocal.json)"
python3 - annpupil.fits annlocal.fits <<'PY' || fail "local-pupil against local on the annulus"
import sys
import numpy as np

def commands(path):
    raw = open(path, "rb").read()
    return np.frombuffer(raw[2880:2880 + 4 * 169], ">f4").astype(np.float64)

pupil, local = commands(sys.argv[1]), commands(sys.argv[2])
c = np.arange(12) - 5.5
valid = (lambda r: (r >= 2.0) & (r <= 6.0))(np.hypot(*np.meshgrid(c, c)))
seen = np.zeros((13, 13), bool)  # the corners of the measured lenslets
for dy in (0, 1):
    for dx in (0, 1):
        seen[dy:dy + 12, dx:dx + 12] |= valid
seen = seen.ravel()
rms = np.sqrt(np.mean(pupil[seen] ** 2))
assert (~seen).sum() == 37 and rms > 0.01, (pupil, rms)  # 0.1 um of defocus: tens of nm
assert np.all(pupil[~seen] == 0), pupil[~seen]  # left out of the fit: 0
assert np.abs(local[~seen]).max() > 0.2 * rms, local[~seen]  # the whole window fitted
assert np.abs(pupil - local)[seen].max() > 0.2 * rms, (pupil, local)
PY
pydir=$(dirname "$SW")/python
if PYTHONPATH=$pydir python3 -c 'import spotwave' 2>/dev/null; then
    PYTHONPATH=$pydir python3 - annpupil.fits <<'PY' || fail "local-pupil: not sw_rtc's commands"
import sys
import numpy as np
import spotwave

L = spotwave.loop
raw = open(sys.argv[1], "rb").read()
cli = np.frombuffer(raw[2880:2880 + 4 * 169], ">f4").astype(np.float32)
frame = np.asarray(spotwave.read("ann.pgm"))
valid = np.asarray(spotwave.read("ann_valid.pgm")) != 0
rtc = L.RTC(frame.shape, frame.dtype, pitch=10, grid=(12, 12), mask=valid, recon="sabre",
            sabre=dict(partitions=2, pitch=55.0), projection="local-pupil",
            filter=L.unseen_modes(12, 12, valid), ctx=spotwave.Context("cpu", threads=1))
u = rtc(frame)
assert np.array_equal(u, cli), np.abs(u - cli).max()  # the same library, bit for bit
PY
else
    echo "note: the Python package is not built beside $SW: its parity check is skipped" >&2
fi
# an unknown projection, and a distributed one without Eq. 17's extension, are usage errors
expect_usage rtc --config ann.conf --set projection=mv --in ann_cam --out ann_dm
[[ $err == *"corners, local or local-pupil"* ]] || fail "unknown projection: $err"
expect_usage rtc --config ann.conf --set projection=local-pupil --set extend_eq17=0 \
    --in ann_cam --out ann_dm
[[ $err == *"extend_eq17 = 1"* ]] || fail "local-pupil without extend_eq17: $err"

# a camera process that restarts (its stream made afresh): the chain opens it again
expect 0 stream write rcam odd.pgm
"$SW" rtc --config odd.conf --in rcam --out rdm --frames 2 --timeout 20 --json >re.json \
    2>re.err &
re_pid=$!
for _ in $(seq 200); do # one frame taken
    "$SW" stream write rcam odd.pgm 2>/dev/null
    run stream info rdm --json
    [[ $out =~ \"cnt0\":\ ([0-9]+) ]] && ((BASH_REMATCH[1] >= 2)) && break
    sleep 0.05
done
expect 0 stream rm rcam
expect 0 stream write rcam odd.pgm
for _ in $(seq 100); do # until the chain has opened it again and taken a frame
    kill -0 "$re_pid" 2>/dev/null || break
    "$SW" stream write rcam odd.pgm 2>/dev/null
    sleep 0.1
done
wait "$re_pid" || fail "rtc across a camera restart: $(cat re.err)"
grep -q '"reopened": 1' re.json || fail "rtc across a camera restart: $(cat re.json re.err)"
grep -q "opened again" re.err || fail "rtc did not say it opened the camera again: $(cat re.err)"
expect_usage rtc --config odd.conf --in rcam --out rdm --timeout 0

# calibration through the streams of a calm bench: push-pull gives the simulator's own matrix
CALM=(--set nx=8 --set recon=mvm --set samples=4 --set model=geometric --set diameter_m=3)
expect 0 --backend cpu --threads 1 sim bench "${CALM[@]}" --rtc-config calm --frames 0
"$SW" --backend cpu --threads 1 sim bench "${CALM[@]}" --no-turbulence --camera ccam --dm cdm \
    --frames 100000 --timeout 10 >calm.out 2>&1 &
bench_pid=$!
expect 0 --backend cpu --threads 1 calibrate --config calm/rtc.conf --camera ccam --dm cdm --out cm_pp.fits \
    --im im_pp.fits --json
[[ $out == *'"modes_kept"'* && $out == *'"measurements": 162'* ]] || fail "calibrate: $out"
expect 0 --threads 1 calibrate --config calm/rtc.conf --camera ccam --dm cdm --out cm_h.fits \
    --hadamard
kill -TERM "$bench_pid" 2>/dev/null || fail "sim bench ended before SIGTERM: $(cat calm.out)"
wait "$bench_pid" || fail "sim bench did not stop cleanly on SIGTERM: $(cat calm.out)"
python3 - calm/cm.fits cm_pp.fits cm_h.fits <<'PY' || fail "calibrated matrices differ"
import sys
import numpy as np

def fits(path):
    raw = open(path, "rb").read()
    cards = [raw[i:i + 80].decode("latin-1") for i in range(0, len(raw), 80)]
    end = next(i for i, c in enumerate(cards) if c.startswith("END"))
    keys = {c[:8].strip(): c[10:30].strip() for c in cards[:end]}
    start = (end * 80 // 2880 + 1) * 2880
    w, h = int(keys["NAXIS1"]), int(keys["NAXIS2"])
    return np.frombuffer(raw[start:start + 4 * w * h], ">f4").reshape(h, w)

ref, pp, had = (fits(p) for p in sys.argv[1:4])
assert ref.shape == (81, 128), ref.shape
assert np.array_equal(ref, pp), np.abs(ref - pp).max()
rel = np.abs(ref - had).max() / np.abs(ref).max()
assert rel < 1e-3, rel
PY

# a chain stopped by SIGTERM exits 0 and leaves its streams whole (write flag down)
"$SW" sim bench "${CALM[@]}" --free-run --set rate_hz=400 --camera fcam --dm fdm --frames 400 \
    >free.out 2>&1 &
free_pid=$!
"$SW" rtc --config calm/rtc.conf --in fcam --out fdm --json >sig.json 2>sig.err &
sig_pid=$!
for _ in $(seq 100); do # until the chain has run a few frames
    run stream info fdm --json
    [[ $out =~ \"cnt0\":\ ([0-9]+) ]] && ((BASH_REMATCH[1] > 5)) && break
    sleep 0.05
done
kill -TERM "$sig_pid" 2>/dev/null || fail "rtc ended before SIGTERM: $(cat sig.err) $(cat free.out)"
wait "$sig_pid" || fail "rtc exited non-zero on SIGTERM: $(cat sig.err)"
grep -q '"stopped_by": "signal"' sig.json || fail "rtc on SIGTERM: $(cat sig.json)"
wait "$free_pid" || fail "free-running bench: $(cat free.out)"
expect 0 stream info fdm --json
python3 - "$tmp/out" <<'PY' || fail "the mirror stream after SIGTERM: $out"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["write_flag"] == 0 and r["cnt0"] >= 1, r
PY

# bad chains and streams
expect_usage rtc --in cam --out dm
expect_usage rtc --config calm/rtc.conf --in cam --out cam
printf 'nx = 8\npitch_px = 8\ncm = cm.fits\n' >calm/nony.conf
expect_usage rtc --config calm/nony.conf --in ccam --out dm
printf 'nx = 8\nny = 8\npitch_px = 8\n' >calm/nocm.conf
expect_usage rtc --config calm/nocm.conf --in ccam --out dm
expect_usage rtc --config calm/rtc.conf --set gain=x --in ccam --out dm
expect_usage rtc --config calm/rtc.conf --set bogus=1 --in ccam --out dm
expect_usage rtc --config calm/rtc.conf --in ccam --out dm --wait maybe
# a control matrix of the wrong width
printf 'nx = 4\nny = 4\npitch_px = 8\ncm = cm.fits\n' >calm/small.conf
expect 1 rtc --config calm/small.conf --in ccam --out dm2 --frames 1 --timeout 1
expect_one_line
[[ $err == *"wide"* ]] || fail "wrong cm width: $err"
# a camera stream that is not a 2-D frame of a supported type
expect 0 stream write v1 chain/valid.fits --type f64
expect 1 rtc --config calm/rtc.conf --in v1 --out dm3 --frames 1 --timeout 1
[[ $err == *"u8, u16 or f32"* ]] || fail "f64 camera: $err"
# no camera stream
expect 1 rtc --config calm/rtc.conf --in nosuch --out dm4 --open-timeout 0.2
expect_one_line
# an existing commands stream of another shape is not overwritten
expect 1 rtc --config calm/rtc.conf --in ccam --out v1 --frames 1 --timeout 1
[[ $err == *"another shape"* ]] || fail "--out of another shape: $err"
# a corrupted camera stream header
cp "$MILK_SHM_DIR/ccam.im.shm" "$MILK_SHM_DIR/bad.im.shm"
printf 'X' | dd of="$MILK_SHM_DIR/bad.im.shm" bs=1 seek=0 conv=notrunc status=none
expect 1 rtc --config calm/rtc.conf --in bad --out dm5 --open-timeout 0.2
expect_one_line
# no frames: --timeout fails
expect 1 rtc --config calm/rtc.conf --in ccam --out dm6 --timeout 0.3
[[ $err == *"no frame"* ]] || fail "timeout: $err"

# sim bench refusals
expect_usage sim bench "${CALM[@]}" --set delay=1 --frames 5
expect_usage sim bench "${CALM[@]}" --twin --free-run --frames 5
expect_usage sim bench --set recon=dsabre-global --rtc-config x --frames 0
expect_usage sim bench "${CALM[@]}" --camera a --dm a
expect_usage sim bench "${CALM[@]}" --frames 0
expect 1 sim bench "${CALM[@]}" --camera lone --dm lonedm --frames 5 --timeout 0.3
[[ $err == *"no chain listening"* ]] || fail "a bench alone: $err"
# calibrate refusals
expect_usage calibrate --config calm/rtc.conf --camera ccam --dm cdm
expect_usage calibrate --config calm/rtc.conf --camera ccam --dm ccam --out x.fits
expect_usage calibrate --config calm/rtc.conf --camera ccam --dm cdm --out x.fits --amp -1
expect 1 calibrate --config calm/rtc.conf --camera ccam --dm cdm --out x.fits --timeout 0.3
[[ $err == *"no frame"* ]] || fail "calibrate without a camera running: $err"
[[ ! -e x.fits ]] || fail "a failed calibration left x.fits"
echo "ok"
