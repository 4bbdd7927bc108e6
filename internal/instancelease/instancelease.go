// Package instancelease is how a provider instance (one serve, one host) tells the front it
// is alive and what room it has: a coordination Lease of its own, renewed while it runs,
// whose annotations carry its capacity and usage. Placement reads every instance's Lease;
// `socialweb-kcp hosts` shows them. Coordination goes through the front, which already
// has leases and optimistic concurrency: no consensus of our own.
package instancelease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/placement"
)

// Namespace holds the instances' Leases on the front.
const Namespace = "socialweb-system"

// The Lease's annotations: what the instance reports of itself at each renewal.
const (
	CapacityAnnotation = "socialweb.computer/capacity-clusters"          // an integer, or "unlimited"
	RunningAnnotation  = "socialweb.computer/running-clusters"           // clusters with processes now
	MemoryAnnotation   = "socialweb.computer/memory-available-bytes"     // MemAvailable of its host
	CPUAnnotation      = "socialweb.computer/cpu-idle-millicores"        // its host's idle CPU since the last renewal
	WhereAnnotation    = "socialweb.computer/where"                      // host name and data root: which serve holds it
	ExternalAnnotation = "socialweb.computer/external-datastore"         // "true": it reaches the shared external datastore
	ProblemAnnotation  = "socialweb.computer/external-datastore-problem" // why it has one and does not reach it
	instanceLabel      = "socialweb.computer/provider-instance"
)

// Duration is how long a Lease stays current without a renewal; it is renewed every third
// of it, so two renewals may fail before the instance counts as gone.
const Duration = 30 * time.Second

// ValidateName checks an instance name (serve --instance): it names a Lease and is a
// label value, so a DNS label.
func ValidateName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("--instance %q: want a DNS label (lowercase letters, digits and '-', at most 63): %s", name, errs[0])
	}
	return nil
}

// Report is what an instance says of itself.
type Report struct {
	Capacity        int // placement.Unlimited for no cap
	Running         int
	MemoryAvailable int64
	// CPUIdle is its host's idle CPU over the last renewal's interval, in thousandths of a
	// core; -1: not reported. Shown to the operator (socialweb-kcp hosts), not placed by:
	// it swings with every bring-up, and each tenant's CPU is bounded by its control group.
	CPUIdle         int64
	External        bool   // it reaches the external datastore (serve --external-datastore)
	ExternalProblem string // it has one and does not reach it: what it saw
}

// Lease is one instance as its Lease shows it.
type Lease struct {
	Name    string
	Where   string
	Renewed time.Time
	Report
}

// Live says whether the lease is current at now.
func (l Lease) Live(now time.Time) bool {
	return !l.Renewed.IsZero() && now.Before(l.Renewed.Add(Duration))
}

// Instance is l for placement at now, with bound Clusters bound to it.
func (l Lease) Instance(now time.Time, bound int) placement.Instance {
	return placement.Instance{Name: l.Name, Live: l.Live(now), Capacity: l.Capacity, Bound: bound, MemoryAvailable: l.MemoryAvailable, External: l.External, ExternalProblem: l.ExternalProblem}
}

// FromLease reads an instance's Lease; a Lease not of an instance is an error.
func FromLease(o *coordinationv1.Lease) (Lease, error) {
	if o.Labels[instanceLabel] != "true" || o.Spec.HolderIdentity == nil {
		return Lease{}, fmt.Errorf("lease %s/%s is not a provider instance's", o.Namespace, o.Name)
	}
	l := Lease{Name: o.Name, Where: o.Annotations[WhereAnnotation]}
	if o.Spec.RenewTime != nil {
		l.Renewed = o.Spec.RenewTime.Time
	}
	l.Capacity = placement.Unlimited
	if c := o.Annotations[CapacityAnnotation]; c != "unlimited" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			return Lease{}, fmt.Errorf("lease %s: annotation %s: %q is not a capacity", o.Name, CapacityAnnotation, c)
		}
		l.Capacity = n
	}
	l.Running, _ = strconv.Atoi(o.Annotations[RunningAnnotation])
	l.MemoryAvailable, _ = strconv.ParseInt(o.Annotations[MemoryAnnotation], 10, 64)
	l.CPUIdle = -1
	if v, err := strconv.ParseInt(o.Annotations[CPUAnnotation], 10, 64); err == nil && v >= 0 {
		l.CPUIdle = v
	}
	l.External = o.Annotations[ExternalAnnotation] == "true"
	l.ExternalProblem = o.Annotations[ProblemAnnotation]
	return l, nil
}

// List reads every instance's Lease on the front.
func List(ctx context.Context, c kubernetes.Interface) ([]Lease, error) {
	list, err := c.CoordinationV1().Leases(Namespace).List(ctx, metav1.ListOptions{LabelSelector: instanceLabel + "=true"})
	if err != nil {
		return nil, err
	}
	out := make([]Lease, 0, len(list.Items))
	for i := range list.Items {
		if l, err := FromLease(&list.Items[i]); err == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// Holder keeps one instance's Lease.
type Holder struct {
	Client kubernetes.Interface
	Name   string
	// Where is this serve: its host name and data root. A current Lease of the name held
	// from elsewhere is another live serve, and Register refuses to take it; one held from
	// here is this serve's earlier run (killed, or restarted to upgrade), and is taken.
	Where  string
	Report func() Report
	Log    *slog.Logger
}

// ErrNameInUse: another live serve holds the instance name.
var ErrNameInUse = errors.New("another serve holds this instance name")

// Register creates or takes this instance's Lease, the namespace too when missing.
func (h *Holder) Register(ctx context.Context) error {
	// Made when missing only: on a front of its own operator's, serve may hold no right to
	// create namespaces once it is there.
	if _, err := h.Client.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
		if _, err := h.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("front: create namespace %s: %w", Namespace, err)
		}
	} else if err != nil {
		return fmt.Errorf("front: namespace %s: %w", Namespace, err)
	}
	cur, err := h.current(ctx)
	if cur == nil || err != nil {
		return err
	}
	if l, err := FromLease(cur); err == nil && l.Where != h.Where && l.Live(time.Now()) {
		return fmt.Errorf("--instance %s: %w (%s, renewed %s ago); choose another name, or wait %s for its lease to expire if that serve is gone",
			h.Name, ErrNameInUse, l.Where, time.Since(l.Renewed).Round(time.Second), Duration)
	}
	_, err = h.Client.CoordinationV1().Leases(Namespace).Update(ctx, h.lease(cur), metav1.UpdateOptions{})
	return err
}

// Keep renews the Lease every third of Duration until ctx ends (nil), or until another
// serve holds the name (ErrNameTaken): this serve must stop then, or two would run the
// same Clusters. A renewal that fails otherwise is logged and tried again at the next
// tick: the front restarts (to renew its own certificates) and is briefly away.
func (h *Holder) Keep(ctx context.Context) error {
	t := time.NewTicker(Duration / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			err := h.renew(ctx)
			if errors.Is(err, ErrNameTaken) {
				return err
			}
			if err != nil && ctx.Err() == nil {
				h.Log.Warn("instance lease not renewed; trying again", "instance", h.Name, "err", err)
			}
		}
	}
}

// ErrNameTaken: another serve took this instance's name while its Lease had expired.
var ErrNameTaken = errors.New("another serve holds this instance's name now")

// Release deletes the Lease, so placement stops counting on this instance at once (a
// stop that keeps clusters running for the next serve keeps the Lease instead: the next
// run renews it).
func (h *Holder) Release(ctx context.Context) error {
	cur, err := h.Client.CoordinationV1().Leases(Namespace).Get(ctx, h.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.Annotations[WhereAnnotation] != h.Where {
		return nil // another serve's now: not this one's to release
	}
	// Only the Lease read: one another serve took meanwhile is not deleted.
	err = h.Client.CoordinationV1().Leases(Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (h *Holder) renew(ctx context.Context) error {
	cur, err := h.current(ctx)
	if cur == nil || err != nil {
		return err
	}
	if w := cur.Annotations[WhereAnnotation]; w != h.Where {
		return fmt.Errorf("--instance %s: %w (%s; this is %s)", h.Name, ErrNameTaken, w, h.Where)
	}
	_, err = h.Client.CoordinationV1().Leases(Namespace).Update(ctx, h.lease(cur), metav1.UpdateOptions{})
	return err
}

// current is the instance's Lease as the front has it; nil (and no error) when there was
// none, and this call created it.
func (h *Holder) current(ctx context.Context) (*coordinationv1.Lease, error) {
	cur, err := h.Client.CoordinationV1().Leases(Namespace).Get(ctx, h.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = h.Client.CoordinationV1().Leases(Namespace).Create(ctx, h.lease(nil), metav1.CreateOptions{})
		return nil, err
	}
	return cur, err
}

// lease is the Lease to write: cur (nil for a new one) renewed, with the report of now.
func (h *Holder) lease(cur *coordinationv1.Lease) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: Namespace}}
	if cur != nil {
		l = cur.DeepCopy()
	}
	r := h.Report()
	capacity := "unlimited"
	if r.Capacity != placement.Unlimited {
		capacity = strconv.Itoa(r.Capacity)
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[instanceLabel] = "true"
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[CapacityAnnotation] = capacity
	l.Annotations[RunningAnnotation] = strconv.Itoa(r.Running)
	l.Annotations[MemoryAnnotation] = strconv.FormatInt(r.MemoryAvailable, 10)
	if r.CPUIdle >= 0 {
		l.Annotations[CPUAnnotation] = strconv.FormatInt(r.CPUIdle, 10)
	} else {
		delete(l.Annotations, CPUAnnotation)
	}
	l.Annotations[ExternalAnnotation] = strconv.FormatBool(r.External)
	if r.ExternalProblem != "" {
		l.Annotations[ProblemAnnotation] = r.ExternalProblem
	} else {
		delete(l.Annotations, ProblemAnnotation)
	}
	taken := cur == nil || cur.Annotations[WhereAnnotation] != h.Where
	l.Annotations[WhereAnnotation] = h.Where
	now := metav1.NewMicroTime(time.Now())
	secs := int32(Duration / time.Second)
	name := h.Name
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &name, &secs, &now
	if taken || l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
	}
	return l
}
