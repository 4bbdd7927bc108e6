package clusterprovider

import (
	"context"
	"errors"
	"slices"
	"testing"

	"socialweb.computer/kcp/internal/clusterstack"
	"socialweb.computer/kcp/internal/instancesnapshot"
	"socialweb.computer/kcp/internal/nodeprovider"
)

// fakeGuests records what it was asked and what nodes.json listed at that moment.
type fakeGuests struct {
	c                   *Cluster
	failCreate, failDel error
	calls               []string
	listedAtCreate      bool
	listedAtDelete      bool
	created             []nodeprovider.Guest
}

func (f *fakeGuests) listed(name string) bool {
	list, _ := f.c.Instances()
	_, ok := instancesnapshot.Find(list, name)
	return ok
}

func (f *fakeGuests) Create(_ context.Context, g nodeprovider.Guest) error {
	f.calls = append(f.calls, "create")
	f.listedAtCreate = f.listed(g.Name)
	if f.failCreate != nil {
		return f.failCreate
	}
	f.created = append(f.created, g)
	return nil
}

func (f *fakeGuests) Delete(_ context.Context, g nodeprovider.Guest) error {
	f.calls = append(f.calls, "delete")
	f.listedAtDelete = f.listed(g.Name)
	return f.failDel
}

func (f *fakeGuests) List(context.Context) ([]nodeprovider.Guest, error) { return f.created, nil }

func snapCluster(t *testing.T) *Cluster {
	s := clusterstack.Spec{Name: "demo", DataDir: t.TempDir()}
	if err := ensureSnapshot(s); err != nil {
		t.Fatal(err)
	}
	return &Cluster{Name: "demo", Spec: s}
}

func TestAGuestIsListedBeforeItIsCreated(t *testing.T) {
	c := snapCluster(t)
	f := &fakeGuests{c: c}
	g, _ := nodeprovider.NewGuest("demo", "n1")
	if _, err := addGuest(context.Background(), c, f, g); err != nil {
		t.Fatal(err)
	}
	if !f.listedAtCreate {
		t.Fatal("the guest was created before nodes.json listed it (invariant 10)")
	}
	if !f.listed(g.Name) {
		t.Fatal("the created guest is not listed")
	}
}

func TestAFailedCreationIsUnlistedAgain(t *testing.T) {
	c := snapCluster(t)
	boom := errors.New("no capacity")
	f := &fakeGuests{c: c, failCreate: boom}
	g, _ := nodeprovider.NewGuest("demo", "n1")
	if _, err := addGuest(context.Background(), c, f, g); !errors.Is(err, boom) {
		t.Fatalf("addGuest = %v, want the creation's error", err)
	}
	if f.listed(g.Name) {
		t.Fatal("a guest whose creation failed is still listed")
	}
}

func TestRemovalDrainsDeletesThenUnlists(t *testing.T) {
	c := snapCluster(t)
	f := &fakeGuests{c: c}
	g, _ := nodeprovider.NewGuest("demo", "n1")
	addGuest(context.Background(), c, f, g)
	drain := func(context.Context) error { f.calls = append(f.calls, "drain"); return nil }
	if err := removeGuest(context.Background(), c, f, drain, g); err != nil {
		t.Fatal(err)
	}
	if want := []string{"create", "drain", "delete"}; !slices.Equal(f.calls, want) {
		t.Fatalf("calls %v, want %v", f.calls, want)
	}
	if !f.listedAtDelete {
		t.Fatal("the guest was unlisted before it was deleted")
	}
	if f.listed(g.Name) {
		t.Fatal("a deleted guest is still listed")
	}
}

func TestAFailedDeleteOrDrainKeepsTheEntry(t *testing.T) {
	for _, tc := range []struct {
		name             string
		drainErr, delErr error
		wantCalls        []string
	}{
		{"delete fails", nil, errors.New("VM API down"), []string{"create", "drain", "delete"}},
		{"drain fails", errors.New("PDB"), nil, []string{"create", "drain"}},
	} {
		c := snapCluster(t)
		f := &fakeGuests{c: c, failDel: tc.delErr}
		g, _ := nodeprovider.NewGuest("demo", "n1")
		addGuest(context.Background(), c, f, g)
		drain := func(context.Context) error { f.calls = append(f.calls, "drain"); return tc.drainErr }
		if err := removeGuest(context.Background(), c, f, drain, g); err == nil {
			t.Fatalf("%s: removeGuest succeeded", tc.name)
		}
		if !slices.Equal(f.calls, tc.wantCalls) {
			t.Errorf("%s: calls %v, want %v", tc.name, f.calls, tc.wantCalls)
		}
		if !f.listed(g.Name) {
			t.Errorf("%s: the entry went although the guest may still run", tc.name)
		}
	}
}

func TestNextNodeIDsSkipsListedOnes(t *testing.T) {
	listed := []instancesnapshot.Instance{{NodeID: "n1"}, {NodeID: "n3"}}
	if got := NextNodeIDs(listed, 3); !slices.Equal(got, []string{"n2", "n4", "n5"}) {
		t.Fatalf("NextNodeIDs = %v", got)
	}
	if got := NextNodeIDs(nil, 0); len(got) != 0 {
		t.Fatalf("NextNodeIDs(0) = %v", got)
	}
}
