package backup

import (
	"encoding/json"
	"os"
	"time"

	"socialweb.computer/kcp/internal/atomicfile"
)

// Record is a cluster's last backup, kept in its DataDir (clusterstack.Layout.LastBackup)
// for the provider's metrics: an operator's alert on a backup that is too old reads it.
type Record struct {
	Time    time.Time `json:"time"`
	File    string    `json:"file"`
	Bytes   int64     `json:"bytes"`
	Objects int       `json:"objects"`
}

// WriteRecord writes r at path, 0600.
func WriteRecord(path string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

// ReadRecord reads the record at path; false when there is none (never backed up).
func ReadRecord(path string) (Record, bool, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, false, err
	}
	return r, true, nil
}
