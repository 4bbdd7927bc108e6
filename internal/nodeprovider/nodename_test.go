package nodeprovider

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestNodeName(t *testing.T) {
	got, err := NodeName("demo", "n1")
	if err != nil || got != "demo-n1" {
		t.Fatalf("NodeName = %q, %v", got, err)
	}
	// The longest cluster name and node id still make a DNS-1123 label (63).
	long, err := NodeName(strings.Repeat("c", 40), strings.Repeat("n", MaxNodeIDLength))
	if err != nil || len(long) != 63 {
		t.Fatalf("longest NodeName is %d characters, %v", len(long), err)
	}
	for _, bad := range []string{"", "N1", "-n", "n-", "n_1", "a/b", strings.Repeat("n", MaxNodeIDLength+1)} {
		if _, err := NodeName("demo", bad); err == nil || !strings.Contains(err.Error(), "node id") {
			t.Errorf("NodeName(demo, %q) = %v, want an error naming the node id", bad, err)
		}
	}
	if _, err := NodeName("", "n1"); err == nil {
		t.Error("an empty cluster name was accepted")
	}
}

// No code but NodeName joins a cluster name and a node id (invariant 11; the seed's risk
// "the node name"): a second derivation could name a Node the CCM's provider ID does not.
func TestNodeNameIsTheOnlyDerivation(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	joins := regexp.MustCompile(`(?i)(cluster\w*(\.Name)?\s*\+\s*"-"|"%s-%s"|CutPrefix\([^)]*"-"\))`)
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == "bin" || d.Name() == ".git" || d.Name() == "components") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "nodeprovider/nodename.go") {
			return nil
		}
		b, _ := os.ReadFile(path)
		for i, line := range strings.Split(string(b), "\n") {
			if joins.MatchString(line) {
				t.Errorf("%s:%d derives a node name outside NodeName: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
}
