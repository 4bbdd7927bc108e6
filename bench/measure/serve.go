package measure

import (
	"bufio"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Serve starts `socialweb-clusterprovider serve` from binDir on the data root, with the
// tenant ports and the extra flags given, as an operator runs it, and returns once it
// serves Clusters; stop ends it (it stops its clusters first, data kept). serve also ends
// when this program does, however it ends (Check exits).
func Serve(binDir, root, ports string, flags ...string) (stop func()) {
	args := append([]string{"serve", "--data-root", root, "--bin-dir", binDir, "--port-range", ports, "--metrics-address", "127.0.0.1:0"}, flags...)
	serve := exec.Command(filepath.Join(binDir, "socialweb-clusterprovider"), args...)
	out, err := serve.StdoutPipe()
	Check(err)
	serve.Stderr = io.Discard
	serve.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	Check(serve.Start())
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.Contains(lines.Text(), "serving Clusters") {
	}
	go io.Copy(io.Discard, out)
	return func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}
}

// FreeAddr is a loopback address free now.
func FreeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Check(err)
	defer ln.Close()
	return ln.Addr().String()
}
