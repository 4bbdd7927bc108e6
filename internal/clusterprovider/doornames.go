package clusterprovider

import (
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"socialweb.computer/kcp/api/v1alpha1"
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

// Claims are the extra names the Clusters in objs ask for, and the Clusters the front
// door knows by namespace: each that has a local name recorded (it was bound). One
// without is not routed yet: its local name is chosen when it is bound.
func Claims(objs []runtime.Object) ([]frontdoor.Claim, []frontdoor.Hosted) {
	var claims []frontdoor.Claim
	var hosted []frontdoor.Hosted
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		local := u.GetAnnotations()[v1alpha1.LocalNameAnnotation]
		if local == "" {
			continue
		}
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
	claims, hosted := Claims(objs)
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
