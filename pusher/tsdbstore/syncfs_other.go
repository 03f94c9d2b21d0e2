//go:build !linux

package tsdbstore

import (
	"errors"
	"os"
	"runtime"
)

// errNoSyncfs is why -storage.sync-method=syncfs is refused off Linux.
var errNoSyncfs = errors.New("syncfs(2) exists on Linux only, not on " + runtime.GOOS)

// syncfsSupported fails: only Linux has syncfs(2).
func syncfsSupported() error { return errNoSyncfs }

// syncfsFile is never called: Validate refuses syncfs here.
func syncfsFile(*os.File) error { return errNoSyncfs }
