package main

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

func node(name, phase string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": phase}}}
	u.SetName(name)
	return u
}

// Every event reaches the view, in order, each after it is applied; 410 Gone asks for a
// relist; another error ends the wait with it.
func TestWatchEvents(t *testing.T) {
	w := watch.NewFakeWithChanSize(8, false)
	w.Add(node("a", "Joining"))
	w.Modify(node("a", "Ready"))
	w.Add(node("b", "Joining"))
	w.Delete(node("a", "Ready"))
	w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	var seen []string
	objs := map[string]*unstructured.Unstructured{}
	relist, done, err := watchEvents(w, func(ev watch.Event) (bool, error) {
		apply(objs, ev)
		s := ""
		for _, n := range []string{"a", "b"} {
			if u, ok := objs[n]; ok {
				p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
				s += n + "=" + p + " "
			}
		}
		seen = append(seen, s)
		return false, nil
	})
	if !relist || done || err != nil {
		t.Fatalf("relist %v done %v err %v; want a relist on 410", relist, done, err)
	}
	want := []string{"a=Joining ", "a=Ready ", "a=Ready b=Joining ", "b=Joining "}
	if len(seen) != len(want) {
		t.Fatalf("views %q; want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("view %d: %q; want %q", i, seen[i], want[i])
		}
	}

	w = watch.NewFakeWithChanSize(2, false)
	w.Error(&apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", nil).ErrStatus)
	if relist, _, err := watchEvents(w, func(watch.Event) (bool, error) { return false, nil }); relist || !apierrors.IsForbidden(err) {
		t.Errorf("a Forbidden watch: relist %v err %v; want the error", relist, err)
	}

	w = watch.NewFakeWithChanSize(2, false)
	w.Add(node("c", "Ready"))
	if _, done, err := watchEvents(w, func(ev watch.Event) (bool, error) { apply(objs, ev); return objs["c"] != nil, nil }); !done || err != nil {
		t.Errorf("done %v err %v; want done once the view says so", done, err)
	}
}
