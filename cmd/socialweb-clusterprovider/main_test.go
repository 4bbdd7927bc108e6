package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBadInvocationsNameWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"up"}, "NAME"},
		{[]string{"up", "demo", "--port-range", "9-8"}, "--port-range"},
		{[]string{"up", "demo", "--max-nodes", "-1"}, "--max-nodes"},
		{[]string{"up", "demo", "--nodes", "-1"}, "--nodes"},
		{[]string{"nodes"}, "usage: nodes add"},
		{[]string{"nodes", "ls"}, "usage: nodes add"},
		{[]string{"nodes", "ls", "Bad_Name", "--data-root", "DATA"}, "cluster name"},
		{[]string{"nodes", "add", "demo", "--data-root", "DATA"}, "cluster demo is not running"},
		{[]string{"up", "demo", "--pods-per-node", "-5"}, "--pods-per-node"},
		{[]string{"up", "Bad_Name", "--data-root", "DATA", "--bin-dir", "/nonexistent"}, "cluster name"},
		{[]string{"up", "demo", "--data-root", "DATA", "--bin-dir", "/nonexistent"}, "/nonexistent/kine is missing"},
	} {
		var out, errb bytes.Buffer
		args := make([]string, len(tc.args))
		for i, a := range tc.args {
			args[i] = strings.ReplaceAll(a, "DATA", t.TempDir())
		}
		err := run(args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
