package instancelease

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"socialweb.computer/kcp/internal/placement"
)

// A serve registers; the same instance from the same host and root (a restart) takes its
// Lease back; the same name from elsewhere is refused while the Lease is current, and
// taken once it has expired. What a Lease reports reads back as placement sees it.
func TestRegisterRefusesANameHeldFromElsewhere(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	report := func() Report { return Report{Capacity: 4, Running: 2, MemoryAvailable: 8 << 30} }
	a := &Holder{Client: c, Name: "host-a", Where: "vm1:/var/lib/a", Report: report}
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if err := (&Holder{Client: c, Name: "host-a", Where: "vm1:/var/lib/a", Report: report}).Register(ctx); err != nil {
		t.Fatalf("the same serve again (a restart): %v", err)
	}
	other := &Holder{Client: c, Name: "host-a", Where: "vm2:/var/lib/a", Report: report}
	if err := other.Register(ctx); !errors.Is(err, ErrNameInUse) {
		t.Fatalf("the name from another host while its Lease is current: %v, want ErrNameInUse", err)
	}
	leases, err := List(ctx, c)
	if err != nil || len(leases) != 1 {
		t.Fatalf("List: %v, %v", leases, err)
	}
	l := leases[0]
	if l.Where != "vm1:/var/lib/a" || !l.Live(time.Now()) || l.Live(time.Now().Add(Duration+time.Second)) {
		t.Errorf("the Lease after the refused claim: %+v", l)
	}
	if got := l.Instance(time.Now(), 3); got != (placement.Instance{Name: "host-a", Live: true, Capacity: 4, Bound: 3, MemoryAvailable: 8 << 30}) {
		t.Errorf("as placement sees it: %+v", got)
	}

	// Expired: host-a's serve is gone, and another may take the name.
	old, _ := c.CoordinationV1().Leases(Namespace).Get(ctx, "host-a", metav1.GetOptions{})
	past := metav1.NewMicroTime(time.Now().Add(-2 * Duration))
	old.Spec.RenewTime = &past
	c.CoordinationV1().Leases(Namespace).Update(ctx, old, metav1.UpdateOptions{})
	if err := other.Register(ctx); err != nil {
		t.Fatalf("the name from another host once its Lease expired: %v", err)
	}
	// The serve that lost it says so at its next renewal, and does not take it back.
	if err := a.renew(ctx); !errors.Is(err, ErrNameTaken) {
		t.Errorf("the serve whose name was taken renewed it: %v; want ErrNameTaken", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if leases, _ := List(ctx, c); len(leases) != 1 {
		t.Fatalf("the serve that lost the name released the Lease of the one that took it: %v", leases)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if leases, _ := List(ctx, c); len(leases) != 0 {
		t.Errorf("after Release: %v", leases)
	}
}

func TestAnUnlimitedCapacityAndABadOne(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	h := &Holder{Client: c, Name: "h", Where: "w", Report: func() Report { return Report{Capacity: placement.Unlimited} }}
	if err := h.Register(ctx); err != nil {
		t.Fatal(err)
	}
	o, _ := c.CoordinationV1().Leases(Namespace).Get(ctx, "h", metav1.GetOptions{})
	if l, err := FromLease(o); err != nil || l.Capacity != placement.Unlimited || o.Annotations[CapacityAnnotation] != "unlimited" {
		t.Fatalf("unlimited: %+v, %v, %q", l, err, o.Annotations[CapacityAnnotation])
	}
	o.Annotations[CapacityAnnotation] = "-3"
	if _, err := FromLease(o); err == nil {
		t.Error("a capacity of -3 was read")
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{"host-a": true, "h1": true, "": false, "Host-A": false, "host.a": false, "-a": false} {
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q): %v", name, err)
		}
	}
}
