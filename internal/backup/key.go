package backup

import (
	"bytes"
	"fmt"
	"os"
)

// KeyEnv is the environment variable that may hold the backup key instead of a file.
const KeyEnv = "SOCIALWEB_BACKUP_KEY"

// LoadKey reads the operator's backup key: from file when one is given (a regular file
// only its owner can read, such as one made by `head -c 32 /dev/urandom | base64 >
// backup.key; chmod 600 backup.key`), else from KeyEnv. Never from argv: a key there is
// in every process listing. Surrounding whitespace (a newline) is not part of the key.
func LoadKey(file string) ([]byte, error) {
	var key []byte
	switch {
	case file != "":
		fi, err := os.Lstat(file)
		if err != nil {
			return nil, fmt.Errorf("--key-file: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("--key-file %s: not a regular file", file)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("--key-file %s: mode %04o lets others read the key; chmod 600 %s", file, fi.Mode().Perm(), file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--key-file: %w", err)
		}
		key = bytes.TrimSpace(b)
		if len(key) < MinKeyLen {
			return nil, fmt.Errorf("--key-file %s: a key of %d bytes; want %d or more (head -c 32 /dev/urandom | base64 > %s)", file, len(key), MinKeyLen, file)
		}
	default:
		key = bytes.TrimSpace([]byte(os.Getenv(KeyEnv)))
		if len(key) == 0 {
			return nil, fmt.Errorf("no backup key: give --key-file FILE, or set %s (never a flag: argv is public)", KeyEnv)
		}
		if len(key) < MinKeyLen {
			return nil, fmt.Errorf("%s: a key of %d bytes; want %d or more", KeyEnv, len(key), MinKeyLen)
		}
	}
	return key, nil
}
