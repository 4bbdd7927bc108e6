package clusterprovider

import (
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"socialweb.computer/kcp/internal/frontdoor"
)

// Router is the front door's routing table (frontdoor.Server), which the loop keeps in
// step with the Clusters' spec.extraNames.
type Router interface {
	SetNames(frontdoor.Names)
}

// ExtraNamesCondition is the Cluster condition that says whether its spec.extraNames
// are routed to it, and if not, which one and why.
const ExtraNamesCondition = "ExtraNames"

// Claims are the extra names the Clusters in objs ask for. Of Clusters that share a name
// (in different namespaces) only the owner's count (NameOwner): the others are refused.
func Claims(objs []runtime.Object) []frontdoor.Claim {
	// Grouped by name once: NameOwner then reads only a name's few objects, so a pass
	// stays linear in the Clusters however many ask for names.
	byName := map[string][]runtime.Object{}
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			byName[m.GetName()] = append(byName[m.GetName()], o)
		}
	}
	var out []frontdoor.Claim
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "extraNames")
		if len(names) == 0 || NameOwner(byName[u.GetName()], u.GetName()) != u.GetNamespace()+"/"+u.GetName() {
			continue
		}
		out = append(out, frontdoor.Claim{Cluster: u.GetName(), Names: names, Since: u.GetCreationTimestamp().Time})
	}
	return out
}

// syncDoorNames decides the front door's names from every Cluster the lister has and,
// when they changed, hands them to the front door and to the provider (for the serving
// certificates minted from then on). It keeps each cluster's refusals for its status.
// Without a front door there is nothing to route.
func (l *Loop) syncDoorNames() {
	base := l.P.cfg.FrontDoor.Names
	if base.BaseDomain == "" {
		return
	}
	objs, err := l.lister.List(labels.Everything())
	if err != nil {
		return // an informer's lister does not fail; the next pass tries again
	}
	names, refused := base.WithClaims(Claims(objs))
	byCluster := map[string][]string{}
	for _, r := range refused {
		byCluster[r.Cluster] = append(byCluster[r.Cluster], r.Error())
	}
	l.namesMu.Lock()
	changed := l.names == nil || !maps.Equal(l.names.Extra, names.Extra)
	l.names, l.refusedNames = &names, byCluster
	l.namesMu.Unlock()
	if changed {
		l.P.SetFrontDoorNames(names)
		if l.Router != nil {
			l.Router.SetNames(names)
		}
		l.Log.Info("front door names", "extra", names.Extra)
		// Every Cluster that asks for names may have won or lost one: each pass writes its
		// condition, and mints its certificate again when it runs.
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				if _, has, _ := unstructured.NestedStringSlice(u.Object, "spec", "extraNames"); has {
					l.queue.Add(u.GetNamespace() + "/" + u.GetName())
				}
			}
		}
	}
}

// extraNamesCondition is what conds should say of cluster's spec.extraNames: removed
// when it asks for none.
func (l *Loop) extraNamesCondition(conds *[]metav1.Condition, name string, extra []string, generation int64) {
	if len(extra) == 0 {
		meta.RemoveStatusCondition(conds, ExtraNamesCondition)
		return
	}
	c := metav1.Condition{Type: ExtraNamesCondition, ObservedGeneration: generation}
	l.namesMu.Lock()
	refused, names := l.refusedNames[name], l.names
	l.namesMu.Unlock()
	switch {
	case names == nil:
		c.Status, c.Reason = metav1.ConditionFalse, "NoFrontDoor"
		c.Message = "spec.extraNames take effect only behind the front door: serve --front-door ADDRESS --base-domain DOMAIN"
	case len(refused) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Refused", strings.Join(refused, "; ")
	default:
		c.Status, c.Reason = metav1.ConditionTrue, "Routed"
		c.Message = "routed to this cluster and on its serving certificate: " + strings.Join(names.Of(name)[1:], ", ")
	}
	meta.SetStatusCondition(conds, c)
}
