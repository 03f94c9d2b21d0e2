package main

import (
	"os"
	"testing"
)

// TestReadUsageCountsTheFaultsOfFreshMemory touches memory the process has
// never used and expects /proc to count a minor fault for most of its pages:
// a wrong field would read a figure that does not move with it.
func TestReadUsageCountsTheFaultsOfFreshMemory(t *testing.T) {
	const size = 64 << 20
	page := os.Getpagesize()
	before, err := readUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, size)
	for i := 0; i < size; i += page {
		mem[i] = 1
	}
	after, err := readUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The runtime may back part of it with pages it had already faulted
	// in, and a huge page serves many at once: ask for a quarter.
	if got, want := after.MinorFaults-before.MinorFaults, int64(size/page/4); got < want {
		t.Fatalf("%d minor faults for %d fresh pages, want at least %d", got, size/page, want)
	}
	if mem[size-page] != 1 {
		t.Fatal("memory lost")
	}
}
