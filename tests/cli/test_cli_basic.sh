#!/usr/bin/env bash
# The command's contract (DESIGN.md, "The command"): help, version, exit codes 0/1/2, one clear
# line on stderr for failures, --help on every subcommand, `info --json` is valid JSON.
# Usage: test_cli_basic.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

command -v python3 >/dev/null || fail "python3 is needed to check the JSON output"

# ---------------------------------------------------------------- help and version
expect 0 --help
[[ $out == *"Usage: spotwave"* ]] || fail "--help: no usage line: $out"
[[ $out == *"Subcommands:"* ]] || fail "--help: no subcommand list"
[[ $out == *"--backend"* && $out == *"--threads"* && $out == *"--quiet"* ]] ||
    fail "--help: global options missing"
[[ -z $err ]] || fail "--help wrote to stderr: $err"
expect 0 -h
expect 0 help

expect 0 --version
[[ $out =~ ^spotwave\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "--version printed '$out'"
version=${out#spotwave }

# ---------------------------------------------------------------- usage errors (exit 2)
expect_usage
expect_usage frobnicate
[[ $err == *frobnicate* ]] || fail "unknown subcommand not named: $err"
expect_usage --frobnicate info
expect_usage info --frobnicate
[[ $err == *--frobnicate* ]] || fail "unknown option not named: $err"
expect_usage info -z
expect_usage info unexpected-argument
expect_usage info --json=yes
expect_usage --backend bogus info
[[ $err == *bogus* ]] || fail "bad backend value not named: $err"
expect_usage --backend
expect_usage --threads -1 info
expect_usage --threads many info
expect_usage --quiet --verbose info
expect_usage info --backend cpu # global options go before the subcommand
expect_usage help no-such-subcommand
expect_usage demo --size 0x10
expect_usage demo --size 100
expect_usage demo --seed -3
expect_usage demo --seed +3
expect_usage demo --seed " 3"
expect_usage demo --seed 3x
expect_usage demo --seed 0x
expect_usage demo --seed 0x0x3
expect_usage demo --seed 0xg
expect_usage demo --seed 18446744073709551616 # 2^64
expect_usage demo --out

# ---------------------------------------------------------------- every listed subcommand has --help
subs=$("$SW" --help | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}' |
    grep -v '^help$' || true)
[[ -n $subs ]] || fail "no subcommands found in --help"
for s in $subs; do
    expect 0 "$s" --help
    [[ $out == *Usage:* ]] || fail "'$s --help' printed no usage"
    [[ -z $err ]] || fail "'$s --help' wrote to stderr: $err"
    help1=$out
    expect 0 help "$s"
    [[ $out == "$help1" ]] || fail "'help $s' differs from '$s --help'"
    expect 0 "$s" -h
done
[[ $subs == *info* && $subs == *demo* ]] || fail "info and demo are not listed: $subs"

# ---------------------------------------------------------------- info
expect 0 info
[[ $out == "spotwave $version"* ]] || fail "info does not start with the version: $out"
[[ $out == *backend:* ]] || fail "info does not name the backend: $out"

expect 0 info --json
printf '%s\n' "$out" >"$tmp/info.json"
python3 -m json.tool "$tmp/info.json" >/dev/null || fail "info --json is not valid JSON: $out"
python3 - "$tmp/info.json" "$version" <<'EOF' || fail "info --json: wrong keys or values: $out"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("version", "build", "cuda_built", "cuda_devices", "cpu", "threads",
          "backend_requested", "backend", "backend_reason", "device"):
    assert k in d, "missing key " + k
assert d["version"] == sys.argv[2], d["version"]
assert d["backend"] in ("cpu", "cuda"), d["backend"]
assert d["backend_requested"] == "auto"
assert isinstance(d["cuda_built"], bool) and isinstance(d["cuda_devices"], int)
assert isinstance(d["threads"], int) and d["threads"] >= 1
assert d["backend_reason"]
if d["backend"] == "cuda":
    dev = d["device"]
    for k in ("name", "memory_total_gib", "memory_free_gib", "compute_capability",
              "multiprocessors", "driver_version", "runtime_version"):
        assert k in dev, "missing device key " + k
    assert dev["memory_total_gib"] > 0 and dev["multiprocessors"] > 0
else:
    assert d["device"] is None
if not d["cuda_built"]:
    assert d["cuda_devices"] == 0
EOF
gpus=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cuda_devices"])' "$tmp/info.json")

expect 0 --backend cpu --threads 1 info --json
printf '%s\n' "$out" >"$tmp/cpu.json"
python3 - "$tmp/cpu.json" <<'EOF' || fail "--backend cpu --threads 1 info --json: $out"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["backend"] == "cpu" and d["backend_requested"] == "cpu" and d["device"] is None
assert d["threads"] == 1, d["threads"]
EOF

if [[ $gpus == 0 ]]; then
    expect 1 --backend cuda info
    expect_one_line --backend cuda info
    [[ $err == "spotwave info:"* ]] || fail "--backend cuda info: the line does not name info: $err"
    [[ $err == *[Cc][Uu][Dd][Aa]* ]] || fail "--backend cuda info: the line does not mention CUDA: $err"
    [[ -z $out ]] || fail "--backend cuda info printed a report although it failed: $out"
    # --quiet silences the log, not the failure line.
    expect 1 --quiet --backend cuda info
    expect_one_line --quiet --backend cuda info
else
    echo "note: $gpus CUDA device(s): checking --backend cuda succeeds instead of failing"
    expect 0 --backend cuda info --json
    python3 -c 'import json, sys; assert json.load(sys.stdin)["backend"] == "cuda"' <<<"$out" ||
        fail "--backend cuda info --json: $out"
fi

# ---------------------------------------------------------------- a report that cannot be written
if [[ -w /dev/full ]]; then
    set +e
    "$SW" info >/dev/full 2>"$tmp/err"
    rc=$?
    set -e
    [[ $rc == 1 ]] || fail "'info > /dev/full' exited $rc, expected 1"
fi

echo "test_cli_basic: all checks passed"
