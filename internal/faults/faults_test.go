package faults

import (
	"os"
	"reflect"
	"testing"
)

func TestAScheduleReplaysFromItsSeed(t *testing.T) {
	a, b := Schedule(42, 50, 4), Schedule(42, 50, 4)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed gave two schedules")
	}
	if reflect.DeepEqual(a, Schedule(43, 50, 4)) {
		t.Fatal("two seeds gave one schedule")
	}
}

func TestAScheduleCoversEveryKindWhenItIsLongEnough(t *testing.T) {
	for _, n := range []int{len(Kinds), 30, 200} {
		for seed := range uint64(20) {
			s := Schedule(seed, n, 6)
			if len(s) != n {
				t.Fatalf("seed %d: %d faults, want %d", seed, len(s), n)
			}
			seen := map[Kind]int{}
			for _, f := range s {
				seen[f.Kind]++
				if f.Cluster < 0 || f.Cluster >= 6 || f.Delay < 0 || f.Delay >= MaxDelay {
					t.Fatalf("seed %d: out of range: %v", seed, f)
				}
			}
			for _, k := range Kinds {
				if seen[k] == 0 {
					t.Errorf("seed %d, %d faults: no %s", seed, n, k)
				}
			}
		}
	}
}

func TestAShortScheduleIsAPrefixOfAShuffledRound(t *testing.T) {
	s := Schedule(7, 5, 2)
	seen := map[Kind]bool{}
	for _, f := range s {
		if seen[f.Kind] {
			t.Fatalf("%s twice in a schedule shorter than one round", f.Kind)
		}
		seen[f.Kind] = true
	}
	if Schedule(7, 0, 2) != nil || Schedule(7, 3, 0) != nil {
		t.Fatal("an empty schedule was not empty")
	}
}

// The harness tells a component from its own children by their parent.
func TestParentPid(t *testing.T) {
	if got := parentPid(os.Getpid()); got != os.Getppid() {
		t.Errorf("parentPid(self) = %d; want %d", got, os.Getppid())
	}
	if got := parentPid(1 << 30); got != 0 {
		t.Errorf("parentPid(a pid that is not) = %d; want 0", got)
	}
}
