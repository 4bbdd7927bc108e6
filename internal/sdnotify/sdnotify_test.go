package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// systemd's side: a datagram socket; Notify's state arrives as one datagram.
func TestNotifyReachesTheSocket(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		name := filepath.Join(t.TempDir(), "notify")
		env := name
		if abstract {
			name = "\x00socialweb-sdnotify-test-" + time.Now().Format("150405.000000000")
			env = "@" + name[1:]
		}
		l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", env)
		if sent, err := Notify(Ready); !sent || err != nil {
			t.Fatalf("abstract %v: sent %v, %v", abstract, sent, err)
		}
		buf := make([]byte, 64)
		l.SetReadDeadline(time.Now().Add(time.Minute))
		n, err := l.Read(buf)
		l.Close()
		if err != nil || string(buf[:n]) != Ready {
			t.Errorf("abstract %v: got %q, %v; want %q", abstract, buf[:n], err, Ready)
		}
	}
}

// Not under systemd: nothing to tell, no error.
func TestNotifyWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("sent %v, %v; want false, nil", sent, err)
	}
}

// A socket that is not there is an error naming it, not a hang.
func TestNotifyToAMissingSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	if _, err := Notify(Ready); err == nil {
		t.Error("no error for a missing socket")
	}
}

func TestIsStopping(t *testing.T) {
	for answer, want := range map[string]bool{"stopping\n": true, "running\n": false, "degraded\n": false, "": false} {
		if got := IsStopping(answer); got != want {
			t.Errorf("IsStopping(%q) = %v, want %v", answer, got, want)
		}
	}
	t.Setenv("INVOCATION_ID", "")
	if SystemStopping() {
		t.Error("not under systemd, yet the system is stopping, it says")
	}
}
