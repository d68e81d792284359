package ha

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/test/testproc"
)

// mockPoolCluster starts `workers` workers (named prefix-0, prefix-1…,
// capacity 4 each) as the managers' mock pool, three managers sharing it,
// and the pool "elastic" whose tier "mock" creates mock nodes of 4 units,
// at most maxNodes of them, released after linger seconds idle. It returns
// the cluster and a client of every manager.
func mockPoolCluster(t *testing.T, prefix string, workers int, maxNodes, linger uint32) (*testproc.Cluster, *client.NorskManager) {
	t.Helper()
	var urls []string
	for i := range workers {
		addr := testproc.Addr(testproc.FreePort(t))
		name := fmt.Sprintf("%s-%d", prefix, i)
		stateDir := filepath.Join(t.TempDir(), name)
		testproc.OpenTempDirs(t, filepath.Dir(stateDir)) // the job user reaches --job-dir
		t.Cleanup(func() { testproc.KillProcessesMentioning(stateDir) })
		testproc.Start(t, name, "norsk-ctl", "--mode=worker", "--listen", addr, "--state-dir", stateDir,
			"--log-level", "debug", "--stop-grace", "3s", "--capacity", "4")
		testproc.Eventually(t, 20*time.Second, addr+" listening", func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		urls = append(urls, addr)
	}
	c := testproc.NewCluster(t, 3, "--mock-worker-urls", strings.Join(urls, ","))
	c.StartAll()
	cl := clientOf(t, 10*time.Second, c.Managers...)
	testproc.Await(t, 60*time.Second, "pool created", func() error {
		err := cl.CreatePool(context.Background(), &managerpb.Pool{Name: "elastic", Tiers: []*managerpb.PoolTier{{Name: "mock", MaxNodes: maxNodes, LingerSeconds: linger,
			Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{Offering: &managerpb.TierInstanceType{Capacity: 4}}}}}})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return err
		}
		return nil
	})
	return c, cl
}
