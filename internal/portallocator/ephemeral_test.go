package portallocator

import (
	"os"
	"path/filepath"
	"testing"
)

func TestARangeTheKernelMayHandOutIsFound(t *testing.T) {
	e := Ephemeral{Local: Range{32768, 60999}, Reserved: []Range{{34500, 34549}, {34560, 34560}}}
	for _, tc := range []struct {
		r    Range
		want Range
		ok   bool
	}{
		{Range{30000, 30999}, Range{}, false},
		{Range{30000, 32768}, Range{32768, 32768}, true},
		{Range{34500, 34549}, Range{}, false},            // all reserved
		{Range{34500, 34599}, Range{34550, 34559}, true}, // the first stretch not reserved
		{Range{34555, 34599}, Range{34555, 34559}, true},
		{Range{34561, 34599}, Range{34561, 34599}, true},
		{Range{60999, 65535}, Range{60999, 60999}, true},
		{Range{61000, 65535}, Range{}, false},
	} {
		got, ok := e.Overlap(tc.r)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Overlap(%s) = %s, %v; want %s, %v", tc.r, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTheKernelsSettingsAreRead(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ip_local_port_range"), []byte("32768\t60999\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "ip_local_reserved_ports"), []byte("34500-34599,40000\n"), 0o600)
	e, err := readEphemeral(dir)
	if err != nil || e.Local != (Range{32768, 60999}) || len(e.Reserved) != 2 || e.Reserved[1] != (Range{40000, 40000}) {
		t.Fatalf("readEphemeral = %+v, %v", e, err)
	}
	os.WriteFile(filepath.Join(dir, "ip_local_reserved_ports"), []byte("\n"), 0o600)
	if e, err := readEphemeral(dir); err != nil || len(e.Reserved) != 0 {
		t.Errorf("nothing reserved: %+v, %v", e, err)
	}
}
