package clusterprovider

import (
	"strconv"

	"socialweb.computer/kcp/internal/instancesnapshot"
)

// NextNodeIDs picks count node ids, n1, n2, ..., that no listed guest has.
func NextNodeIDs(listed []instancesnapshot.Instance, count int) []string {
	taken := map[string]bool{}
	for _, in := range listed {
		taken[in.NodeID] = true
	}
	var out []string
	for i := 1; len(out) < count; i++ {
		id := "n" + strconv.Itoa(i)
		if !taken[id] {
			out = append(out, id)
		}
	}
	return out
}
