package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Every view of up to three instances (each live or not, capacity 0, 1 or unlimited, 0
// or 1 bound, memory unreported, short or ample, with the external datastore or not)
// against every need (a hint for the second name, for a name no instance has, or none;
// memory asked or not; an external datastore or not; a teardown or not): the decision is a live instance
// with room, none better exists, and the order of the instances does not change it; no
// decision is made only when no instance could take it, and the reason says which case.
func TestEveryViewOfThreeInstances(t *testing.T) {
	capacities := []int{0, 1, Unlimited}
	memories := []int64{0, 1 << 20, 1 << 30}
	var one []Instance
	for _, live := range []bool{false, true} {
		for _, c := range capacities {
			for b := range 2 {
				for _, m := range memories {
					for _, ext := range []bool{false, true} {
						one = append(one, Instance{Live: live, Capacity: c, Bound: b, MemoryAvailable: m, External: ext})
					}
				}
			}
		}
	}
	names := []string{"a", "b", "c"}
	needs := []Need{}
	for _, hint := range []string{"", "b", "nowhere"} {
		for _, mem := range []int64{0, 256 << 20} {
			for _, ext := range []bool{false, true} {
				needs = append(needs, Need{Instance: hint, Memory: mem, External: ext})
			}
			needs = append(needs, Need{Instance: hint, Memory: mem, Teardown: true})
		}
	}
	cases := 0
	var views func(prefix []Instance)
	views = func(prefix []Instance) {
		if len(prefix) > 0 {
			for _, need := range needs {
				check(t, prefix, need)
				cases++
			}
		}
		if len(prefix) == 3 {
			return
		}
		for _, in := range one {
			in.Name = names[len(prefix)]
			views(append(slices.Clone(prefix), in))
		}
	}
	views(nil)
	t.Logf("%d views and needs decided", cases)
}

func check(t *testing.T, view []Instance, need Need) {
	t.Helper()
	d := Place(view, need)
	reversed := slices.Clone(view)
	slices.Reverse(reversed)
	if r := Place(reversed, need); r != d {
		t.Fatalf("%+v %+v: %+v, reversed %+v", view, need, d, r)
	}
	can := func(in Instance) bool {
		room := need.Teardown || in.Free() > 0 && (need.Memory == 0 || in.MemoryAvailable == 0 || in.MemoryAvailable >= need.Memory)
		return in.Live && room && (need.Instance == "" || need.Instance == in.Name) && (!need.External || in.External)
	}
	if d.Instance == "" {
		if d.Reason == "" || d.Message == "" {
			t.Fatalf("%+v %+v: no instance and no reason: %+v", view, need, d)
		}
		for _, in := range view {
			if can(in) {
				t.Fatalf("%+v %+v: %s (%s), but %s could take it", view, need, d.Reason, d.Message, in.Name)
			}
		}
		want := NoRoom
		switch i := slices.IndexFunc(view, func(in Instance) bool { return in.Name == need.Instance }); {
		case need.Instance != "" && i < 0:
			want = InstanceUnknown
		case need.Instance != "" && !view[i].Live:
			want = InstanceNotLive
		case need.Instance != "":
			want = InstanceHasNoRoom
		case !slices.ContainsFunc(view, func(in Instance) bool { return in.Live }):
			want = NoInstance
		}
		if d.Reason != want {
			t.Fatalf("%+v %+v: reason %s, want %s", view, need, d.Reason, want)
		}
		return
	}
	i := slices.IndexFunc(view, func(in Instance) bool { return in.Name == d.Instance })
	if i < 0 || !can(view[i]) {
		t.Fatalf("%+v %+v: chose %q, which cannot take it", view, need, d.Instance)
	}
	for _, in := range view {
		if in.Name != d.Instance && can(in) && better(in, view[i]) {
			t.Fatalf("%+v %+v: chose %q over the better %q", view, need, d.Instance, in.Name)
		}
	}
}

// Clusters placed one after another fill instances in proportion to their room, and
// never past a capacity: 10 clusters over capacities 4 and 6 bind exactly 4 and 6.
func TestClustersFillEveryInstanceAndNoMore(t *testing.T) {
	view := []Instance{{Name: "host-a", Live: true, Capacity: 4}, {Name: "host-b", Live: true, Capacity: 6}}
	for n := range 11 {
		d := Place(view, Need{})
		if n == 10 {
			if d.Instance != "" || d.Reason != NoRoom {
				t.Fatalf("the 11th cluster: %+v, want NoRoom", d)
			}
			break
		}
		view[slices.IndexFunc(view, func(in Instance) bool { return in.Name == d.Instance })].Bound++
	}
	if view[0].Bound != 4 || view[1].Bound != 6 {
		t.Fatalf("bound %d and %d, want 4 and 6", view[0].Bound, view[1].Bound)
	}
}

// Instances without a cap share Clusters out by count, not by the memory their hosts
// reported (which two instances on one host report alike, and which lags by a renewal).
func TestUnlimitedInstancesShareByCount(t *testing.T) {
	view := []Instance{{Name: "a", Live: true, Capacity: Unlimited, MemoryAvailable: 9 << 30}, {Name: "b", Live: true, Capacity: Unlimited, MemoryAvailable: 8 << 30}}
	for range 6 {
		d := Place(view, Need{})
		view[slices.IndexFunc(view, func(in Instance) bool { return in.Name == d.Instance })].Bound++
	}
	if view[0].Bound != 3 || view[1].Bound != 3 {
		t.Errorf("bound %d and %d, want 3 and 3", view[0].Bound, view[1].Bound)
	}
}

// BenchmarkPlace is one decision among 100 instances as 10,000 Clusters are placed one
// after another (the view updated after each, as the front's would be).
func BenchmarkPlace(b *testing.B) {
	view := make([]Instance, 100)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range view {
		view[i] = Instance{Name: fmt.Sprintf("host-%03d", i), Live: r.IntN(20) > 0, Capacity: 100 + r.IntN(60), MemoryAvailable: int64(8+r.IntN(16)) << 30}
	}
	placed := 0
	b.ReportAllocs()
	for b.Loop() {
		if placed == 10000 {
			for i := range view {
				view[i].Bound = 0
			}
			placed = 0
		}
		d := Place(view, Need{Memory: 150 << 20})
		if d.Instance == "" {
			b.Fatalf("cluster %d: %s", placed, d.Message)
		}
		view[slices.IndexFunc(view, func(in Instance) bool { return in.Name == d.Instance })].Bound++
		placed++
	}
}
