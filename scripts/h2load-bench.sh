#!/usr/bin/env bash
# A second opinion on `limitmesh bench` from a load tool we did not write: h2load (nghttp2)
# posts Envoy ShouldRateLimit requests to a no-op gRPC service and to a limitmesh node, each in
# a process of its own, in alternating rounds (ABBA), at several shapes of load, and prints
# throughput and latency percentiles for both and the throughput ratio. Unlike the bench, every
# request carries the same descriptor (one hot key): h2load posts one fixed body.
#
#   scripts/h2load-bench.sh [SECONDS_PER_ROUND] [ROUNDS] [SHAPES...]
#   scripts/h2load-bench.sh 5 4 4x1 4x64 64x4        # the defaults (ROUNDS even: ABBA)
#
# h2load judges a request by its HTTP status only, while a refusal or a gRPC error arrives as
# HTTP 200; so around each round of the node the script reads the node's own count of
# refusals (over the limit, invalid, table full) and counts them as failed. An answer cut off by
# the node's request timeout is counted by `limitmesh bench`, not here. Installs h2load (Debian's nghttp2-client) and curl when missing (root or sudo).
set -euo pipefail
export LC_ALL=C

seconds=${1:-5}
rounds=${2:-4}
shift $(( $# > 2 ? 2 : $# ))
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(4x1 4x64 64x4)
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "SECONDS_PER_ROUND: a whole number of seconds" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS: a positive whole number" >&2; exit 2; }
for shape in "${shapes[@]}"; do
    [[ $shape =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || { echo "$shape: expected CONNECTIONSxSTREAMS, e.g. 4x64" >&2; exit 2; }
done

missing=()
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/limitmesh
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]+"${pids[@]}"}"; do kill "$pid" 2>/dev/null || true; done
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
    lines=1; [ "$target" = limitmesh ] && lines=2    # the node also prints its admin address
    for _ in $(seq 100); do
        [ "$(wc -l <"$work/$target.addr")" -ge "$lines" ] && break
        sleep 0.1
    done
    [ "$(wc -l <"$work/$target.addr")" -ge "$lines" ] ||
        { echo "the $target server did not start" >&2; exit 1; }
done
noop=$(sed -n 1p "$work/noop.addr")
node=$(sed -n 1p "$work/limitmesh.addr")
node_admin=$(sed -n 2p "$work/limitmesh.addr")

not_admitted() { # the node's count of refusals, in any domain
    local metrics
    metrics=$(curl -sf "http://$node_admin/metrics") ||
        { echo "cannot read http://$node_admin/metrics" >&2; exit 1; }
    awk '/^limitmesh_decisions_total\{/ && /result="(over_limit|invalid|refused)"/ { n += $2 }
         END { print n + 0 }' <<<"$metrics"
}

path=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
# One round; prints "calls_per_s failed" and appends each successful call's latency (µs) to $4.
# Only calls after a warm-up on the same connections count, as in `limitmesh bench`: Envoy
# keeps its connections to a rate limit service open.
round() { # addr connections streams latencies duration
    local out before=0 after=0 rate failed
    if [ "$1" = "$node" ]; then before=$(not_admitted); fi
    rm -f "$work/log"
    if ! out=$(h2load --warm-up-time=300ms -D "$5" -c "$2" -m "$3" --log-file="$work/log" \
        -d "$work/request.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' "http://$1$path" 2>&1); then
        echo "h2load failed against $1: $out" >&2
        exit 1
    fi
    if [ "$1" = "$node" ]; then after=$(not_admitted); fi
    awk -F'\t' '$2 == 200 { print $3 }' "$work/log" >>"$4"
    rate=$(awk '/^finished in/ { sub(/,/, "", $4); print $4 }' <<<"$out")
    failed=$(awk '/^requests:/ { print $10 }' <<<"$out")
    # Answered with HTTP 200 but not admitted (warm-up included): what h2load cannot see.
    echo "$rate $(( failed + after - before ))"
}
percentiles() { # latencies file -> "p50 p99 p99.9 max" in ms (nearest rank)
    sort -n "$1" | awk '{ v[NR] = $1 }
        function rank(p,  r) { r = int(NR * p); if (r < NR * p) r++; if (r < 1) r = 1; return v[r] }
        END { if (NR == 0) { printf "%8s %8s %8s %8s", "-", "-", "-", "-"; exit }
              printf "%8.2f %8.2f %8.2f %8.2f", rank(0.5) / 1000, rank(0.99) / 1000,
              rank(0.999) / 1000, v[NR] / 1000 }'
}

printf '%-6s %-10s %10s %8s %8s %8s %8s %6s  %s\n' shape service calls/s "p50 ms" "p99 ms" \
    "p99.9 ms" "max ms" failed "limitmesh / no-op"
any_failed=0
for shape in "${shapes[@]}"; do
    c=${shape%x*}; m=${shape#*x}
    : >"$work/noop.lat"; : >"$work/limitmesh.lat"
    ratios=(); sums=(0 0); fails=(0 0)
    for r in $(seq "$rounds"); do
        # ABBA: whatever favours the first (or second) of a pair falls on both sides alike.
        # (Each round runs in this shell, so that its failures stop the script with a message.)
        if (( r % 2 == 1 )); then
            round "$noop" "$c" "$m" "$work/noop.lat" "$seconds" >"$work/a"
            round "$node" "$c" "$m" "$work/limitmesh.lat" "$seconds" >"$work/b"
        else
            round "$node" "$c" "$m" "$work/limitmesh.lat" "$seconds" >"$work/b"
            round "$noop" "$c" "$m" "$work/noop.lat" "$seconds" >"$work/a"
        fi
        read -r a fa <"$work/a"
        read -r b fb <"$work/b"
        ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')")
        sums=("$(awk -v s="${sums[0]}" -v x="$a" 'BEGIN { print s + x }')"
              "$(awk -v s="${sums[1]}" -v x="$b" 'BEGIN { print s + x }')")
        fails=($(( fails[0] + fa )) $(( fails[1] + fb )))
    done
    (( fails[0] + fails[1] == 0 )) || any_failed=1
    sorted=($(printf '%s\n' "${ratios[@]}" | sort -n))
    median=$(printf '%s\n' "${sorted[@]}" | awk '{ v[NR] = $1 }
        END { if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
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
echo "h2load, Envoy API (one descriptor value), $rounds alternating rounds of $seconds s per service and shape after a 0.3 s warm-up; the ratio is the median of the round pairs' throughput ratios"
if (( any_failed )); then
    echo "some requests failed: the figures above are not a fair comparison" >&2
    exit 1
fi
