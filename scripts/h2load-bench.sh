#!/usr/bin/env bash
# A second opinion on `limitmesh bench` from a load tool we did not write: h2load (nghttp2)
# posts the same Envoy ShouldRateLimit request to a no-op gRPC service and to a limitmesh node,
# each in a process of its own, in alternating rounds, at several shapes of load, and prints
# throughput and latency percentiles for both and the throughput ratio.
#
#   scripts/h2load-bench.sh [SECONDS_PER_ROUND] [ROUNDS] [SHAPES...]
#   scripts/h2load-bench.sh 5 3 4x1 4x64 64x4        # the defaults
#
# Installs h2load from Debian's nghttp2-client package when it is missing (needs root or sudo).
set -euo pipefail

seconds=${1:-5}
rounds=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(4x1 4x64 64x4)

if ! command -v h2load >/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq nghttp2-client >/dev/null
fi

cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/limitmesh
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$bin" bench --write-request "$work/request.bin"
budget=$(( (seconds + 3) * rounds * 2 * ${#shapes[@]} + 60 ))
for target in noop limitmesh; do
    "$bin" bench --serve "$target" --serve-seconds "$budget" >"$work/$target.addr" &
    pids+=($!)
done
for target in noop limitmesh; do
    for _ in $(seq 100); do [ -s "$work/$target.addr" ] && break; sleep 0.1; done
    [ -s "$work/$target.addr" ] || { echo "the $target server did not start" >&2; exit 1; }
done

path=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
# One round: prints "calls_per_s failed" and appends each call's latency (µs) to $4.
# Only calls after a warm-up on the same connections count, as in `limitmesh bench`: Envoy
# keeps its connections to a rate limit service open.
round() { # addr connections streams latencies duration
    local out
    rm -f "$work/log"
    out=$(h2load --warm-up-time=300ms -D "$5" -c "$2" -m "$3" --log-file="$work/log" \
        -d "$work/request.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' "http://$1$path")
    cut -f3 "$work/log" >>"$4"
    local rate failed
    rate=$(awk '/^finished in/ { sub(/,/, "", $4); print $4 }' <<<"$out")
    failed=$(awk '/^requests:/ { print $10 + $12 }' <<<"$out")
    echo "$rate $failed"
}
percentiles() { # latencies file -> "p50 p99 p99.9 max" in ms (nearest rank)
    sort -n "$1" | awk '{ v[NR] = $1 }
        function rank(p,  r) { r = int(NR * p); if (r < NR * p) r++; if (r < 1) r = 1; return v[r] }
        END { printf "%8.2f %8.2f %8.2f %8.2f", rank(0.5) / 1000, rank(0.99) / 1000,
              rank(0.999) / 1000, v[NR] / 1000 }'
}

printf '%-6s %-10s %10s %8s %8s %8s %8s %6s  %s\n' shape service calls/s "p50 ms" "p99 ms" \
    "p99.9 ms" "max ms" failed "limitmesh / no-op"
for shape in "${shapes[@]}"; do
    c=${shape%x*}; m=${shape#*x}
    noop=$(cat "$work/noop.addr"); node=$(cat "$work/limitmesh.addr")
    : >"$work/noop.lat"; : >"$work/limitmesh.lat"
    ratios=(); sums=(0 0); fails=(0 0)
    for _ in $(seq "$rounds"); do
        read -r a fa < <(round "$noop" "$c" "$m" "$work/noop.lat" "$seconds")
        read -r b fb < <(round "$node" "$c" "$m" "$work/limitmesh.lat" "$seconds")
        ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')")
        sums=("$(awk -v s="${sums[0]}" -v x="$a" 'BEGIN { print s + x }')"
              "$(awk -v s="${sums[1]}" -v x="$b" 'BEGIN { print s + x }')")
        fails=($(( fails[0] + fa )) $(( fails[1] + fb )))
    done
    sorted=($(printf '%s\n' "${ratios[@]}" | sort -n))
    median=${sorted[$(( ${#sorted[@]} / 2 ))]}
    i=0
    for service in noop limitmesh; do
        name=$service; [ "$service" = noop ] && name=no-op
        note=""; [ "$service" = limitmesh ] && note="$median (${sorted[0]} to ${sorted[-1]})"
        printf '%-6s %-10s %10.0f %s %6s  %s\n' "$shape" "$name" \
            "$(awk -v s="${sums[$i]}" -v r="$rounds" 'BEGIN { print s / r }')" \
            "$(percentiles "$work/$service.lat")" "${fails[$i]}" "$note"
        i=$(( i + 1 ))
    done
done
echo "h2load, Envoy API (one descriptor value), $rounds alternating rounds of $seconds s per service and shape; the ratio is the median of the round pairs' throughput ratios"
