// Package chaos holds Ferry's process-level fault tests: they build the
// ferry-consumer and ferry-pusher binaries, run them as processes against a
// real Kafka broker (see internal/kafkatest), kill, restart and starve them,
// and check the delivery promise: at-least-once, nothing lost, duplicates
// bounded, and committed offsets never ahead of what was acknowledged.
//
// The package has only tests; run them with
//
//	go test -count=1 -v ./chaos/
//
// FERRY_CHAOS=large selects the large scale (100,000 records, 10 s of server
// errors). Every test prints one "chaos: ..." summary line to stdout, and the
// last test prints the totals of the run.
package chaos
