// Command socialweb-pause is the sandbox ("pause") container of a real guest's pods: it
// holds the pod's namespaces and does nothing else. No image registry can be reached from
// these hosts, so the project builds its own from this program rather than pulling
// registry.k8s.io/pause. Like the upstream pause, it reaps the children it inherits as the
// pod's PID 1 and exits on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
