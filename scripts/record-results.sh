#!/usr/bin/env bash
# Records the figures docs/results.md shows, then regenerates the page from what it recorded.
#
#   scripts/record-results.sh            # everything (about 20 minutes on 2 cores)
#   scripts/record-results.sh sim        # the simulations (deterministic: any machine will do)
#   scripts/record-results.sh bench      # the benchmarks (run them on a quiet machine)
#   scripts/record-results.sh NAME...    # some recordings: scenarios-5-nodes, fleet-50-nodes,
#                                        # fleet-100-nodes, fleet-200-nodes, hot-path,
#                                        # grpc-bench, memory
#   scripts/record-results.sh page       # only regenerate docs/results.md from the JSON
#
# Each command's JSON lines go to docs/results/NAME.json, wrapped with the command, the commit
# (marked "+ local changes" when the code differs from it), the machine, the toolchain and the
# wall time. The page is then made by `limitmesh-sim results`; commit the JSON and the page
# together (sim/tests/docs.rs holds them equal).
set -euo pipefail
cd "$(dirname "$0")/.."

sims=(scenarios-5-nodes fleet-50-nodes fleet-100-nodes fleet-200-nodes)
benches=(hot-path grpc-bench memory)
wanted=()
for arg in "${@:-all}"; do
    case "$arg" in
        all) wanted+=("${sims[@]}" "${benches[@]}") ;;
        sim) wanted+=("${sims[@]}") ;;
        bench) wanted+=("${benches[@]}") ;;
        page) ;;
        scenarios-5-nodes | fleet-50-nodes | fleet-100-nodes | fleet-200-nodes | hot-path | grpc-bench | memory)
            wanted+=("$arg")
            ;;
        *)
            echo "usage: $0 [all|sim|bench|page|NAME...]" >&2
            exit 2
            ;;
    esac
done

out=docs/results
mkdir -p "$out"

# A JSON string: backslashes and quotes escaped (nothing here holds control characters).
json_string() {
    local s=${1//\\/\\\\}
    printf '"%s"' "${s//\"/\\\"}"
}

# The code that runs, against the commit: a change to the documentation does not count.
code=(src core sim/src sim/scenarios sim/Cargo.toml proto benches tests build.rs Cargo.toml Cargo.lock)
commit=$(git rev-parse --short=12 HEAD)
if [ -n "$(git status --porcelain --untracked-files=no -- "${code[@]}")" ]; then
    commit="$commit + local changes"
fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
machine="${cpu:-$(uname -m)}, $(nproc) cores, $(uname -s) $(uname -r)"
rustc_version=$(rustc --version)

# record NAME KIND SHOWN COMMAND...: runs COMMAND (its stderr shown as it runs), keeps the
# lines of its standard output that are JSON objects, and writes them to $out/NAME.json with
# SHOWN, the command as a reader would type it.
record() {
    local name=$1 kind=$2 shown=$3
    shift 3
    echo "== $name: $shown" >&2
    local started ended lines
    started=$(date +%s.%N)
    lines=$("$@" | grep '^{')
    ended=$(date +%s.%N)
    {
        printf '{"kind":%s,"command":%s,"commit":%s,"machine":%s,"rustc":%s,' \
            "$(json_string "$kind")" "$(json_string "$shown")" "$(json_string "$commit")" \
            "$(json_string "$machine")" "$(json_string "$rustc_version")"
        printf '"recorded":"%s","wall_seconds":%.1f,"output":[\n' \
            "$(date -u +%Y-%m-%d)" "$(awk "BEGIN { print $ended - $started }")"
        printf '%s\n' "$lines" | sed '$!s/$/,/'
        printf ']}\n'
    } >"$out/$name.json.tmp"
    mv "$out/$name.json.tmp" "$out/$name.json"
}

sim_cmd=(cargo run --quiet --release -p limitmesh-sim --)
sim_shown="cargo run --release -p limitmesh-sim --"

# The hot-path bench prints a table: `case limitmesh_ns governor_ns ratio` a line.
hot_path_json() {
    cargo bench --quiet --bench hot_path_ratio |
        awk 'NF == 4 && $4 ~ /^[0-9.]+$/ {
            printf "{\"case\":\"%s\",\"limitmesh_ns\":%s,\"governor_ns\":%s,\"ratio\":%s}\n", $1, $2, $3, $4
        }'
}

# The memory test prints `bytes per active key at 5 origins: N (target T)` (after the test
# harness's progress dots).
memory_json() {
    cargo test --quiet --release --test memory -- --nocapture --test-threads 1 2>&1 |
        sed -n 's/.*bytes per active key at 5 origins: \([0-9.]*\) (target \([0-9.]*\))$/{"bytes_per_key":\1,"target_bytes":\2}/p'
}

for name in "${wanted[@]}"; do
    case "$name" in
        scenarios-5-nodes)
            record "$name" scenarios "$sim_shown all --seed 1 --json" \
                "${sim_cmd[@]}" all --seed 1 --json
            ;;
        fleet-50-nodes)
            record "$name" fleet "$sim_shown fleet-all --nodes 50 --seed 1 --json" \
                "${sim_cmd[@]}" fleet-all --nodes 50 --seed 1 --json
            ;;
        fleet-100-nodes | fleet-200-nodes)
            nodes=${name#fleet-}
            nodes=${nodes%-nodes}
            record "$name" fleet "$sim_shown fleet --nodes $nodes --seed 1 --only share --json" \
                "${sim_cmd[@]}" fleet --nodes "$nodes" --seed 1 --only share --json
            ;;
        hot-path)
            record "$name" hot-path "cargo bench --bench hot_path_ratio" hot_path_json
            ;;
        grpc-bench)
            record "$name" grpc-bench "cargo run --release -- bench --json" \
                cargo run --quiet --release -- bench --json
            ;;
        memory)
            record "$name" memory "cargo test --release --test memory -- --nocapture" memory_json
            ;;
    esac
done

"${sim_cmd[@]}" results >docs/results.md.tmp
mv docs/results.md.tmp docs/results.md
echo "docs/results.md regenerated from $out/*.json" >&2
