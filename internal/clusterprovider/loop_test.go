package clusterprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestStepProgressReadsInOrder(t *testing.T) {
	var p []string
	for _, e := range [][2]string{{"postgres", "starting"}, {"postgres", "ready"}, {"kine", "starting"}, {"kine", "ready"}, {"kube-apiserver", "starting"}} {
		p = stepProgress(p, e[0], e[1])
	}
	if got := strings.Join(p, ", "); got != "postgres ready, kine ready, kube-apiserver starting" {
		t.Errorf("%q", got)
	}
}

// A conflict (retried at once) and a canceled context (the provider stopping) are expected:
// an INFO line and no Warning Event; any other failure is an operator's concern.
func TestExpectedFailuresAreNoWarning(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "socialweb.computer", Resource: "clusters"}, "demo", errors.New("the object has been modified"))
	for err, want := range map[error]bool{
		fmt.Errorf("AddFinalizer: %w", conflict):    true,
		fmt.Errorf("BringUp: %w", context.Canceled): true,
		errors.New("kine did not stop"):             false,
	} {
		if got := expected(err); got != want {
			t.Errorf("expected(%v) = %v; want %v", err, got, want)
		}
	}
}
