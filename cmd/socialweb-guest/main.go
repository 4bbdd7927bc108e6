// Command socialweb-guest is a real guest's init: the provider starts it as PID 1 of the
// guest's own mount, UTS, network and PID namespaces, and it boots the guest from its
// #cloud-config user data as a VM would (internal/guestboot). SIGTERM stops the guest: its
// units in reverse order, then everything else in it.
//
//	socialweb-guest --config <guest dir>/guest.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"socialweb.computer/kcp/internal/guestboot"
)

func main() {
	config := flag.String("config", "", "the guest's configuration file (written by the provider)")
	flag.Parse()
	if *config == "" {
		fmt.Fprintln(os.Stderr, "socialweb-guest: --config is required")
		os.Exit(2)
	}
	c, err := guestboot.Read(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "socialweb-guest:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := guestboot.Run(ctx, c, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "socialweb-guest:", err)
		os.Exit(1)
	}
}
