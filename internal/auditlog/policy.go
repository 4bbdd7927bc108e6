// Package auditlog is a tenant apiserver's audit log: the policy every tenant apiserver
// runs with, and the reading of its recent events (socialweb-kcp audit). The apiserver
// writes the log itself (--audit-log-path), rotated by size with its backups beside it.
package auditlog

// Policy is every tenant apiserver's audit policy: nothing for health probes and node
// heartbeats (noise); Secrets, tokens and token reviews at Metadata, so no secret value is
// ever written, whatever the verb; reads at Metadata; every other write with its request
// body (level Request), so a tenant sees what was changed and by whom.
const Policy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: [/healthz*, /readyz*, /livez*, /version, /openapi*]
- level: None
  resources:
  - group: coordination.k8s.io
    resources: [leases]
- level: Metadata
  resources:
  - group: ""
    resources: [secrets, serviceaccounts/token]
  - group: authentication.k8s.io
    resources: [tokenreviews]
- level: Metadata
  verbs: [get, list, watch]
- level: Request
`

// Rotation bounds the log as the component logs are: MaxSizeMiB per file, MaxBackups
// rotated files kept beside it.
const (
	MaxSizeMiB = 10
	MaxBackups = 2
)
