// Command backup measures a tenant's backup and restore as an operator runs them: serve
// (from bin/), a cluster per size filled with that many objects (half ConfigMaps, half
// Secrets, 512 bytes of data each), then `socialweb-kcp backup` of it while it runs and
// `socialweb-kcp restore` of the archive under a new name, which returns once the
// restored cluster is Ready with every object of the backup. It prints each one's time
// and the archive's size.
//
//	go run ./bench/backup -objects 1000,10000
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"socialweb.computer/kcp/bench/measure"
	"socialweb.computer/kcp/internal/backup"
	"socialweb.computer/kcp/internal/parallel"
)

func main() {
	sizes := flag.String("objects", "1000,10000", "the objects of each cluster backed up, comma-separated")
	bin := flag.String("bin-dir", "bin", "where the binaries are")
	flag.Parse()
	binDir, _ := filepath.Abs(*bin)
	root, remove := measure.DataRoot()
	defer remove()
	stop := measure.Serve(binDir, root, "32300-32399")
	defer stop()
	work, err := os.MkdirTemp("", "bench-backup-")
	measure.Check(err)
	defer os.RemoveAll(work)
	key := make([]byte, 32)
	rand.Read(key)
	env := append(os.Environ(), "SOCIALWEB_KCP_KUBECONFIG="+filepath.Join(root, "operator.kubeconfig"), "SOCIALWEB_DATA_ROOT="+root,
		backup.KeyEnv+"="+base64.StdEncoding.EncodeToString(key))
	kcp := func(args ...string) time.Duration {
		t0 := time.Now()
		cmd := exec.Command(filepath.Join(binDir, "socialweb-kcp"), args...)
		cmd.Dir, cmd.Env = work, env
		if out, err := cmd.CombinedOutput(); err != nil {
			measure.Check(fmt.Errorf("socialweb-kcp %s: %v\n%s", strings.Join(args, " "), err, out))
		}
		return time.Since(t0)
	}
	fmt.Printf("backup on %s (%d CPUs), %s: backup of a running cluster, restore under a new name until Ready with every object\n",
		measure.CPUModel(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("%8s  %9s  %10s  %9s  %s\n", "objects", "backup", "archive", "restore", "(restore: declared to Ready, objects checked)")
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		measure.Check(err)
		name := fmt.Sprintf("b%d", n)
		kcp("up", name, "--timeout", "5m")
		fill(filepath.Join(work, name+".kubeconfig"), n)
		archive := filepath.Join(work, name+".backup")
		took := kcp("backup", name, "-f", archive)
		fi, err := os.Stat(archive)
		measure.Check(err)
		restored := kcp("restore", "r"+name, "-f", archive, "--timeout", "10m")
		fmt.Printf("%8d  %8.2fs  %6.1f MiB  %8.2fs\n", n, took.Seconds(), float64(fi.Size())/(1<<20), restored.Seconds())
		kcp("down", name, "--timeout", "5m")
		kcp("down", "r"+name, "--timeout", "5m")
	}
}

// fill makes n objects in the cluster of kubeconfig: half ConfigMaps, half Secrets.
func fill(kubeconfig string, n int) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	measure.Check(err)
	cfg.QPS, cfg.Burst = 1000, 2000
	c := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	data := strings.Repeat("x", 512)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	measure.Check(parallel.Each(16, ids, func(i int) error {
		name := fmt.Sprintf("o-%05d", i)
		if i%2 == 0 {
			_, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"d": data}}, metav1.CreateOptions{})
			return err
		}
		_, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"d": []byte(data)}}, metav1.CreateOptions{})
		return err
	}))
}
