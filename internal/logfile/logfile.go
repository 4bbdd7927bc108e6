// Package logfile is a component's log file with a size cap: once a write would take it past
// MaxBytes, the file is rotated (log -> log.1 -> ... -> log.<Keep>, the oldest dropped), so a
// component that logs on every resync cannot fill the disk. Files are 0600.
package logfile

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// Defaults: 10 MiB per file, two rotated files kept, so at most 30 MiB per component.
const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 2
)

// File is an append-only log with rotation. It is safe for concurrent writes.
type File struct {
	path     string
	maxBytes int64
	keep     int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Open opens (or creates) path for appending; maxBytes <= 0 and keep < 0 take the defaults.
func Open(path string, maxBytes int64, keep int) (*File, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if keep < 0 {
		keep = DefaultKeep
	}
	l := &File{path: path, maxBytes: maxBytes, keep: keep}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *File) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write appends p, rotating first when p would take the file past its cap. A single write
// larger than the cap is written whole into a fresh file.
func (l *File) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if l.size > 0 && l.size+int64(len(p)) > l.maxBytes {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

// rotate shifts log.<i> to log.<i+1> from the oldest down, drops what passes Keep, and
// starts a fresh file.
func (l *File) rotate() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	l.f = nil
	if l.keep == 0 {
		if err := os.Remove(l.path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return l.open()
	}
	os.Remove(fmt.Sprintf("%s.%d", l.path, l.keep))
	for i := l.keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	return l.open()
}

// Close closes the file; later writes fail.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

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
