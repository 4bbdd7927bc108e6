// Package backup writes and reads a tenant cluster's backup: a consistent snapshot of its
// datastore (kine's table, dumped by pg_dump inside one repeatable-read snapshot) and its
// identity files (CAs, service-account keys, the encryption-at-rest key), with a manifest
// that lists every key the snapshot held and the checksum of every file, in one archive
// encrypted with a key the operator gives (a file or the environment, never argv).
//
// The archive is tar inside gzip inside AES-256-GCM. Its header (magic, salt, key
// derivation cost, key check, nonce) is bound to the ciphertext as associated data: a byte
// changed anywhere, or a truncated file, fails authentication and nothing of it is used. The
// key check is an HMAC of a constant under a second derived key, so a wrong key is told
// from a damaged archive.
package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"socialweb.computer/kcp/internal/clusterstack"
)

// Format names this archive's layout in its manifest.
const Format = "socialweb-kcp-backup/v1"

// magic opens every archive: a file that does not start with it is not one.
var magic = []byte("SWKCPBK1")

const (
	saltLen    = 16
	checkLen   = 32
	headerLen  = len("SWKCPBK1") + saltLen + 4 + checkLen + 12 // magic, salt, iterations, check, nonce
	iterations = 600_000                                       // PBKDF2-SHA256, as OWASP advises (2023)
	// maxIterations bounds what a header may ask of the reader: a forged header must not
	// make a restore spin for hours before it fails.
	maxIterations = 10_000_000
	// MinKeyLen is the shortest key accepted, in bytes.
	MinKeyLen = 16
)

// ErrWrongKey: the archive is whole as far as its header goes, but the key is not the one
// it was written with.
var ErrWrongKey = errors.New("wrong key: this archive was encrypted with another")

// ErrDamaged: the archive is not whole (truncated, or a byte changed) or was not written by
// this program; nothing of it is used.
var ErrDamaged = errors.New("damaged archive: truncated or changed since it was written; nothing of it is used")

// ErrForeign: the file is not a socialweb-kcp backup.
var ErrForeign = errors.New("not a socialweb-kcp backup (no SWKCPBK1 header)")

// Manifest says what an archive holds.
type Manifest struct {
	Format    string    `json:"format"`
	Cluster   string    `json:"cluster"`   // the cluster it was taken of
	Namespace string    `json:"namespace"` // its namespace on the front
	Account   string    `json:"account"`   // its spec.account
	UID       string    `json:"uid"`       // its identity (identity.json's uid)
	Created   time.Time `json:"created"`
	// Spec is the Cluster's spec on the front (api/v1alpha1.ClusterSpec): a restore
	// declares its cluster with it.
	Spec json.RawMessage `json:"spec,omitempty"`
	// Versions of what wrote the data: kubernetes (the apiserver), postgres.
	Versions map[string]string `json:"versions"`
	// Keys is every key the snapshot held (kine's live rows, its own bookkeeping left out),
	// sorted: what a restore must give back.
	Keys  []string `json:"keys"`
	Files []File   `json:"files"`
}

// File is one file of the archive besides the manifest.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Contents is an archive opened: its manifest and its files by name.
type Contents struct {
	Manifest Manifest
	Files    map[string][]byte
}

// DatastoreFile is the file holding the datastore's dump (pg_dump's plain SQL of kine's table).
const DatastoreFile = "datastore.sql"

// Write encrypts c under key into w, listing every file of c.Files, with its size and
// checksum, in the manifest it writes first.
func Write(w io.Writer, key []byte, c Contents) error { return write(w, key, c, iterations) }

func write(w io.Writer, key []byte, c Contents, iterations int) error {
	if len(key) < MinKeyLen {
		return fmt.Errorf("backup key: %d bytes; want %d or more", len(key), MinKeyLen)
	}
	m := c.Manifest
	m.Format, m.Files = Format, nil
	names := slices.Sorted(maps.Keys(c.Files))
	for _, n := range names {
		sum := sha256.Sum256(c.Files[n])
		m.Files = append(m.Files, File{Name: n, Size: int64(len(c.Files[n])), SHA256: hex.EncodeToString(sum[:])})
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	var plain bytes.Buffer
	zw := gzip.NewWriter(&plain)
	tw := tar.NewWriter(zw)
	add := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), ModTime: m.Created, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := add("manifest.json", mb); err != nil {
		return err
	}
	for _, n := range names {
		if err := add(n, c.Files[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	header := make([]byte, headerLen)
	copy(header, magic)
	salt := header[len(magic) : len(magic)+saltLen]
	if _, err := rand.Read(salt); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(header[len(magic)+saltLen:], uint32(iterations))
	enc, check, err := derive(key, salt, iterations)
	if err != nil {
		return err
	}
	copy(header[len(magic)+saltLen+4:], check)
	nonce := header[headerLen-12:]
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	aead, err := newGCM(enc)
	if err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	_, err = w.Write(aead.Seal(nil, nonce, plain.Bytes(), header))
	return err
}

// Open decrypts and checks an archive: its header, its key, its authentication, its
// manifest and every file's size and checksum. Any failure is the whole archive's: no
// Contents are returned but from a whole one.
func Open(archive, key []byte) (Contents, error) {
	if len(archive) < len(magic) || !bytes.Equal(archive[:len(magic)], magic) {
		return Contents{}, ErrForeign
	}
	if len(archive) < headerLen+16 {
		return Contents{}, ErrDamaged
	}
	header := archive[:headerLen]
	salt := header[len(magic) : len(magic)+saltLen]
	iter := binary.BigEndian.Uint32(header[len(magic)+saltLen:])
	if iter == 0 || iter > maxIterations {
		return Contents{}, ErrDamaged
	}
	enc, check, err := derive(key, salt, int(iter))
	if err != nil {
		return Contents{}, err
	}
	if !hmac.Equal(check, header[len(magic)+saltLen+4:len(magic)+saltLen+4+checkLen]) {
		return Contents{}, ErrWrongKey
	}
	aead, err := newGCM(enc)
	if err != nil {
		return Contents{}, err
	}
	plain, err := aead.Open(nil, header[headerLen-12:], archive[headerLen:], header)
	if err != nil {
		return Contents{}, ErrDamaged
	}
	return unpack(plain)
}

// unpack reads the authenticated tar.gz: the manifest first, then exactly the files it
// lists, each of its size and checksum.
func unpack(plain []byte) (Contents, error) {
	zr, err := gzip.NewReader(bytes.NewReader(plain))
	if err != nil {
		return Contents{}, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	tr := tar.NewReader(zr)
	c := Contents{Files: map[string][]byte{}}
	first := true
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Contents{}, fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return Contents{}, fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		switch {
		case first && h.Name == "manifest.json":
			if err := json.Unmarshal(b, &c.Manifest); err != nil {
				return Contents{}, fmt.Errorf("%w: manifest: %v", ErrDamaged, err)
			}
		case first:
			return Contents{}, fmt.Errorf("%w: the first file is %q, not manifest.json", ErrDamaged, h.Name)
		default:
			if _, dup := c.Files[h.Name]; dup {
				return Contents{}, fmt.Errorf("%w: %s twice", ErrDamaged, h.Name)
			}
			c.Files[h.Name] = b
		}
		first = false
	}
	if c.Manifest.Format != Format {
		return Contents{}, fmt.Errorf("archive format %q: this program reads %q", c.Manifest.Format, Format)
	}
	if err := c.verify(); err != nil {
		return Contents{}, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	return c, nil
}

// verify checks the files against the manifest: the very set it lists, each of its size
// and checksum, and the datastore among them.
func (c Contents) verify() error {
	listed := map[string]bool{}
	for _, f := range c.Manifest.Files {
		b, ok := c.Files[f.Name]
		if !ok {
			return fmt.Errorf("%s is listed but missing", f.Name)
		}
		sum := sha256.Sum256(b)
		if int64(len(b)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
			return fmt.Errorf("%s: size or checksum differs from the manifest's", f.Name)
		}
		listed[f.Name] = true
	}
	for n := range c.Files {
		if !listed[n] {
			return fmt.Errorf("%s is not in the manifest", n)
		}
	}
	if !listed[DatastoreFile] {
		return fmt.Errorf("no %s", DatastoreFile)
	}
	// Only the names this program writes, and all of them: a restore stages each under its
	// name, and a restore into the cluster's own name places every identity file.
	known := map[string]bool{DatastoreFile: true}
	for n := range IdentityFiles(clusterstack.Layout{}) {
		known[n] = true
		if !listed[n] {
			return fmt.Errorf("no %s", n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(c.Files)) {
		if !known[n] {
			return fmt.Errorf("file %q is none this program writes", n)
		}
	}
	return nil
}

// derive makes the encryption key and the key check from the operator's key.
func derive(key, salt []byte, iter int) (enc, check []byte, err error) {
	if len(key) < MinKeyLen {
		return nil, nil, fmt.Errorf("backup key: %d bytes; want %d or more", len(key), MinKeyLen)
	}
	// One PBKDF2 block (32 bytes), split by HKDF: with 64 bytes of PBKDF2 output the key
	// check would rest on the second block alone, which a guesser could compute for half
	// the cost the writer paid.
	master, err := pbkdf2.Key(sha256.New, string(key), salt, iter, 32)
	if err != nil {
		return nil, nil, err
	}
	enc, err = hkdf.Key(sha256.New, master, nil, "socialweb-kcp backup encryption", 32)
	if err != nil {
		return nil, nil, err
	}
	checkKey, err := hkdf.Key(sha256.New, master, nil, "socialweb-kcp backup key check", 32)
	if err != nil {
		return nil, nil, err
	}
	mac := hmac.New(sha256.New, checkKey)
	mac.Write([]byte("socialweb-kcp backup key check"))
	return enc, mac.Sum(nil), nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
