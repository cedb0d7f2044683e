#!/usr/bin/env bash
# `spotwave loop`: a tiny closed loop (8 x 8 lenslets, geometric SH model, 30 frames, CPU) from a
# configuration file: the per-frame CSV (30 rows, the long exposure only after the warm-up), the
# JSON summary against the CSV, the plot (a valid RGB PNG of the stated size with the curves'
# colours on it), the phase maps; the closed loop's residual below the open loop's (whose mirror
# never moves), the same seed giving the same run, the order of configuration sources; and exit
# codes: 2 (one line naming the key and the line, pointing at --help) for bad keys, values and
# lines, 1 for a configuration file that cannot be read.
# Usage: test_cli_loop.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the outputs"

cat >"$tmp/check.py" <<'EOF'
import json, math, struct, sys, zlib

def read_csv(path):
    lines = [l.strip() for l in open(path) if l.strip()]
    names = lines[0].split(",")
    return names, [dict(zip(names, map(float, l.split(",")))) for l in lines[1:]]

def read_png(path):
    """(width, height, colour type, rows of RGB tuples) of an 8-bit non-interlaced PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, ("bad CRC", kind)
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert depth == 8 and interlace == 0, ihdr
    bpp = {0: 1, 2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * bpp
    assert len(raw) == h * (stride + 1), "image data size"
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, ctype, rows

def fits_size(path):
    data = open(path, "rb").read(2880 * 4)
    cards = {}
    for i in range(0, len(data), 80):
        card = data[i:i + 80].decode("ascii")
        if card[:8].strip() == "END":
            break
        if card[8:10] == "= ":
            cards[card[:8].strip()] = card[10:].split("/")[0].strip()
    return int(cards["BITPIX"]), int(cards["NAXIS1"]), int(cards["NAXIS2"])

cmd = sys.argv[1]
if cmd == "csv":  # csv REPORT.csv FRAMES WARMUP: the table's shape and ranges
    path, frames, warmup = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    names, rows = read_csv(path)
    assert names == ["frame", "turbulence_nm", "residual_nm", "strehl", "marechal",
                     "command_rms_um", "long_strehl"], names
    assert len(rows) == frames, len(rows)
    for i, r in enumerate(rows):
        assert r["frame"] == i + 1, r
        assert r["turbulence_nm"] > 0 and r["residual_nm"] >= 0 and r["command_rms_um"] >= 0, r
        assert 0 <= r["strehl"] <= 1 + 1e-9 and 0 <= r["marechal"] <= 1, r
        # the long exposure starts after the warm-up
        assert math.isnan(r["long_strehl"]) == (i + 1 <= warmup), r
        if i + 1 > warmup:
            assert 0 < r["long_strehl"] <= 1 + 1e-9, r
elif cmd == "summary":  # summary OUT.json REPORT.csv: the summary agrees with the table
    s = json.load(open(sys.argv[2]))
    _, rows = read_csv(sys.argv[3])
    w = s["warmup"]
    after = rows[w:]
    assert s["frames"] == len(rows), s
    close = lambda a, b: abs(a - b) <= 1e-6 * max(abs(b), 1e-12)
    assert close(s["long_strehl"], rows[-1]["long_strehl"]), s
    assert close(s["residual_nm_mean"], sum(r["residual_nm"] for r in after) / len(after)), s
    assert close(s["turbulence_nm_mean"], sum(r["turbulence_nm"] for r in after) / len(after)), s
    assert close(s["strehl_mean"], sum(r["strehl"] for r in after) / len(after)), s
    assert close(s["residual_nm_last"], rows[-1]["residual_nm"]), s
    assert s["fitting_error_nm"] > 0 and s["frames_per_s"] > 0, s
elif cmd == "differ":  # differ A.csv B.csv: another turbulence in the first frame
    _, a = read_csv(sys.argv[2])
    _, b = read_csv(sys.argv[3])
    assert a[0]["turbulence_nm"] != b[0]["turbulence_nm"], (a[0], b[0])
elif cmd == "json":  # json OUT.json EXPR
    r = json.load(open(sys.argv[2]))
    assert eval(sys.argv[3]), r
elif cmd == "closed":  # closed CLOSED.csv OPEN.csv WARMUP TOL: the loop corrects
    _, c = read_csv(sys.argv[2])
    _, o = read_csv(sys.argv[3])
    w, tol = int(sys.argv[4]), float(sys.argv[5])
    # the same screen (same seed): the same turbulence frame by frame (TOL: relative, loose
    # between backends)
    for a, b in zip(c, o):
        assert abs(a["turbulence_nm"] - b["turbulence_nm"]) <= tol * b["turbulence_nm"], (a, b)
    # open loop: the mirror stays flat, the residual is the turbulence
    for r in o:
        assert r["command_rms_um"] == 0, r
        assert abs(r["residual_nm"] - r["turbulence_nm"]) <= 0.01 * r["turbulence_nm"], r
    mc = sum(r["residual_nm"] for r in c[w:]) / len(c[w:])
    mo = sum(r["residual_nm"] for r in o[w:]) / len(o[w:])
    assert c[-1]["residual_nm"] < o[-1]["residual_nm"], (c[-1], o[-1])
    assert mc < 0.7 * mo, ("closed-loop residual not well below the open loop's", mc, mo)
    assert c[-1]["long_strehl"] > o[-1]["long_strehl"], (c[-1], o[-1])
    assert any(r["command_rms_um"] > 0 for r in c), "the closed loop never moved the mirror"
elif cmd == "png":  # png PLOT.png W H: an RGB PNG of that size with the curves' colours
    w, h, ctype, rows = read_png(sys.argv[2])
    assert (w, h) == (int(sys.argv[3]), int(sys.argv[4])), (w, h)
    assert ctype == 2, ("not RGB", ctype)
    counts = {}
    for line in rows:
        for i in range(0, len(line), 3):
            k = bytes(line[i:i + 3])
            counts[k] = counts.get(k, 0) + 1
    white = counts.get(b"\xff\xff\xff", 0)
    assert white > 0.5 * w * h, "mostly background expected"
    assert counts.get(b"\x00\x00\x00", 0) > 1000, "axes, ticks and labels expected in black"
    # short Strehl / residual blue, long Strehl orange, turbulence red, fitting error green
    for rgb in [(31, 119, 180), (255, 127, 14), (214, 39, 40), (44, 160, 44)]:
        assert counts.get(bytes(rgb), 0) > 30, ("curve colour missing", rgb)
elif cmd == "fits":  # fits MAP.fits SIDE
    bitpix, w, h = fits_size(sys.argv[2])
    side = int(sys.argv[3])
    assert bitpix == -32 and (w, h) == (side, side), (bitpix, w, h)
EOF
check() { python3 "$tmp/check.py" "$@"; }

cat >"$tmp/tiny.cfg" <<'EOF'
# a tiny system for the tests
nx = 8
model = geometric   # fast
frames = 30

samples = 4
gain=0.5
EOF
B=(--backend cpu)

# ---------------------------------------------------------------- help, registration
expect 0 loop --help
[[ $out == *"Usage: spotwave [GLOBAL OPTIONS] loop"* ]] || fail "loop --help: $out"
expect 0 --help
[[ $out == *"loop "* ]] || fail "loop is not listed in spotwave --help"

# ---------------------------------------------------------------- the tiny closed loop
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --report "$tmp/c.csv" --plot "$tmp/c.png" \
    --maps "$tmp/m_" --json
printf '%s\n' "$out" >"$tmp/c.json"
check csv "$tmp/c.csv" 30 20 || fail "closed loop: the report table"
check summary "$tmp/c.json" "$tmp/c.csv" || fail "closed loop: summary vs table: $out"
check json "$tmp/c.json" "r['subcommand'] == 'loop' and r['frames'] == 30 and r['warmup'] == 20 and r['config']['nx'] == 8 and r['config']['model'] == 'geometric' and r['config']['samples'] == 4 and r['config']['gain'] == 0.5 and r['config']['frames'] == 30 and r['config']['magnitude'] is None and r['config']['recon'] == 'dsabre-local' and r['config']['r0_m'] == 0.15 and r['open_loop'] is False and r['backend'] == 'cpu' and r['modes'] is None and r['plot'].endswith('c.png') and len(r['maps']) == 3" ||
    fail "closed loop: JSON: $out"
check png "$tmp/c.png" 960 760 || fail "closed loop: the plot"
for m in turbulence correction residual; do
    check fits "$tmp/m_$m.fits" 32 || fail "map $m"
done

# The same seed gives the same run; another seed another screen.
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --report "$tmp/c2.csv"
cmp -s "$tmp/c.csv" "$tmp/c2.csv" || fail "the same configuration gave two different runs"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --seed 7 --frames 2 --set warmup=1 \
    --report "$tmp/c3.csv"
check differ "$tmp/c.csv" "$tmp/c3.csv" || fail "--seed 7 gave the same screen as seed 1"

# The text summary.
[[ $out == *"loop: dsabre-local, 8x8 lenslets"* && $out == *"config     nx=8"* && $out == *"seed=7"* ]] ||
    fail "text summary: $out"

# ---------------------------------------------------------------- open vs closed loop
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --open-loop --report "$tmp/o.csv" --json
printf '%s\n' "$out" >"$tmp/o.json"
check json "$tmp/o.json" "r['open_loop'] is True and r['config']['gain'] == 0" || fail "open loop: $out"
check closed "$tmp/c.csv" "$tmp/o.csv" 20 1e-6 || fail "the closed loop does not beat the open loop"

# The automatic backend (the GPU where there is one) corrects as well.
expect 0 loop --config "$tmp/tiny.cfg" --report "$tmp/a.csv" --json
printf '%s\n' "$out" >"$tmp/a.json"
check csv "$tmp/a.csv" 30 20 || fail "automatic backend: the report table"
check summary "$tmp/a.json" "$tmp/a.csv" || fail "automatic backend: summary vs table: $out"
check closed "$tmp/a.csv" "$tmp/o.csv" 20 1e-3 ||
    fail "automatic backend: the closed loop does not beat the open loop"

# MVM: the control matrix's modes are reported.
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --recon mvm --report "$tmp/v.csv" --json
printf '%s\n' "$out" >"$tmp/v.json"
check json "$tmp/v.json" "r['config']['recon'] == 'mvm' and isinstance(r['modes'], int) and 0 < r['modes'] <= 81" ||
    fail "mvm: $out"
check closed "$tmp/v.csv" "$tmp/o.csv" 20 1e-6 || fail "mvm: the closed loop does not beat the open loop"

# The distributed projection on the pupil only (a matrix per partition): named and closing.
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --recon dsabre-local-pupil --report "$tmp/p.csv" --json
printf '%s\n' "$out" >"$tmp/p.json"
check json "$tmp/p.json" "r['config']['recon'] == 'dsabre-local-pupil'" || fail "dsabre-local-pupil: $out"
check closed "$tmp/p.csv" "$tmp/o.csv" 20 1e-6 ||
    fail "dsabre-local-pupil: the closed loop does not beat the open loop"

# The sensor's slope gain: reported; uncalibrated on diffraction spots that lose it (10 px
# lenslets: ~0.81), a warning; calibrated (the default), none.
check json "$tmp/c.json" "len(r['slope_gain']) == 2 and 0.5 < r['slope_gain'][0] < 2 and r['config']['slope_calibration'] == 1 and r['config']['threshold_peak'] == 0 and r['warnings'] == []" ||
    fail "slope gain: $out"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --frames 3 --set warmup=1 --set model=diffraction \
    --set px_per_lenslet=10 --set slope_calibration=0 --json
printf '%s\n' "$out" >"$tmp/g.json"
check json "$tmp/g.json" "r['slope_gain'][0] < 0.9 and any('slope gain' in w for w in r['warnings'])" ||
    fail "uncalibrated slope gain: no warning: $out"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --frames 3 --set warmup=1 --set model=diffraction \
    --set px_per_lenslet=10 --json
printf '%s\n' "$out" >"$tmp/g.json"
check json "$tmp/g.json" "r['slope_gain'][0] < 0.9 and r['warnings'] == []" ||
    fail "calibrated slope gain: a warning: $out"

# ---------------------------------------------------------------- configuration sources
# the file, then the options and --set in the order given
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --frames 22 --gain 0.4 --set gain=0.3 \
    --set 'coupling = 0.25' --magnitude none --set L0_m=30 --set warmup=2 --json
printf '%s\n' "$out" >"$tmp/s.json"
check json "$tmp/s.json" "r['frames'] == 22 and r['warmup'] == 2 and r['config']['gain'] == 0.3 and r['config']['coupling'] == 0.25 and r['config']['L0_m'] == 30" ||
    fail "settings: $out"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --set gain=0.3 --gain 0.2 --set warmup=2 \
    --frames 3 --json
printf '%s\n' "$out" >"$tmp/s.json"
check json "$tmp/s.json" "r['config']['gain'] == 0.2 and r['frames'] == 3" || fail "option order: $out"

# ---------------------------------------------------------------- errors
printf 'nx = 8\nfoo = 3\n' >"$tmp/badkey.cfg"
expect_usage loop --config "$tmp/badkey.cfg"
[[ $err == *"badkey.cfg:2: unknown key 'foo'"* ]] || fail "unknown key: $err"
printf '# gain\n\ngain = fast\n' >"$tmp/badval.cfg"
expect_usage loop --config "$tmp/badval.cfg"
[[ $err == *badval.cfg:3:*gain*fast* ]] || fail "bad value: $err"
printf 'nx 8\n' >"$tmp/noeq.cfg"
expect_usage loop --config "$tmp/noeq.cfg"
[[ $err == *noeq.cfg:1:*"key = value"* ]] || fail "no '=': $err"
printf 'coupling = 1.5\n' >"$tmp/range.cfg"
expect_usage loop --config "$tmp/range.cfg"
[[ $err == *range.cfg:1:*coupling*1.5* ]] || fail "coupling out of range: $err"
printf 'model =\n' >"$tmp/empty.cfg"
expect_usage loop --config "$tmp/empty.cfg"
[[ $err == *empty.cfg:1:*model* ]] || fail "empty value: $err"
# a repeated key and a NUL byte: errors with the file and line (the fuzz target holds the
# invariants: tests/fuzz/fuzz_cli_loop.c)
printf 'nx = 8\n# frames\ngain = 0.3\nsamples = 4\n\ngain=0.4\n' >"$tmp/twice.cfg"
expect_usage loop --config "$tmp/twice.cfg"
[[ $err == *"twice.cfg:6: key 'gain' repeated (first at line 3)"* ]] || fail "repeated key: $err"
printf 'nx = 8\nsamples = 4\nga\0in = 0.3\n' >"$tmp/nul.cfg"
expect_usage loop --config "$tmp/nul.cfg"
[[ $err == *"nul.cfg:3: a NUL byte (column 3)"* ]] || fail "NUL byte: $err"
printf 'nx = 8 # \0 even in a comment\n' >"$tmp/nul2.cfg"
expect_usage loop --config "$tmp/nul2.cfg"
[[ $err == *"nul2.cfg:1: a NUL byte"* ]] || fail "NUL byte in a comment: $err"
{ printf 'nx = 8\n# '; head -c 1100 /dev/zero | tr '\0' x; printf '\n'; } >"$tmp/long.cfg"
expect_usage loop --config "$tmp/long.cfg"
[[ $err == *"long.cfg:2: longer than 1024 characters"* ]] || fail "long line: $err"
# the command line may still override what the file sets (once)
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --set gain=0.3 --gain 0.2 --frames 3 \
    --set warmup=2 --json

expect_usage loop --set bogus=1
[[ $err == *bogus* ]] || fail "--set unknown key: $err"
expect_usage loop --set gain
expect_usage loop --gain abc
[[ $err == *--gain*abc* ]] || fail "--gain abc: $err"
expect_usage loop --recon zonal
expect_usage loop --magnitude bright
expect_usage loop --frames 0
expect_usage loop --set frames=10 # not more than the 20 warm-up frames
[[ $err == *warmup* ]] || fail "frames <= warmup: $err"
expect_usage loop --plot "$tmp/p.jpg"
expect_usage loop --report - --json
expect_usage loop extra
expect_usage loop --frobnicate
expect 1 loop --config "$tmp/missing.cfg"
expect_one_line loop missing
[[ $err == *missing.cfg* ]] || fail "missing configuration: $err"

# Parameters the simulator refuses (H-PME needs a power of two), files that cannot be written:
# one failure line.
expect 1 --backend cpu loop --config "$tmp/tiny.cfg" --partitions 3
expect_one_line loop partitions 3
[[ $err == *"power of two"* ]] || fail "--partitions 3: $err"
expect 1 --backend cpu loop --config "$tmp/tiny.cfg" --frames 2 --set warmup=1 \
    --plot "$tmp/no/such/dir/p.png"
expect_one_line loop plot
[[ $err == *no/such/dir/p.png* ]] || fail "unwritable plot: $err"

# ---------------------------------------------------------------- physics guards
# A normal loop is clean: no warnings, not diverged, nothing saturated (the closed loop above).
check json "$tmp/c.json" "r['warnings'] == [] and r['diverged'] is False and r['divergence_frame'] is None and r['saturated_frames'] == 0 and r['gain_max_stable'] == 2 and r['loop_delay_frames'] == 1 and r['strict'] is False" ||
    fail "the normal loop has guard flags: $(cat "$tmp/c.json")"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --frames 22 --set warmup=2 --strict
[[ $out != *warning* && -z $err ]] || fail "a normal loop under --strict: $out $err"

# Gains far out of range are usage errors (exit 2) before anything runs.
for g in 1e30 11 -0.5 inf nan; do
    expect_usage loop --config "$tmp/tiny.cfg" --gain "$g"
done
expect_usage loop --config "$tmp/tiny.cfg" --gain 1e30
[[ $err == *"gain 1e+30 is far outside the stable range"*"limit is 2 for a delay of 1 frame"* ]] ||
    fail "gain 1e30: $err"

# Just above the stable limit (delay 0: the loop delay is 1 frame, g_max = 2; delay 1: 1): a
# warning in the summary, the JSON and on stderr; exit 0, or 1 under --strict.
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --gain 2.05 --frames 22 --set warmup=2
[[ $out == *"  warning    gain 2.05 is above the stable limit 2 of the integrator"* ]] ||
    fail "gain 2.05: no warning in the summary: $out"
[[ $err == *"spotwave loop: warning: gain 2.05"* ]] || fail "gain 2.05: no warning on stderr: $err"
expect 1 "${B[@]}" loop --config "$tmp/tiny.cfg" --gain 2.05 --frames 22 --set warmup=2 \
    --strict --report "$tmp/strict.csv"
[[ $err == *"--strict: 1 warning"* ]] || fail "gain 2.05 --strict: $err"
check csv "$tmp/strict.csv" 22 2 || fail "--strict: the report is still written"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --set delay=1 --gain 1.02 --frames 22 \
    --set warmup=2 --json
printf '%s\n' "$out" >"$tmp/g.json"
check json "$tmp/g.json" "abs(r['gain_max_stable'] - 1) < 1e-12 and r['loop_delay_frames'] == 2 and len(r['warnings']) >= 1 and 'stable limit 1 ' in r['warnings'][0]" ||
    fail "delay 1, gain 1.02: $out"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --set delay=1 --gain 0.95 --frames 22 \
    --set warmup=2 --strict

# A loop that does diverge: the frame it started, exit 1 under --strict.
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --recon mvm --gain 3 --set warmup=2 \
    --report "$tmp/d.csv" --json
printf '%s\n' "$out" >"$tmp/d.json"
check json "$tmp/d.json" "r['diverged'] is True and 2 <= r['divergence_frame'] <= 26 and any('diverged from frame %d' % r['divergence_frame'] in w for w in r['warnings'])" ||
    fail "gain 3: no divergence flagged: $out"
python3 - "$tmp/d.csv" "$tmp/d.json" <<'PY' || fail "the divergence frame does not match the table"
import json, sys
rows = [l.strip().split(",") for l in open(sys.argv[1])][1:]
f0 = json.load(open(sys.argv[2]))["divergence_frame"]
ratio = {int(r[0]): float(r[2]) / float(r[1]) for r in rows}
assert all(ratio[f] > 2 for f in range(f0, f0 + 5)), ratio
assert f0 == 1 or not all(ratio[f] > 2 for f in range(f0 - 1, f0 + 4)), ratio  # the first run
PY
expect 1 "${B[@]}" loop --config "$tmp/tiny.cfg" --recon mvm --gain 3 --set warmup=2 --strict
[[ $err == *"--strict: 2 warnings"* ]] || fail "gain 3 --strict: $err"

# A saturated mirror: a stroke limit far below the turbulence clips most commands.
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --set clip=0.01 --frames 22 --set warmup=2 --json
printf '%s\n' "$out" >"$tmp/s.json"
check json "$tmp/s.json" "r['saturated_frames'] >= 15 and any('saturated' in w for w in r['warnings'])" ||
    fail "clip 0.01: no saturation counted: $out"
expect 0 "${B[@]}" loop --config "$tmp/tiny.cfg" --set clip=1000 --frames 22 --set warmup=2 --json
printf '%s\n' "$out" >"$tmp/s.json"
check json "$tmp/s.json" "r['saturated_frames'] == 0 and r['warnings'] == []" ||
    fail "clip 1000: saturation counted: $out"

# Drift (issue 30): D-SABRE with a stroke limit and no filter lets piston and waffle wander
# until the mirror saturates and the residual climbs, with no frame above 2 x the turbulence:
# the trend flags it. The default filter keeps the same loop bounded and clean.
drift=(loop --set nx=8 --set diameter_m=3 --set samples=4 --set px_per_lenslet=8
    --set recon=dsabre-local --set partitions=2 --set clip=0.7 --frames 800 --json)
expect 0 "${B[@]}" --threads 1 "${drift[@]}" --set unseen=none
printf '%s\n' "$out" >"$tmp/t.json"
check json "$tmp/t.json" "r['diverged'] is True and r['divergence_reason'] == 'trend' and r['trend']['residual_growth'] > 0.5 and r['trend']['residual_ratio_growth'] > 0.5 and r['divergence_frame'] > 20 and any('diverging' in w for w in r['warnings'])" ||
    fail "the drifting loop is not flagged by its trend: $out"
expect 0 "${B[@]}" --threads 1 "${drift[@]}"
printf '%s\n' "$out" >"$tmp/t2.json"
check json "$tmp/t2.json" "r['config']['unseen'] == 'piston-waffle' and r['diverged'] is False and r['divergence_reason'] is None and r['saturated_frames'] == 0 and abs(r['trend']['residual_growth']) < 0.5 and r['residual_nm_mean'] < 0.75 * json.load(open('$tmp/t.json'))['residual_nm_mean']" ||
    fail "the filtered loop: $out"

# PI over the mirror's KL modes on the default 32 x 32 square pupil (more samples than the KL
# computation takes at 4 a lenslet: the loop samples it more coarsely)
expect 0 --threads 1 loop --set controller=pi --set modal=kl --set model=geometric --set warmup=2 --frames 5 --json
printf '%s\n' "$out" >"$tmp/kl.json"
check json "$tmp/kl.json" "r['config']['modal'] == 'kl' and r['frames'] == 5" ||
    fail "the loop over KL modes: $out"

echo "test_cli_loop: ok"
