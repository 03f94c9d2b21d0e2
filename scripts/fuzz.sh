#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a fixed budget each.
# Usage: scripts/fuzz.sh [fuzztime]   (default 50000x: executions, see the
# Makefile's FUZZTIME for why not a duration; go test -fuzztime syntax)
set -euo pipefail
fuzztime=${1:-50000x}
cd "$(dirname "$0")/.."
found=0
# Fuzz targets need no broker: skip starting a real Kafka for them. -run '^$'
# runs no test, so none of the broker-restart tests that CI=true insists on
# a real broker for can be skipped here; CI is cleared so kafkatest takes kfake.
export FERRY_KAFKA_FAKE=1
export CI=
while IFS=: read -r file name; do
  dir=./$(dirname "$file")
  echo "fuzz: $dir $name for $fuzztime"
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir"
  found=$((found + 1))
done < <(grep -rHoE '^func (Fuzz[A-Za-z0-9_]*)' --include='*_test.go' . | sed -E 's/:func /:/' | sort)
echo "fuzz: ran $found targets"
