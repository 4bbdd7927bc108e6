package clusterprovider

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"socialweb.computer/kcp/api/v1alpha1"
	"socialweb.computer/kcp/internal/frontdoor"
	"socialweb.computer/kcp/internal/identitystore"
	"socialweb.computer/kcp/internal/localname"
)

// Router is the front door's routing table (frontdoor.Server), which the loop keeps in
// step with the Clusters' spec.extraNames.
type Router interface {
	SetNames(frontdoor.Names)
}

// ExtraNamesCondition is the Cluster condition that says whether its spec.extraNames
// are routed to it, and if not, which one and why.
const ExtraNamesCondition = "ExtraNames"

// Claims are the extra names the Clusters in objs ask for, and the Clusters the front
// door knows by namespace: each that has a local name recorded (it was bound). One
// without is not known by namespace yet: its local name is chosen when it is bound. Of Clusters that
// show one local name (an annotation set by hand), only the one ownerOf names (the uid
// its DataDir records; "" when unknown), else the oldest, is known by it.
func Claims(objs []runtime.Object, ownerOf func(local string) string) ([]frontdoor.Claim, []frontdoor.Hosted) {
	byLocal := map[string]*unstructured.Unstructured{}
	var order []string
	var claims []frontdoor.Claim
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		local := u.GetAnnotations()[v1alpha1.LocalNameAnnotation]
		if local == "" {
			// Bound by an instance from before local names, which knows it by its name: its
			// extra names stay routed to that name; it is known by namespace once recorded.
			if names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "extraNames"); len(names) > 0 && boundTo(u) != "" {
				claims = append(claims, frontdoor.Claim{Cluster: u.GetName(), Names: names, Since: u.GetCreationTimestamp().Time})
			}
			continue
		}
		held, dup := byLocal[local]
		if !dup {
			byLocal[local] = u
			order = append(order, local)
			continue
		}
		// The one its DataDir names; else the oldest (the uid breaks a tie): the same
		// whatever order the lister gives.
		if owner := ownerOf(local); owner == string(u.GetUID()) || owner != string(held.GetUID()) && localname.Older(candidateOf(u), candidateOf(held)) {
			byLocal[local] = u
		}
	}
	slices.Sort(order)
	hosted := make([]frontdoor.Hosted, 0, len(order))
	for _, local := range order {
		u := byLocal[local]
		hosted = append(hosted, frontdoor.Hosted{Namespace: u.GetNamespace(), Name: u.GetName(), Local: local})
		if names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "extraNames"); len(names) > 0 {
			claims = append(claims, frontdoor.Claim{Cluster: local, Names: names, Since: u.GetCreationTimestamp().Time})
		}
	}
	return claims, hosted
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
	claims, hosted := Claims(objs, func(local string) string { return identitystore.Owner(l.P.tenantSpec(local).Layout()) })
	names, refused := base.WithClusters(hosted).WithClaims(claims)
	byCluster := map[string][]string{}
	for _, r := range refused {
		byCluster[r.Cluster] = append(byCluster[r.Cluster], r.Error())
	}
	l.namesMu.Lock()
	changed := l.names == nil || !maps.Equal(l.names.Extra, names.Extra) || !maps.Equal(l.names.Namespaced, names.Namespaced)
	l.names, l.refusedNames = &names, byCluster
	l.namesMu.Unlock()
	if changed {
		l.P.SetFrontDoorNames(names)
		if l.Router != nil {
			l.Router.SetNames(names)
		}
		l.Log.Info("front door names", "extra", names.Extra, "clusters", len(names.Namespaced))
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

// extraNamesCondition is what conds should say of spec.extraNames of the cluster of local
// name name: removed when it asks for none.
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
		c.Message = "routed to this cluster and on its serving certificate: " + strings.Join(names.Of(name)[len(names.Own(name)):], ", ")
	}
	meta.SetStatusCondition(conds, c)
}
