package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"

	"socialweb.computer/kcp/internal/clusterprovider"
	"socialweb.computer/kcp/internal/externaldb"
	"socialweb.computer/kcp/internal/instancelease"
	"socialweb.computer/kcp/internal/placement"
)

// defaultInstance is serve's --instance when none is given: the host name's first label,
// lowercased, since one serve runs per host.
func defaultInstance() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	return h
}

// parseCapacity reads --capacity: "clusters=N" (N 0 or more; 0 takes no new Cluster, a
// drain), or "" for no cap.
func parseCapacity(s string) (int, error) {
	if s == "" {
		return placement.Unlimited, nil
	}
	k, v, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(v)
	if !ok || k != "clusters" || err != nil || n < 0 {
		return 0, fmt.Errorf("--capacity %q: want clusters=N, N 0 or more (0 takes no new cluster), such as clusters=60", s)
	}
	return n, nil
}

// registerInstance puts this serve's Lease on the front and keeps it renewed until ctx
// ends; the returned release deletes it (on a stop that leaves nothing running).
func registerInstance(ctx context.Context, core kubernetes.Interface, loop *clusterprovider.Loop, where string, capacity int, ext *externaldb.Server) (release func(context.Context) error, err error) {
	health := externaldb.Watch(ctx, ext, loop.Log)
	h := &instancelease.Holder{Client: core, Name: loop.Instance, Where: where, Log: loop.Log, Report: func() instancelease.Report {
		r := instancelease.Report{Capacity: capacity, Running: loop.Running(), MemoryAvailable: memAvailable()}
		if ext != nil {
			r.External, r.ExternalProblem = health.State()
		}
		return r
	}}
	if err := h.Register(ctx); err != nil {
		return nil, err
	}
	go h.Keep(ctx)
	loop.Instances = func(ctx context.Context) ([]instancelease.Lease, error) { return instancelease.List(ctx, core) }
	return h.Release, nil
}

// memAvailable is the host's MemAvailable in bytes; 0 when it cannot be read.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
