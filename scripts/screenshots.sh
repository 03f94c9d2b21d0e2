#!/usr/bin/env bash
# Screenshots of the status pages: runs ferry-dev for a short while and
# photographs the pusher's page and consumer-0's with headless Chromium
# (Debian: apt-get install -y chromium). Usage: scripts/screenshots.sh [dir]
set -euo pipefail

out=${1:-docs/img}
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [[ -z "$chromium" ]]; then
	echo "screenshots: no Chromium found (apt-get install -y chromium, or set CHROMIUM)" >&2
	exit 1
fi
pusher_port=${PUSHER_HTTP_PORT:-18081}
consumer_port=${CONSUMER_HTTP_PORT:-18180}
grpc_port=${PUSHER_GRPC_PORT:-19095}

tmp=$(mktemp -d)
pid=
cleanup() {
	if [[ -n "$pid" ]]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/ferry-dev" ./services/ferry-dev
"$tmp/ferry-dev" -duration 2m -rate 400 -storage.path "$tmp/data" \
	-http.listen-address "127.0.0.1:$pusher_port" -grpc.listen-address "127.0.0.1:$grpc_port" \
	-consumer.http-base-port "$consumer_port" >"$tmp/out" 2>"$tmp/log" &
pid=$!

for _ in $(seq 1 120); do
	curl -sf "http://127.0.0.1:$consumer_port/ready" >/dev/null && break
	sleep 0.5
done
curl -sf "http://127.0.0.1:$consumer_port/ready" >/dev/null || { echo "screenshots: consumer-0 never became ready" >&2; cat "$tmp/log" >&2; exit 1; }
# A first look at the pusher's page starts its samples/s window.
sleep 3
curl -sf "http://127.0.0.1:$pusher_port/" >/dev/null
sleep 4

mkdir -p "$out"
shot() {
	"$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking --hide-scrollbars \
		--window-size=1100,720 --screenshot="$2" "$1" 2>/dev/null
	echo "wrote $2"
}
shot "http://127.0.0.1:$pusher_port/" "$out/status-pusher.png"
shot "http://127.0.0.1:$consumer_port/" "$out/status-consumer.png"
