#!/usr/bin/env bash
# `mpirun -np N spotwave pupil` and `... aberrometry` (cli/mpi.c, sw_cli_mpi_gather_frames):
# seven synthetic eyes (PGM, FITS and Eiger-like HDF5 from `spotwave sim eye`) dealt to 2 and
# 3 processes give the same outputs as one process, byte for byte: pupil's CSV, --lenslet-mask
# table and --overlay; aberrometry's Zernike CSV, --map and --spots (the last frame's pictures
# and lenslets: another rank ran it, rank 0 runs it again); the --json reports have mpi_ranks,
# frames_per_rank and the same per-frame results. A corrupt frame is reported by its rank with
# its file; the run fails and writes nothing. Skips (77) without mpirun or an MPI build.
# Usage: test_cli_mpi_frames.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/mpi.bash" # skips without mpirun or MPI; mpi NP ARGS...
command -v python3 >/dev/null || fail "python3 is needed to read the JSON reports"
# OpenBLAS splits its sums by its thread count, and a rank bound to one core runs fewer threads
# than one process: with one BLAS thread everywhere the fits agree bit for bit (README)
export OPENBLAS_NUM_THREADS=1

mkdir "$tmp/data"
cd "$tmp/data"
eye=(--size 320x320 --pitch 16 --grid 20x20 --focal-mm 2.1875 --rms-um 1.5)
files=()
for i in $(seq 1 7); do
    case $((i % 3)) in
    0) ext=fits ;;
    1) ext=pgm ;;
    2) ext=h5 ;;
    esac
    ref=()
    [[ $i == 1 ]] && ref=(--reference ref.pgm)
    expect 0 sim eye "${eye[@]}" --seed "$i" --out "eye$i.$ext" "${ref[@]}"
    files+=("../data/eye$i.$ext")
done
grid=(--pitch 16 --grid 20x20 --origin 0,0)

pupil_args=(pupil "${files[@]}" "${grid[@]}" --out pupils.csv --lenslet-mask lenslets.csv
            --overlay overlay.png --json)
ab_args=(aberrometry "${files[@]}" --reference ../data/ref.pgm --focal-mm 2.1875 --out z.csv
         --map map.fits --spots spots.csv --json)
mkdir "$tmp/one" "$tmp/np2" "$tmp/np3"
cd "$tmp/one"
expect 0 "${pupil_args[@]}"
printf '%s\n' "$out" >pupil.json
expect 0 "${ab_args[@]}"
printf '%s\n' "$out" >ab.json
[[ $(wc -l <pupils.csv) == 8 ]] || fail "one process: pupils.csv has $(wc -l <pupils.csv) lines, not 8"
for np in 2 3; do
    cd "$tmp/np$np"
    mpi "$np" "${pupil_args[@]}"
    [[ $rc == 0 ]] || fail "mpirun -np $np pupil exited $rc: $err"
    printf '%s\n' "$out" >pupil.json
    mpi "$np" "${ab_args[@]}"
    [[ $rc == 0 ]] || fail "mpirun -np $np aberrometry exited $rc: $err"
    printf '%s\n' "$out" >ab.json
    for f in pupils.csv lenslets.csv overlay.png z.csv map.fits spots.csv; do
        cmp "$tmp/one/$f" "$f" || fail "-np $np: $f differs from one process's"
    done
done
python3 - "$tmp" <<'EOF' || fail "the --json reports of mpirun differ from one process's"
import json, sys
t = sys.argv[1]
for cmd, key in (("pupil", "frames"), ("ab", "frames")):
    one = json.load(open("%s/one/%s.json" % (t, cmd)))
    assert one["mpi_ranks"] == 1 and one["frames_per_rank"] == [7], one["frames_per_rank"]
    for np, per in ((2, [4, 3]), (3, [3, 2, 2])):
        r = json.load(open("%s/np%d/%s.json" % (t, np, cmd)))
        assert r["mpi_ranks"] == np and r["frames_per_rank"] == per, (cmd, np, r["frames_per_rank"])
        assert r[key] == one[key], (cmd, np, "per-frame results differ")
EOF

# a corrupt bitshuffle/LZ4 chunk in the fourth of six files: rank 1 of 3 reads it
cd "$tmp/data"
corrupt_chunk eye2.h5 corrupt.h5 $((320 * 320))
bad=(../data/eye1.pgm ../data/eye2.h5 ../data/eye3.fits ../data/corrupt.h5 ../data/eye4.pgm
     ../data/eye5.h5)
mkdir "$tmp/bad"
cd "$tmp/bad"
for cmd in pupil aberrometry; do
    extra=("${grid[@]}")
    [[ $cmd == aberrometry ]] && extra=(--reference ../data/ref.pgm --focal-mm 2.1875)
    mpi 3 "$cmd" "${bad[@]}" "${extra[@]}" --out out.csv
    [[ $rc != 0 ]] || fail "mpirun -np 3 $cmd over a corrupt file succeeded"
    [[ $err == *"MPI rank 1 of 3: frame 3 ('../data/corrupt.h5', its frame 0) failed"* ]] ||
        fail "$cmd: rank 1 does not report the corrupt frame: $err"
    [[ $err == *"1 of 3 MPI ranks failed"*"finished their 4 frames"* ]] ||
        fail "$cmd: rank 0 does not list the failed frame and the finished ones: $err"
    [[ ! -e out.csv && -z $out ]] || fail "a failed MPI $cmd run wrote its outputs"
done

# a rank that fails before its frames (its own folder's second input is not an image: each rank
# runs in folder r0 or r1 by its rank) stops every rank there: the failure is reported once, no
# rank claims a failed frame, and none waits for another's results (rank 0 failing or another)
mkdir "$tmp/r0" "$tmp/r1"
cp "$tmp/data/eye1.pgm" "$tmp/data/eye4.pgm" "$tmp/data/ref.pgm" "$tmp/r0/"
cp "$tmp/data/eye1.pgm" "$tmp/data/ref.pgm" "$tmp/r1/"
echo junk >"$tmp/r1/eye4.pgm"
for cmd in pupil aberrometry; do
    extra=("${grid[@]}")
    [[ $cmd == aberrometry ]] && extra=(--reference ref.pgm --focal-mm 2.1875)
    for shift in 0 1; do
        set +e
        ASAN_OPTIONS=$mpi_asan LSAN_OPTIONS=$mpi_lsan timeout 60 mpirun --oversubscribe -np 2 \
            sh -c 'cd "$1/r$(((${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}} + $2) % 2))" && shift 2 &&
                   exec "$@"' sh "$tmp" "$shift" "$SW" "$cmd" eye1.pgm eye4.pgm "${extra[@]}" \
            --out out.csv >"$tmp/out" 2>"$tmp/err"
        rc=$?
        set -e
        err=$(cat "$tmp/err")
        [[ $rc != 0 && $rc != 124 ]] || fail "$cmd, rank $((1 - shift)) failing before the frames: exit $rc: $err"
        [[ $err == *"'eye4.pgm' is none of"* ]] || fail "$cmd: the failing rank's message is missing: $err"
        [[ $err != *"failed (above)"* && $err != *"MPI ranks failed"* && $err != *"out of memory"* ]] ||
            fail "$cmd, rank $((1 - shift)) failing before the frames: a frame is reported as failed: $err"
        [[ ! -e "$tmp/r0/out.csv" && ! -e "$tmp/r1/out.csv" ]] || fail "$cmd wrote its outputs"
    done
done
