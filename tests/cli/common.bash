# Shared by the end-to-end tests of the command (tests/cli/test_*.sh); sourced, not run.
# Sets SW (the spotwave binary, absolute) from $1 and tmp (a private directory removed at exit),
# and defines:
#   fail MSG...              print "FAIL: MSG" on stderr and exit 1
#   run ARGS...              run spotwave; sets rc, out (stdout) and err (stderr)
#   expect WANT_RC ARGS...   run and check the exit code
#   expect_one_line ARGS...  stderr of the last run is one line starting with "spotwave"
#   expect_usage ARGS...     a usage error: exit 2, one line, pointing at --help

SW=${1:?usage: $0 PATH/TO/spotwave}
SW=$(cd "$(dirname "$SW")" && pwd)/$(basename "$SW") # tests may change directory
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

run() {
    set +e
    "$SW" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}

expect() {
    local want=$1
    shift
    run "$@"
    [[ $rc == "$want" ]] || fail "'spotwave $*' exited $rc, expected $want; stderr: $err"
}

expect_one_line() {
    local n
    n=$(printf '%s\n' "$err" | grep -c . || true)
    [[ $n == 1 ]] || fail "'spotwave $*': expected one line on stderr, got $n: $err"
    [[ $err == spotwave* ]] || fail "'spotwave $*': stderr does not start with 'spotwave': $err"
}

expect_usage() {
    expect 2 "$@"
    expect_one_line "$@"
    [[ $err == *--help* ]] || fail "'spotwave $*': the usage error does not mention --help: $err"
}
