#!/usr/bin/env bash
# Every --help text cites methods by their papers, never by the project's internal "seed 00N"
# numbers (documents a user does not have; issue 29): `spotwave --help`, and `spotwave SUB --help`
# for every subcommand that `spotwave --help` lists and every simulation that `spotwave sim
# --help` lists (sim stars, sim sh, sim eye, ...). Each exits 0 with its usage on stdout and
# nothing on stderr, says no /seed 0NN/ (any case), and the subcommands that implement a paper's
# method name that paper (first author and year).
# Usage: test_cli_help_citations.sh PATH/TO/spotwave
set -euo pipefail

source "$(dirname "$0")/common.bash"

# check_help NAME ARGS...: runs `spotwave ARGS... --help`.
check_help() {
    local name=$1
    shift
    expect 0 "$@" --help
    [[ $out == *Usage:* ]] || fail "'$name --help' printed no usage"
    [[ -z $err ]] || fail "'$name --help' wrote to stderr: $err"
    if grep -inE 'seed 0[0-9][0-9]' <<<"$out" >"$tmp/hits"; then
        fail "'$name --help' cites a seed number instead of a paper: $(cat "$tmp/hits")"
    fi
    help_text=$out
}

check_help spotwave
top=$help_text
subs=$(awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}' \
    <<<"$top" | grep -v '^help$' || true)
[[ -n $subs ]] || fail "no subcommands found in 'spotwave --help'"

# The papers each method subcommand must name (first author and year).
declare -A paper=(
    [find]="Winter et al. 2018"
    [centroid]="Mocci"
    [fit]="Mompean"
    [pupil]="Mompean"
    [aberrometry]="Mompean"
    [sabre]="Brunner"
    [loop]="Brunner"
    ["sim stars"]="Li, Zhang, Zheng & Hu 2012"
    ["sim sh"]="Mocci et al. 2020"
    ["sim eye"]="Thibos"
)

n=0
for s in $subs; do
    check_help "$s" "$s"
    n=$((n + 1))
    if [[ -n ${paper[$s]:-} && $help_text != *"${paper[$s]}"* ]]; then
        fail "'$s --help' does not name its paper (${paper[$s]})"
    fi
    if [[ $s == sim ]]; then
        sims=$(awk '/^Simulations:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}' \
            <<<"$help_text")
        [[ $sims == *stars* && $sims == *sh* && $sims == *eye* ]] ||
            fail "'sim --help' does not list stars, sh and eye: $sims"
        for k in $sims; do
            check_help "sim $k" sim "$k"
            n=$((n + 1))
            if [[ -n ${paper["sim $k"]:-} && $help_text != *"${paper["sim $k"]}"* ]]; then
                fail "'sim $k --help' does not name its paper (${paper["sim $k"]})"
            fi
        done
    fi
done
((n >= 12)) || fail "only $n help texts checked"

# The top-level help lists the papers with their journals.
for p in "J. Opt. Soc. Am. A 37(10), 1548" "Future Gener. Comput. Syst. 91, 177" \
    "J. Opt. Soc. Am. A 35(6), 859" "Acta Cryst. D74, 85" "IEEE IPDPS Workshops, 1879"; do
    [[ $top == *"$p"* ]] || fail "'spotwave --help' does not list the paper '$p'"
done
echo "test_cli_help_citations: $n help texts, no seed numbers"
