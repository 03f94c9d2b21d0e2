package tsdbstore

import (
	"os"
	"strings"
	"testing"
)

func TestARootLockRefusesASecondHolderNamingThePath(t *testing.T) {
	root := t.TempDir()
	l, err := lockRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.release() }()
	_, err = lockRoot(root)
	if err == nil || !strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "in use by another ferry-pusher") {
		t.Fatalf("second lock: %v, want a refusal naming %s", err, root)
	}
}

func TestARootLockIsTakenAgainOnARecreatedRoot(t *testing.T) {
	root := t.TempDir()
	l, err := lockRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.release() }()
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := l.relock(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.path); err != nil {
		t.Fatalf("no lock file in the recreated root: %v", err)
	}
	if _, err := lockRoot(root); err == nil {
		t.Fatal("the recreated root was not locked again")
	}
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	again, err := lockRoot(root)
	if err != nil {
		t.Fatalf("released lock still held: %v", err)
	}
	_ = again.release()
}
