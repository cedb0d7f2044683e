# Shared by the tests of the command under mpirun (tests/cli/test_cli_*mpi*.sh); sourced after
# common.bash, not run. Skips the test (77) without mpirun or when spotwave was built without
# MPI, and defines:
#   mpi NP ARGS...   spotwave ARGS under `mpirun -np NP`; sets rc, out (stdout) and err (stderr)
#   corrupt_chunk IN OUT BYTES   a copy of an HDF5 file with one bitshuffle/LZ4 chunk damaged
# plus mpi_asan, mpi_lsan: the sanitizer options an mpirun of spotwave needs (below).

if ! command -v mpirun >/dev/null; then
    echo "SKIP: no mpirun (Debian: openmpi-bin; scripts/install-deps)" >&2
    exit 77
fi
expect 0 info
if [[ $out != *"MPI support:   Open MPI"* && $out != *"MPI support:   "*"(MPI "* ]]; then
    echo "SKIP: spotwave was built without MPI (SW_WITH_MPI; Debian: libopenmpi-dev)" >&2
    exit 77
fi

# CI runs as root; Open MPI refuses that unless told. Several ranks on a 2-core machine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Under AddressSanitizer (the CI's sanitizer build) Open MPI's own allocations, kept for the
# life of the process, are not spotwave's leaks: suppressed by library, which needs whole stacks
# (the fast unwinder stops in Open MPI's components, unloaded by then). spotwave's own leaks are
# still reported (a leak planted in cli/mpi.c was).
printf 'leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\nleak:libhwloc.so\nleak:libevent\nleak:mca_\n' \
    >"$tmp/lsan.supp"
mpi_asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
mpi_lsan="suppressions=$tmp/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

mpi() {
    local np=$1
    shift
    set +e
    ASAN_OPTIONS=$mpi_asan LSAN_OPTIONS=$mpi_lsan \
        timeout 120 mpirun --oversubscribe -np "$np" "$SW" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}

# corrupt_chunk IN OUT BYTES: OUT is the HDF5 file IN with the first bitshuffle/LZ4 chunk of
# BYTES decoded bytes damaged (its first LZ4 block's length and first bytes), for a frame that a
# rank cannot read. Fails the test when no such chunk is found.
corrupt_chunk() {
    python3 - "$1" "$2" "$3" <<'EOF' || fail "no bitshuffle/LZ4 chunk found in $1 to corrupt"
import sys
d = bytearray(open(sys.argv[1], "rb").read())
size = int(sys.argv[3]).to_bytes(8, "big")  # the chunk header: decoded bytes, then block size
i = 0
while True:
    i = d.find(size, i + 1)
    assert i > 0
    block = int.from_bytes(d[i + 8:i + 12], "big")
    if 0 < block <= 65536 and block % 8 == 0:
        break
d[i + 12:i + 20] = b"\xa5" * 8  # the first LZ4 block's length and its first bytes
open(sys.argv[2], "wb").write(d)
EOF
}
