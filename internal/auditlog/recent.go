package auditlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Event is what the operator's view shows of one audit event (audit.k8s.io/v1 Event).
type Event struct {
	Time      time.Time `json:"requestReceivedTimestamp"`
	Stage     string    `json:"stage"`
	Verb      string    `json:"verb"`
	User      string    `json:"-"`
	Resource  string    `json:"-"`
	Namespace string    `json:"-"`
	Name      string    `json:"-"`
	Code      int       `json:"-"`
	URI       string    `json:"requestURI"`
	// Raw is the event's line as the apiserver wrote it (for -o json).
	Raw json.RawMessage `json:"-"`
}

// wire is the part of an audit.k8s.io/v1 Event that Event carries.
type wire struct {
	Event
	UserInfo struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Parse reads one line of the log.
func Parse(line []byte) (Event, error) {
	var w wire
	if err := json.Unmarshal(line, &w); err != nil {
		return Event{}, err
	}
	e := w.Event
	e.User = w.UserInfo.Username
	if r := w.ObjectRef; r != nil {
		e.Resource, e.Namespace, e.Name = r.Resource, r.Namespace, r.Name
		if r.Subresource != "" {
			e.Resource += "/" + r.Subresource
		}
		if r.APIGroup != "" {
			e.Resource += "." + r.APIGroup
		}
	}
	if w.ResponseStatus != nil {
		e.Code = w.ResponseStatus.Code
	}
	e.Raw = json.RawMessage(slices.Clone(line))
	return e, nil
}

// Recent is the last n events of the log at path, oldest first, reading on into the
// rotated backups beside it (audit-<time>.log) when the current file holds fewer. A
// log that does not exist yet (a cluster that never ran) has no events; a line that is
// not an event (one cut short by a crash) is skipped.
func Recent(path string, n int) ([]Event, error) {
	files, err := newestFirst(path)
	if err != nil {
		return nil, err
	}
	var events []Event // newest first while reading
	for _, f := range files {
		b, err := readTail(f)
		if os.IsNotExist(err) {
			continue // rotated away since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("audit log %s: %w", f, err)
		}
		lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
		for i := len(lines) - 1; i >= 0 && len(events) < n; i-- {
			if e, err := Parse(lines[i]); err == nil {
				events = append(events, e)
			}
		}
		if len(events) >= n {
			break
		}
	}
	slices.Reverse(events)
	return events, nil
}

// maxRead bounds what is read of one file: the apiserver rotates at MaxSizeMiB.
const maxRead = 4 * MaxSizeMiB << 20

// readTail reads the last maxRead bytes of the regular file at path. The directory is
// the tenant's user's (it writes the log): a link or a device planted there is refused,
// never followed by the operator's read.
func readTail(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if off := fi.Size() - maxRead; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, maxRead))
}

// newestFirst is the log and its backups, the current file first, then the backups by
// their timestamped names (which sort by time), newest first.
func newestFirst(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	stem := strings.TrimSuffix(base, filepath.Ext(base))
	backups, err := filepath.Glob(filepath.Join(dir, stem+"-*"+filepath.Ext(base)))
	if err != nil {
		return nil, err
	}
	slices.Sort(backups)
	slices.Reverse(backups)
	return append([]string{path}, backups...), nil
}
