// Package logfile caps a component's log file, which the component writes itself: once it
// is past its cap it is rotated (log -> log.1 -> ... -> log.<Keep>, the oldest dropped), so
// a component that logs on every resync cannot fill the disk. Files are 0600.
package logfile

import (
	"fmt"
	"io"
	"os"
)

// Defaults: 10 MiB per file, two rotated files kept, so at most 30 MiB per component.
const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 2
)

// Trim caps a log that another process writes (appending, O_APPEND): once it is past
// maxBytes it is copied to path.1 (the older ones shifted, the oldest past keep dropped) and
// truncated in place, so the writer's descriptor stays good and its next write lands at the
// start. What the writer appends between the copy and the truncation is lost: the price of
// rotating a file whose writer neither reopens it nor asks.
func Trim(path string, maxBytes int64, keep int) error {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil || fi.Size() <= maxBytes {
		return err
	}
	if keep > 0 {
		os.Remove(fmt.Sprintf("%s.%d", path, keep))
		for i := keep - 1; i >= 1; i-- {
			if err := os.Rename(fmt.Sprintf("%s.%d", path, i), fmt.Sprintf("%s.%d", path, i+1)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		if err := copyFile(path, path+".1"); err != nil {
			return err
		}
	}
	return os.Truncate(path, 0)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
