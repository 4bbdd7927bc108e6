package contract

import "testing"

func TestProviderIDRoundTrips(t *testing.T) {
	id := ProviderID("demo", "demo-n1")
	if id != "socialweb://demo/demo-n1" {
		t.Fatalf("ProviderID = %q", id)
	}
	c, n, err := ParseProviderID(id)
	if err != nil || c != "demo" || n != "demo-n1" {
		t.Fatalf("ParseProviderID(%q) = %q, %q, %v", id, c, n, err)
	}
	for _, bad := range []string{"", "kind://demo/n", "socialweb://demo", "socialweb:///n", "socialweb://demo/", "socialweb://demo/a/b"} {
		if _, _, err := ParseProviderID(bad); err == nil {
			t.Errorf("ParseProviderID(%q) accepted", bad)
		}
	}
}
