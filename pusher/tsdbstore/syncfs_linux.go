package tsdbstore

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncfsSupported fails when syncfs(2) cannot be trusted on this kernel.
func syncfsSupported() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("uname: %w", err)
	}
	return checkSyncfsKernel(unix.ByteSliceToString(u.Release[:]))
}

// syncfsFile calls syncfs(2) on the filesystem holding f. Since Linux 5.8
// it returns the writeback errors of that filesystem since f was opened or
// since the previous syncfs on f, whichever is later.
func syncfsFile(f *os.File) error {
	return unix.Syncfs(int(f.Fd()))
}
