#!/usr/bin/env bash
# `mpirun -np N spotwave find` (cli/mpi.c): a dataset of twelve frames in twelve files (FITS,
# Eiger-like HDF5, TIFF, from `spotwave sim stars`) dealt to 2 and to 3 processes gives outputs
# byte-identical to one process: the spots CSV (written to a file and to standard output), the
# --summary lines, the --out-h5 table and the --strong-mask cube, with --refine (its results
# travel with the spots); the --json report of rank 0 has mpi_ranks, frames_per_rank and the
# same counts as one process. More ranks than frames works (a rank without frames). A corrupt
# HDF5 chunk among the files is reported by the rank that reads it, with its file and frame,
# the other ranks finish theirs, the run fails and writes nothing, as one process does; when
# rank 0 fails too, both failures are listed. --decode auto over bitshuffle/LZ4 files gives one
# process's spots and decoder; --decode gpu on the CPU backend fails with one process's error,
# printed once. --3d is refused under mpirun. Skips (77) without mpirun or when spotwave was built
# without MPI. (--decode gpu on GPUs: test_cli_find_mpi_gpu.sh.)
# Usage: test_cli_find_mpi.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/mpi.bash" # skips without mpirun or MPI; mpi NP ARGS...
command -v python3 >/dev/null || fail "python3 is needed to corrupt an HDF5 chunk and read JSON"

mkdir "$tmp/data"
cd "$tmp/data"
files=()
for i in $(seq 1 12); do
    case $((i % 3)) in
    0) ext=fits ;;
    1) ext=h5 ;;
    2) ext=tif ;;
    esac
    f=frame$i.$ext
    expect 0 sim stars --random 40 --size 128x128 --sigma 1.2 --sky-e 20 --seed "$i" --out "$f"
    files+=("../data/$f")
done

# the same command line in folders of their own, so that the FITS HISTORY (the command) agrees
args=(find "${files[@]}" --refine xwin --deblend --out spots.csv --summary summary.jsonl
      --out-h5 spots.h5 --strong-mask strong.fits --json)
mkdir "$tmp/one" "$tmp/np2" "$tmp/np3"
cd "$tmp/one"
expect 0 "${args[@]}"
printf '%s\n' "$out" >report.json
[[ $(wc -l <spots.csv) -gt 100 ]] || fail "one process found too few spots: $(wc -l <spots.csv) lines"
# blends in the later frames: their parent positions must survive the merge of the ranks' lists
python3 - spots.csv <<'EOF' || fail "no blend among the later frames: the parent merge is untested"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert any(int(r["parent"]) > len(rows) // 2 for r in rows)
EOF
for np in 2 3; do
    cd "$tmp/np$np"
    mpi "$np" "${args[@]}"
    [[ $rc == 0 ]] || fail "mpirun -np $np find exited $rc: $err"
    printf '%s\n' "$out" >report.json
    for f in spots.csv summary.jsonl spots.h5 strong.fits; do
        cmp "$tmp/one/$f" "$f" || fail "-np $np: $f differs from one process's"
    done
    [[ $(find . -name '.spotwave-*' | wc -l) == 0 ]] || fail "-np $np left a staging folder"
done
python3 - "$tmp" <<'EOF' || fail "the --json reports of mpirun differ from one process's: $(cat "$tmp/np3/report.json")"
import json, sys
t = sys.argv[1]
one = json.load(open(t + "/one/report.json"))
assert one["mpi_ranks"] == 1 and one["frames_per_rank"] == [12], one
for np, per in ((2, [6, 6]), (3, [4, 4, 4])):
    r = json.load(open("%s/np%d/report.json" % (t, np)))
    assert r["mpi_ranks"] == np and r["frames_per_rank"] == per, (np, r["mpi_ranks"], r["frames_per_rank"])
    for k in ("frames", "valid_pixels", "strong_pixels", "components", "spots", "rejected", "deblend"):
        assert r[k] == one[k], (np, k, r[k], one[k])
EOF

# the CSV on standard output (only rank 0 writes it); more ranks than frames
cd "$tmp/one"
expect 0 find "${files[@]}" --first 5 --count 2
printf '%s\n' "$out" >two_frames.csv
[[ $(wc -l <two_frames.csv) -gt 10 ]] || fail "frames 5-6 gave too few spots"
mpi 3 find "${files[@]}" --first 5 --count 2
[[ $rc == 0 ]] || fail "mpirun -np 3 over 2 frames exited $rc: $err"
[[ "$out" == "$(cat two_frames.csv)" ]] || fail "-np 3 over 2 frames: standard output differs"

# a corrupt chunk in the fifth of eight files: blocks of 3, 3 and 2 frames, rank 1 reads it
cd "$tmp/data"
corrupt_chunk frame1.h5 corrupt.h5 $((128 * 128 * 2))
bad=(../data/frame1.h5 ../data/frame2.tif ../data/frame3.fits ../data/frame4.h5 ../data/corrupt.h5
     ../data/frame5.tif ../data/frame6.fits ../data/frame7.h5)
mkdir "$tmp/bad1" "$tmp/bad3"
cd "$tmp/bad1"
expect 1 find "${bad[@]}" --out spots.csv
[[ $err == *corrupt.h5* ]] || fail "one process: the corrupt file is not named: $err"
cd "$tmp/bad3"
mpi 3 find "${bad[@]}" --out spots.csv --json
[[ $rc != 0 ]] || fail "mpirun -np 3 over a corrupt file succeeded: $out"
[[ $err == *"MPI rank 1 of 3: frame 4 ('../data/corrupt.h5', its frame 0) failed"* ]] ||
    fail "rank 1 does not report the corrupt frame: $err"
[[ $err == *"1 of 3 MPI ranks failed"*"4 ('../data/corrupt.h5' frame 0, rank 1)"*"finished their 5 frames"* ]] ||
    fail "rank 0 does not list the failed frame and the finished ones: $err"
[[ ! -e spots.csv && -z $out ]] || fail "a failed MPI run wrote its outputs"
[[ $(find . -name '.spotwave-*' | wc -l) == 0 ]] || fail "a failed MPI run left a staging folder"

# every rank fails, rank 0 too (its own frame first in the list)
mpi 2 find ../data/corrupt.h5 ../data/frame2.tif ../data/frame3.fits ../data/corrupt.h5 --out spots.csv
[[ $rc != 0 && $err == *"2 of 2 MPI ranks failed"*"0 ('../data/corrupt.h5' frame 0, rank 0), 3 ('../data/corrupt.h5' frame 0, rank 1)"* ]] ||
    fail "two failing ranks are not both listed: $err"
[[ ! -e spots.csv ]] || fail "a failed MPI run wrote its outputs"

# --decode auto (the default) over bitshuffle/LZ4 files only: a rank decodes its own chunks on
# its GPU when it has one (test_cli_find_mpi_gpu.sh), else on the CPU: the same spots either way
mkdir "$tmp/dec"
cd "$tmp/dec"
h5=(../data/frame1.h5 ../data/frame4.h5 ../data/frame7.h5 ../data/frame10.h5)
expect 0 find "${h5[@]}" --decode auto --out one.csv --json
one_decoder=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["decoder"], r["gpu_decoded_frames"])' <<<"$out")
mpi 2 find "${h5[@]}" --decode auto --out np2.csv --json
[[ $rc == 0 ]] || fail "mpirun -np 2 find --decode auto exited $rc: $err"
cmp one.csv np2.csv || fail "--decode auto: mpirun -np 2's spots differ from one process's"
np2_decoder=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["decoder"], r["gpu_decoded_frames"])' <<<"$out")
[[ $np2_decoder == "$one_decoder" ]] ||
    fail "--decode auto: mpirun -np 2 reports decoder $np2_decoder, one process $one_decoder"

# --decode gpu without a GPU (the CPU backend): the error of one process, once (rank 0; the other
# ranks share its node), exit 1, nothing written
expect 1 --backend cpu find "${h5[@]}" --decode gpu --out x.csv
one_err=$err
[[ $one_err == *"--decode gpu: needs --backend cuda"* ]] || fail "one process --decode gpu on the CPU: $one_err"
mpi 2 --backend cpu find "${h5[@]}" --decode gpu --out x.csv
[[ $rc == 1 ]] || fail "mpirun -np 2 --decode gpu on the CPU exited $rc, one process 1: $err"
[[ $(grep -cF -- "$one_err" <<<"$err") == 1 && $(grep -c -- "--decode gpu" <<<"$err") == 1 ]] ||
    fail "mpirun -np 2 --decode gpu on the CPU: not one process's error once: $err"
[[ ! -e x.csv ]] || fail "a refused --decode gpu wrote its output"

# --3d joins spots across frames: not dealt to ranks
mpi 2 find "${files[@]}" --3d --out spots3d.csv
[[ $rc != 0 && $err == *"--3d joins spots across frames"* ]] || fail "--3d under mpirun: $rc $err"
echo "ok: mpirun -np 2 and -np 3 give one process's outputs; a corrupt frame is reported by its rank"
