#!/usr/bin/env bash
# `mpirun -np N spotwave find --decode gpu` (cli/mpi.c, src/find/find_sequence.c): each rank reads
# the stored bitshuffle/LZ4 chunks of its block of frames and decodes them on its GPU (node-local
# rank modulo the GPUs: with one GPU the ranks share it). Eight Eiger-like HDF5 files from
# `spotwave sim stars` dealt to 2 and 3 processes give the spots CSV, the --summary lines and the
# --strong-mask cube of one process with --decode gpu, byte for byte, and the spots of --decode
# cpu; the --json report says decoder gpu, mpi_ranks, frames_per_rank and every frame decoded on a
# GPU (summed over the ranks). --decode auto picks the GPU under mpirun too. A corrupt chunk is
# reported by the rank that reads it with its file and frame, as with CPU decoding
# (test_cli_find_mpi.sh): the other ranks finish, the run fails and writes nothing. Label gpu;
# skips (77) without mpirun or MPI, without a usable GPU, or when the files are not read as
# chunks (no bitshuffle filter to write them).
# Usage: test_cli_find_mpi_gpu.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/mpi.bash" # skips without mpirun or MPI; mpi NP ARGS...
command -v python3 >/dev/null || fail "python3 is needed to corrupt an HDF5 chunk and read JSON"

run info --json
if ! python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["backend"] == "cuda" else 1)' \
    <<<"$out"; then
    echo "SKIP: no usable GPU: --decode gpu under mpirun not run" >&2
    exit 77
fi

mkdir "$tmp/data"
cd "$tmp/data"
files=()
for i in $(seq 1 8); do
    expect 0 --backend cpu sim stars --random 40 --size 128x128 --sigma 1.2 --sky-e 20 \
        --seed "$i" --out "f$i.h5"
    files+=("../data/f$i.h5")
done

# one process: the CPU decoder, then the GPU's (the same spots), in folders of their own so that
# the FITS HISTORY (the command line) agrees with the mpirun runs'
args=(--backend cuda find "${files[@]}" --decode gpu --out spots.csv --summary summary.jsonl
      --strong-mask strong.fits --json)
mkdir "$tmp/cpu" "$tmp/one" "$tmp/np2" "$tmp/np3" "$tmp/auto"
cd "$tmp/cpu"
expect 0 --backend cuda find "${files[@]}" --decode cpu --out spots.csv
cd "$tmp/one"
expect 0 "${args[@]}"
printf '%s\n' "$out" >report.json
if ! python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["gpu_decoded_frames"] == 8 else 1)' \
    <report.json; then
    echo "SKIP: these files are not bitshuffle/LZ4 read as chunks (no filter plugin?): $out" >&2
    exit 77
fi
[[ $(wc -l <spots.csv) -gt 100 ]] || fail "one process found too few spots: $(wc -l <spots.csv) lines"
cmp "$tmp/cpu/spots.csv" spots.csv || fail "one process: --decode gpu's spots differ from --decode cpu's"

for np in 2 3; do
    cd "$tmp/np$np"
    mpi "$np" "${args[@]}"
    [[ $rc == 0 ]] || fail "mpirun -np $np find --decode gpu exited $rc: $err"
    printf '%s\n' "$out" >report.json
    for f in spots.csv summary.jsonl strong.fits; do
        cmp "$tmp/one/$f" "$f" || fail "-np $np --decode gpu: $f differs from one process's"
    done
done
cd "$tmp/auto"
mpi 2 --backend cuda find "${files[@]}" --out spots.csv --json
[[ $rc == 0 ]] || fail "mpirun -np 2 find --decode auto exited $rc: $err"
printf '%s\n' "$out" >report.json
cmp "$tmp/one/spots.csv" spots.csv || fail "-np 2 --decode auto: the spots differ from one process's"
python3 - "$tmp" <<'EOF' || fail "the --json reports under mpirun: $(cat "$tmp/np3/report.json")"
import json, sys
t = sys.argv[1]
one = json.load(open(t + "/one/report.json"))
for run, np, per in (("np2", 2, [4, 4]), ("np3", 3, [3, 3, 2]), ("auto", 2, [4, 4])):
    r = json.load(open("%s/%s/report.json" % (t, run)))
    assert r["decoder"] == "gpu" and r["gpu_decoded_frames"] == 8, (run, r["decoder"], r["gpu_decoded_frames"])
    assert r["mpi_ranks"] == np and r["frames_per_rank"] == per, (run, r["mpi_ranks"], r["frames_per_rank"])
    for k in ("frames", "valid_pixels", "strong_pixels", "components", "spots", "rejected"):
        assert r[k] == one[k], (run, k, r[k], one[k])
EOF

# a corrupt chunk in the fifth of eight files: blocks of 3, 3 and 2 frames, rank 1 reads it as
# the second frame of its block (decoded while its first is processed)
cd "$tmp/data"
corrupt_chunk f1.h5 corrupt.h5 $((128 * 128 * 2))
bad=(../data/f1.h5 ../data/f2.h5 ../data/f3.h5 ../data/f4.h5 ../data/corrupt.h5 ../data/f5.h5
     ../data/f6.h5 ../data/f7.h5)
mkdir "$tmp/bad"
cd "$tmp/bad"
mpi 3 --backend cuda find "${bad[@]}" --decode cpu --out spots.csv
cpu_err=$(grep -F "MPI rank 1 of 3" <<<"$err" || true)
reason=${cpu_err##*(} # the CPU decoder's reason: "block 1 of N claims ... bytes ..."
reason=${reason%%)*}
[[ $rc != 0 && $reason == *block* ]] || fail "--decode cpu over a corrupt file: $rc $err"
mpi 3 --backend cuda find "${bad[@]}" --decode gpu --out spots.csv --json
[[ $rc != 0 ]] || fail "mpirun -np 3 --decode gpu over a corrupt file succeeded: $out"
[[ $err == *"MPI rank 1 of 3: frame 4 ('../data/corrupt.h5', its frame 0) failed: "*"frame 4"*"$reason"* ]] ||
    fail "rank 1 does not report the corrupt frame with the CPU decoder's reason ($reason): $err"
[[ $err == *"1 of 3 MPI ranks failed"*"4 ('../data/corrupt.h5' frame 0, rank 1)"*"finished their 5 frames"* ]] ||
    fail "rank 0 does not list the failed frame and the finished ones: $err"
[[ ! -e spots.csv && -z $out ]] || fail "a failed MPI run wrote its outputs"
[[ $(find . -name '.spotwave-*' | wc -l) == 0 ]] || fail "a failed MPI run left a staging folder"
# rank 0's first frame corrupt too: both listed
mpi 2 --backend cuda find ../data/corrupt.h5 ../data/f2.h5 ../data/f3.h5 ../data/corrupt.h5 \
    --decode gpu --out spots.csv
[[ $rc != 0 && $err == *"2 of 2 MPI ranks failed"*"0 ('../data/corrupt.h5' frame 0, rank 0), 3 ('../data/corrupt.h5' frame 0, rank 1)"* ]] ||
    fail "two failing ranks are not both listed: $err"
[[ ! -e spots.csv ]] || fail "a failed MPI run wrote its outputs"
echo "ok: mpirun -np 2 and -np 3 with --decode gpu give one process's outputs; a corrupt chunk is reported by its rank"
