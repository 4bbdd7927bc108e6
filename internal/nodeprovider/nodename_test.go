package nodeprovider

import (
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
