//go:build race

package codec

// raceEnabled: the race detector makes sync.Pool drop a quarter of what is
// put back, on purpose, so pooled allocation counts are higher with it.
const raceEnabled = true
