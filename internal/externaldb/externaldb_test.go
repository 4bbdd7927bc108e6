package externaldb

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	s, err := Parse("postgres://admin:s3cret@db.example:6543/ops?sslrootcert=/etc/ca.crt")
	if err != nil || s != (Server{Host: "db.example", Port: 6543, Admin: "admin", AdminPassword: "s3cret", AdminDatabase: "ops", RootCA: "/etc/ca.crt"}) {
		t.Fatalf("%+v, %v", s, err)
	}
	if s, err := Parse("postgres://admin:pw@db/?sslrootcert=/ca&sslmode=verify-full"); err != nil || s.Port != 5432 || s.AdminDatabase != "postgres" {
		t.Errorf("defaults: %+v, %v", s, err)
	}
	for raw, want := range map[string]string{
		"mysql://a:b@h/?sslrootcert=/ca":                    "want one line",
		"postgres://a:b@/?sslrootcert=/ca":                  "no host",
		"postgres://:b@h/?sslrootcert=/ca":                  "no administrator",
		"postgres://a@h/?sslrootcert=/ca":                   "no password",
		"postgres://a:b@h/":                                 "no sslrootcert",
		"postgres://a:b@h/?sslrootcert=/ca&sslmode=disable": "only verify-full",
		"postgres://a:b@h:99999/?sslrootcert=/ca":           "port",
	} {
		_, err := Parse(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v; want an error saying %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), ":b@") {
			t.Errorf("Parse(%q) repeats the password: %v", raw, err)
		}
	}
}

func TestLoadRefusesAFileOthersCanRead(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte("x"), 0o600)
	file := filepath.Join(dir, "ds")
	os.WriteFile(file, []byte("postgres://a:b@h/?sslrootcert="+ca+"\n"), 0o644)
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a 0644 file: %v", err)
	}
	os.Chmod(file, 0o600)
	if _, err := Load(file); err != nil {
		t.Errorf("a 0600 file: %v", err)
	}
	os.WriteFile(file, []byte("postgres://a:b@h/?sslrootcert="+filepath.Join(dir, "missing")+"\n"), 0o600)
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), "sslrootcert") {
		t.Errorf("a missing CA file: %v", err)
	}
}

func TestTenantOf(t *testing.T) {
	got, err := TenantOf("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0")
	if err != nil || got.Database != "kine_0f1e2d3c4b5a69788796a5b4c3d2e1f0" || got.Role != got.Database {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "robert'); drop table", "0f1e2d3c-zzzz"} {
		if _, err := TenantOf(bad); err == nil {
			t.Errorf("TenantOf(%q) accepted", bad)
		}
	}
}
