package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// parse runs a command line through everything run does except the commands' RunE: the
// command is found, its flags parsed, its arguments and their values checked. With no
// RunE nothing contacts the front or writes a file; help and completion output goes to
// io.Discard.
func parse(args []string) error {
	root := newRoot(io.Discard, io.Discard)
	var strip func(*cobra.Command)
	strip = func(c *cobra.Command) {
		if c.RunE != nil {
			c.RunE = func(*cobra.Command, []string) error { return nil }
		}
		for _, sub := range c.Commands() {
			strip(sub)
		}
	}
	strip(root)
	root.SetArgs(args)
	return root.ExecuteContext(context.Background())
}

// argv splits a fuzz input into arguments at NUL, as /proc/PID/cmdline does.
func argv(line string) []string {
	if line == "" {
		return []string{}
	}
	return strings.Split(line, "\x00")
}

// FuzzCommandLine feeds socialweb-kcp arbitrary command lines. Each one is accepted or
// refused, never a panic; a refusal is a message, and a usage error: exit code 2.
func FuzzCommandLine(f *testing.F) {
	for _, seed := range [][]string{
		{"up", "demo"},
		{"up", "big", "--nodes", "3", "--max-nodes", "10", "-n", "acme", "--wait=false", "--timeout", "90s"},
		{"up", "demo", "--nodes", "-1"},
		{"up", "demo", "--pods-per-node", "99999999999"},
		{"nodes", "add", "demo", "2"},
		{"nodes", "add", "demo", "zero"},
		{"nodes", "rm", "demo", "n1", "n2"},
		{"nodes", "ls", "demo", "-o", "wide"},
		{"ls", "-A", "-o", "xml"},
		{"status", "demo", "-o", "json", "--kubeconfig", "/nonexistent"},
		{"kubeconfig", "demo", "-f", "demo.kubeconfig"},
		{"down", "demo", "--wait=maybe"},
		{"park"},
		{"help", "up"},
		{"completion", "bash"},
		{"frobnicate", "--", "-x"},
		{},
	} {
		f.Add(strings.Join(seed, "\x00"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		err := parse(argv(line))
		if err == nil {
			return
		}
		if err.Error() == "" {
			t.Fatalf("%q: refused with an empty message", argv(line))
		}
		if code := exitCode(err); code != exitUsage {
			t.Fatalf("%q: refused with %q, exit code %d; a bad command line is exit code %d", argv(line), err, code, exitUsage)
		}
	})
}

// parse is run without the RunE: the usage errors the fuzz target sees are the ones run
// reports, with the same exit code.
func TestParseSeesTheUsageErrors(t *testing.T) {
	for _, c := range [][]string{{"up"}, {"up", "demo", "--nodes", "101"}, {"nodes", "add", "demo", "0"}, {"ls", "-o", "xml"}, {"frobnicate"}} {
		if err := parse(c); err == nil || exitCode(err) != exitUsage {
			t.Errorf("parse(%q) = %v, want a usage error", c, err)
		}
	}
	for _, c := range [][]string{{"up", "demo", "--nodes", "100"}, {"nodes", "add", "demo"}, {"ls", "-A"}, {"help"}, {}} {
		if err := parse(c); err != nil {
			t.Errorf("parse(%q) = %v, want it accepted", c, err)
		}
	}
}
