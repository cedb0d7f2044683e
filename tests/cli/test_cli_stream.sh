#!/usr/bin/env bash
# spotwave stream: write a frame from a file into a stream (created, then updated), read it back
# to FITS identical in pixels, info as text and JSON, the type conversion, --wait timing out,
# rm, usage errors. The streams live in the test's own directory (MILK_SHM_DIR and --dir).
set -euo pipefail
source "$(dirname "$0")/common.bash"

export MILK_SHM_DIR="$tmp/shm"
mkdir -p "$MILK_SHM_DIR"
cd "$tmp"

expect 0 sim sh --out a.fits --bits 16
expect 0 stream write cam a.fits
[[ -f shm/cam.im.shm ]] || fail "no stream file in MILK_SHM_DIR"
[[ $err == *"created"*"512 x 512 u16"*"frame 1"* ]] || fail "write said: $err"
expect 0 stream write cam a.fits
[[ $err == *"wrote"*"frame 2"* ]] || fail "second write said: $err"
expect 0 stream read cam --out b.fits
expect 0 stream write check b.fits
# the frame read back is the frame written: same pixels, compared through a second stream
cmp <(tail -c +1 shm/cam.im.shm | head -c $((384 + 512 * 512 * 2)) | tail -c $((512 * 512 * 2))) \
    <(tail -c +1 shm/check.im.shm | head -c $((384 + 512 * 512 * 2)) | tail -c $((512 * 512 * 2))) ||
    fail "the pixels read back differ from those written"

expect 0 stream info cam
[[ $out == *"cnt0:        2"* && $out == *"512 x 512 u16"* ]] || fail "info: $out"
expect 0 stream info cam --json
python3 - "$tmp/out" <<'PY' || fail "info --json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["cnt0"] == 2 and r["size"] == [512, 512] and r["type"] == "u16", r
assert r["version"] == "2.00" and r["semaphores"] == 10 and r["keywords"] == []
PY

# another type re-creates the stream
expect 0 stream write cam a.fits --type f64
[[ $err == *"created"*"f64"*"frame 1"* ]] || fail "re-create said: $err"
expect 0 stream read cam --out c.fits
expect 1 stream read cam --out c.pgm
expect_one_line

# --dir overrides MILK_SHM_DIR
mkdir other
expect 0 stream write cam a.fits --dir "$tmp/other"
[[ -f other/cam.im.shm ]] || fail "--dir ignored"

# --wait with no writer: exit 1 after about the time given
start=$(date +%s.%N)
expect 1 stream read cam --out d.fits --wait 0.3
end=$(date +%s.%N)
python3 -c "import sys; d = $end - $start; sys.exit(0 if 0.29 < d < 3 else 1)" ||
    fail "--wait 0.3 took $end - $start"
[[ $err == *"no frame"* ]] || fail "--wait said: $err"
[[ ! -e d.fits ]] || fail "a failed read left d.fits"

expect 0 stream rm cam
expect 1 stream info cam
expect_one_line
expect_usage stream
expect_usage stream frobnicate cam
expect_usage stream read cam
expect_usage stream read cam --out x.png
expect_usage stream write cam
expect_usage stream info cam --type u8
expect_usage stream write cam a.fits --type q7
expect 1 stream write bad/name a.fits
expect_one_line
echo "ok"
