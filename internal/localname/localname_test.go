package localname

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

var clusterName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

func TestChoose(t *testing.T) {
	prodA := Cluster{Namespace: "acct-a", Name: "prod", UID: "a"}
	for _, tc := range []struct {
		what   string
		c      Cluster
		others []Cluster
		want   string
	}{
		{"default namespace, alone", Cluster{Namespace: "default", Name: "prod", UID: "d"}, nil, "prod"},
		{"another namespace, alone", prodA, nil, Hashed("acct-a", "prod", 0)},
		{"two accounts each create prod", Cluster{Namespace: "acct-b", Name: "prod", UID: "b"},
			[]Cluster{{Namespace: "acct-a", Name: "prod", UID: "a", Local: Hashed("acct-a", "prod", 0), Legacy: true}}, Hashed("acct-b", "prod", 0)},
		{"legacy keeps its bare name", Cluster{Namespace: "acct-a", Name: "prod", UID: "a", Legacy: true}, nil, "prod"},
		{"default yields to a legacy holder", Cluster{Namespace: "default", Name: "prod", UID: "d"},
			[]Cluster{{Namespace: "acct-a", Name: "prod", UID: "a", Legacy: true}}, Hashed("default", "prod", 0)},
		{"default yields to a recorded holder", Cluster{Namespace: "default", Name: "prod", UID: "d"},
			[]Cluster{{Namespace: "acct-a", Name: "prod", UID: "a", Local: "prod", Legacy: true}}, Hashed("default", "prod", 0)},
		{"a name only asked for is held by nobody", Cluster{Namespace: "default", Name: "prod", UID: "d"},
			[]Cluster{{Namespace: "acct-a", Name: "x", UID: "a", Local: "prod"}}, "prod"},
		{"a new Cluster elsewhere holds nothing yet", Cluster{Namespace: "default", Name: "prod", UID: "d"},
			[]Cluster{{Namespace: "acct-a", Name: "prod", UID: "a"}}, "prod"},
		{"itself is skipped", Cluster{Namespace: "default", Name: "prod", UID: "d"},
			[]Cluster{{Namespace: "default", Name: "prod", UID: "d", Legacy: true}}, "prod"},
		{"a hashed name held goes to the next salt", prodA,
			[]Cluster{{Namespace: "x", Name: "y", UID: "y", Local: Hashed("acct-a", "prod", 0), Legacy: true}}, Hashed("acct-a", "prod", 1)},
		{"a legacy Cluster whose bare name was a hashed one", prodA,
			[]Cluster{{Namespace: "default", Name: Hashed("acct-a", "prod", 0), UID: "z", Legacy: true}}, Hashed("acct-a", "prod", 1)},
	} {
		if got := Choose(tc.c, tc.others); got != tc.want {
			t.Errorf("%s: Choose = %q, want %q", tc.what, got, tc.want)
		}
	}
}

// Every name a Cluster may have, in many namespaces, each given its local name in turn:
// all differ, each is a valid cluster name, and none is a name another holds.
func TestChosenNamesAreUniqueAndValid(t *testing.T) {
	names := []string{"a", "prod", "prod-", strings.Repeat("x", 40), strings.Repeat("ab-", 13) + "c", "db"}
	namespaces := []string{"default", "acct-a", "acct-b", strings.Repeat("n", 63)}
	var chosen []Cluster
	seen := map[string]string{}
	for i, ns := range namespaces {
		for j, n := range names {
			if !clusterName.MatchString(n) {
				continue
			}
			c := Cluster{Namespace: ns, Name: n, UID: fmt.Sprint(i, "/", j), Legacy: (i+j)%5 == 0}
			c.Local = Choose(c, chosen)
			c.Legacy = true // bound now: it holds its name
			if len(c.Local) > MaxLength || !clusterName.MatchString(c.Local) {
				t.Errorf("%s/%s: local name %q is not a valid cluster name of at most %d characters", ns, n, c.Local, MaxLength)
			}
			if other, dup := seen[c.Local]; dup {
				t.Errorf("%s/%s: local name %q is %s's already", ns, n, c.Local, other)
			}
			seen[c.Local] = ns + "/" + n
			chosen = append(chosen, c)
		}
	}
	// The same view decides the same: every instance chooses alike.
	c := Cluster{Namespace: "acct-a", Name: "prod", UID: "new"}
	if Choose(c, chosen) != Choose(c, chosen) {
		t.Error("Choose is not deterministic")
	}
}

// One choice among 10,000 Clusters on the front, as a bind makes it: the figure in
// docs/benchmarks.md ("Beyond one host").
func BenchmarkChoose10000(b *testing.B) {
	others := make([]Cluster, 10000)
	for i := range others {
		ns := fmt.Sprintf("acct-%d", i%100)
		name := fmt.Sprintf("c%d", i/100)
		others[i] = Cluster{Namespace: ns, Name: name, UID: fmt.Sprint(i), Local: Hashed(ns, name, 0), Legacy: true}
	}
	c := Cluster{Namespace: "acct-7", Name: "c3", UID: "new"} // its first choice is held: the next salt
	b.ReportAllocs()
	for b.Loop() {
		if Choose(c, others) == "" {
			b.Fatal("no name")
		}
	}
}

// Whether a Cluster may use its recorded name on a host: never another live Cluster's
// DataDir; where the DataDir records nothing or a Cluster gone, a name the instance knows
// it by, else the oldest holder's.
func TestMayUse(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	victim := Cluster{Namespace: "a", Name: "prod", UID: "v", Local: "prod", Legacy: true, Created: t0}
	thief := Cluster{Namespace: "b", Name: "x", UID: "t", Local: "prod", Legacy: true, Created: t0.Add(time.Hour)}
	asker := Cluster{Namespace: "c", Name: "y", UID: "k", Local: "prod", Created: t0.Add(-time.Hour)} // asks, holds nothing
	both := []Cluster{victim, thief, asker}
	for _, tc := range []struct {
		what      string
		c         Cluster
		owner     string
		ownerLive bool
		known     string
		want      bool
	}{
		{"its own DataDir", thief, "t", true, "", true},
		{"another live Cluster's DataDir", thief, "v", true, "prod", false},
		{"nothing recorded: the older holder's", victim, "", false, "", true},
		{"nothing recorded: not the younger's", thief, "", false, "", false},
		{"nothing recorded: a name this instance knows it by", thief, "", false, "prod", true},
		{"a leftover of a Cluster gone: as nothing recorded", thief, "gone", false, "", false},
		{"an older Cluster that only asks for the name refuses nobody", victim, "", false, "", true},
	} {
		if got := MayUse(tc.c, tc.owner, tc.ownerLive, tc.known, both); got != tc.want {
			t.Errorf("%s: MayUse = %v, want %v", tc.what, got, tc.want)
		}
	}
	if !Older(victim, thief) || Older(thief, victim) || !Older(Cluster{UID: "a", Created: t0}, Cluster{UID: "b", Created: t0}) {
		t.Error("Older: the earlier creation, then the smaller uid")
	}
}
