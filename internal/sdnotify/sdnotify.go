// Package sdnotify tells systemd how a Type=notify service is doing (sd_notify(3)): READY=1
// once it serves, STOPPING=1 when its stop begins. It is the protocol's few lines rather than
// a dependency: one datagram to the socket systemd names in $NOTIFY_SOCKET. And whether a
// stop is the system's shutdown (SystemStopping).
package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The states serve reports.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// Notify sends state (for example Ready, or "READY=1\nSTATUS=serving") to systemd. Without
// $NOTIFY_SOCKET (not run by systemd, or not Type=notify) it does nothing and says so with
// false.
func Notify(state string) (bool, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return false, nil
	}
	if path[0] == '@' { // a socket in the abstract namespace, as systemd names them
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("NOTIFY_SOCKET %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("NOTIFY_SOCKET %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	return true, nil
}

// SystemStopping says whether the service runs under systemd (INVOCATION_ID is set) while
// the system itself is shutting down (`systemctl is-system-running` answers "stopping"): a
// stop then is the host's, not a restart of the service, and whatever the service leaves
// running would only be killed out of order by systemd's final sweep.
func SystemStopping() bool {
	if os.Getenv("INVOCATION_ID") == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "systemctl", "is-system-running").Output()
	return IsStopping(string(out))
}

// IsStopping reads `systemctl is-system-running`'s answer.
func IsStopping(answer string) bool { return strings.TrimSpace(answer) == "stopping" }
