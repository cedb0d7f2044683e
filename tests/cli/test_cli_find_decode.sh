#!/usr/bin/env bash
# spotwave find --decode: bitshuffle/LZ4 HDF5 frames decoded on the GPU give the same spots (the
# CSV byte for byte) as the CPU decoder, over several files (frames in flight while others are
# decoded), with --3d too; --json names the decoder that ran and how many frames it decoded; a
# damaged chunk fails the run with the CPU decoder's reason. Usage errors are checked everywhere;
# the GPU part skips (77) without a usable GPU or without the bitshuffle filter to write files.
set -euo pipefail
source "$(dirname "$0")/common.bash" "$@"

expect_usage find x.h5 --decode fast
expect_usage find x.h5 --decode
expect_usage find --follow "$tmp" --decode gpu

# files written by sw_h5_write (the command's .h5 writer: bitshuffle/LZ4 with the filter)
for i in 1 2 3 4 5; do
    expect 0 --backend cpu sim stars --random 120 --size 320x256 --sigma 1.1 --sky-e 2 \
        --mag-range "4,9" --bits 16 --seed "$i" --out "$tmp/f$i.h5"
done
files=("$tmp"/f1.h5 "$tmp"/f2.h5 "$tmp"/f3.h5 "$tmp"/f4.h5 "$tmp"/f5.h5)
expect 0 --backend cpu find "${files[@]}" --decode cpu --out "$tmp/cpu.csv" --json
[[ $out == *'"decoder": "cpu"'* || $out == *'"decoder":"cpu"'* ]] ||
    fail "--decode cpu: --json does not say decoder cpu: $out"
expect 1 --backend cpu find "${files[@]}" --decode gpu --out "$tmp/x.csv"
[[ $err == *"--decode gpu: needs --backend cuda"* ]] || fail "--decode gpu on the CPU: $err"

run info --json
if ! python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["backend"] == "cuda" else 1)' \
    <<<"$out"; then
    echo "SKIP: no usable GPU: --decode gpu not run" >&2
    exit 77
fi
expect 0 --backend cuda find "${files[@]}" --decode cpu --out "$tmp/cuda_cpu.csv"
cmp -s "$tmp/cpu.csv" "$tmp/cuda_cpu.csv" || fail "the CUDA backend's spots differ from the CPU's"
expect 0 --backend cuda find "${files[@]}" --json --out "$tmp/auto.csv"
if [[ $out != *'"gpu_decoded_frames": 5'* && $out != *'"gpu_decoded_frames":5'* ]]; then
    echo "SKIP: these files are not bitshuffle/LZ4 read as chunks (no filter plugin?): $out" >&2
    exit 77
fi
[[ $out == *'"decoder": "gpu"'* || $out == *'"decoder":"gpu"'* ]] ||
    fail "--decode auto on CUDA: --json does not say decoder gpu: $out"
cmp -s "$tmp/cpu.csv" "$tmp/auto.csv" || fail "--decode auto (gpu) spots differ from --decode cpu"
expect 0 --backend cuda find "${files[@]}" --decode gpu --out "$tmp/gpu.csv"
cmp -s "$tmp/cpu.csv" "$tmp/gpu.csv" || fail "--decode gpu spots differ from --decode cpu"
expect 0 --backend cuda find "${files[@]}" --decode gpu --first 2 --count 2 --out "$tmp/g2.csv"
expect 0 --backend cpu find "${files[@]}" --decode cpu --first 2 --count 2 --out "$tmp/c2.csv"
cmp -s "$tmp/c2.csv" "$tmp/g2.csv" || fail "--first 2 --count 2: gpu and cpu differ"
expect 0 --backend cuda find "${files[@]}" --decode gpu --3d --out "$tmp/g3.csv"
expect 0 --backend cpu find "${files[@]}" --decode cpu --3d --out "$tmp/c3.csv"
cmp -s "$tmp/c3.csv" "$tmp/g3.csv" || fail "--3d: gpu and cpu differ"

# a damaged chunk in the third file: both decoders refuse it, the GPU with the CPU's reason
python3 - "$tmp/f3.h5" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
# the frame's one chunk is most of the file: damage a stretch in its middle
n = len(b)
for i in range(n // 2 - 500, n // 2 + 500):
    b[i] ^= 0x55
open(p, "wb").write(bytes(b))
PY
run --backend cpu find "${files[@]}" --decode cpu --out "$tmp/bad_cpu.csv"
cpu_rc=$rc
cpu_err=$err
run --backend cuda find "${files[@]}" --decode gpu --out "$tmp/bad_gpu.csv"
[[ $rc == "$cpu_rc" ]] || fail "damaged file: --decode gpu exits $rc, --decode cpu $cpu_rc ($err)"
if [[ $cpu_rc != 0 ]]; then
    [[ $err == *"frame 2"* ]] || fail "damaged file: the GPU's message does not name frame 2: $err"
    reason=${cpu_err##*(}
    reason=${reason%)*}
    [[ $err == *"$reason"* ]] || fail "damaged file: the GPU's reason is not the CPU's: $err / $cpu_err"
fi
echo "ok"
