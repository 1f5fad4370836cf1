#!/usr/bin/env bash
# Records every figure docs/results.md shows, then regenerates the page from what it recorded.
#
#   scripts/record-results.sh          # simulations and benchmarks (about 15 minutes on 2 cores)
#   scripts/record-results.sh sim      # the simulations only (deterministic: any machine will do)
#   scripts/record-results.sh bench    # the benchmarks only (run them on a quiet machine)
#   scripts/record-results.sh page     # regenerate docs/results.md from the JSON already there
#
# Each command's JSON lines go to docs/results/<name>.json, wrapped with the command, the
# commit (marked "+ local changes" when the code differs from it), the machine, the toolchain
# and the wall time. The page is then made by `limitmesh-sim results`;
# commit the JSON and the page together (sim/tests/docs.rs holds them equal).
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
case "$what" in
    all | sim | bench | page) ;;
    *)
        echo "usage: $0 [all|sim|bench|page]" >&2
        exit 2
        ;;
esac

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

# record NAME KIND COMMAND...: runs COMMAND (its stderr shown as it runs), keeps the lines of
# its standard output that are JSON objects, and writes them to $out/NAME.json. The command
# shown on the page is $display_command when set (how a reader would type it).
record() {
    local name=$1 kind=$2
    shift 2
    echo "== $name: $*" >&2
    local started ended lines
    started=$(date +%s.%N)
    lines=$("$@" | grep '^{')
    ended=$(date +%s.%N)
    {
        printf '{"kind":%s,"command":%s,"commit":%s,"machine":%s,"rustc":%s,' \
            "$(json_string "$kind")" "$(json_string "${display_command:-$*}")" \
            "$(json_string "$commit")" "$(json_string "$machine")" \
            "$(json_string "$rustc_version")"
        printf '"recorded":"%s","wall_seconds":%.1f,"output":[\n' \
            "$(date -u +%Y-%m-%d)" "$(awk "BEGIN { print $ended - $started }")"
        printf '%s\n' "$lines" | sed '$!s/$/,/'
        printf ']}\n'
    } >"$out/$name.json.tmp"
    mv "$out/$name.json.tmp" "$out/$name.json"
}

sim=(cargo run --quiet --release -p limitmesh-sim --)

if [ "$what" = all ] || [ "$what" = sim ]; then
    cargo build --quiet --release -p limitmesh-sim
    display_command="cargo run --release -p limitmesh-sim -- all --seed 1 --json" \
        record scenarios-5-nodes scenarios "${sim[@]}" all --seed 1 --json
    display_command="cargo run --release -p limitmesh-sim -- fleet-all --nodes 50 --seed 1 --json" \
        record fleet-50-nodes fleet "${sim[@]}" fleet-all --nodes 50 --seed 1 --json
    for nodes in 100 200; do
        display_command="cargo run --release -p limitmesh-sim -- fleet --nodes $nodes --seed 1 --only share --json" \
            record "fleet-$nodes-nodes" fleet "${sim[@]}" fleet --nodes "$nodes" --seed 1 --only share --json
    done
fi

# The hot-path bench prints a table: `case limitmesh_ns governor_ns ratio` a line.
hot_path_json() {
    cargo bench --quiet --bench hot_path_ratio |
        awk 'NF == 4 && $4 ~ /^[0-9.]+$/ {
            printf "{\"case\":\"%s\",\"limitmesh_ns\":%s,\"governor_ns\":%s,\"ratio\":%s}\n", $1, $2, $3, $4
        }'
}

# The memory test prints `bytes per active key at 5 origins: N (target T)`.
memory_json() {
    cargo test --quiet --release --test memory -- --nocapture --test-threads 1 2>&1 |
        sed -n 's/^bytes per active key at 5 origins: \([0-9.]*\) (target \([0-9.]*\))$/{"bytes_per_key":\1,"target_bytes":\2}/p'
}

if [ "$what" = all ] || [ "$what" = bench ]; then
    cargo build --quiet --release -p limitmesh
    display_command="cargo bench --bench hot_path_ratio" \
        record hot-path hot-path hot_path_json
    display_command="cargo run --release -- bench --json" \
        record grpc-bench grpc-bench cargo run --quiet --release -- bench --json
    display_command="cargo test --release --test memory -- --nocapture" \
        record memory memory memory_json
fi

"${sim[@]}" results >docs/results.md.tmp
mv docs/results.md.tmp docs/results.md
echo "docs/results.md regenerated from $out/*.json" >&2
