package client

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// probeTimeout bounds the health check of each manager made after a call
// that no manager could take (see probeHealth).
const probeTimeout = 2 * time.Second

// probeServiceConfig is the service config of a probe connection: plain
// pick_first without client-side health checking (with it, the Check of a
// NOT_SERVING manager could not be sent at all).
const probeServiceConfig = `{"loadBalancingConfig": [{"pick_first": {}}]}`

// probeHealth fills in what each manager of st that was not known to be
// unreachable answers on grpc.health.v1 (Health or HealthErr), asking all
// of them in parallel over short-lived connections, each bounded by
// probeTimeout and ctx. It is called only after a call failed locally with
// Unavailable, so that the error can name the cause per manager (a
// NOT_SERVING manager shows as "connected" to the dialer). st is
// refreshed from the dial tracker afterwards: a probe that could not
// connect records why.
func (m *NorskManager) probeHealth(ctx context.Context, st []AddrStatus) []AddrStatus {
	type answer struct{ health, err string }
	answers := make([]answer, len(st))
	var wg sync.WaitGroup
	for i, s := range st {
		if s.Err != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := m.checkHealth(ctx, s.Addr)
			if err != nil {
				answers[i] = answer{err: innermost(status.Convert(err).Message())}
				return
			}
			answers[i] = answer{health: h.String()}
		}()
	}
	wg.Wait()
	fresh := m.dials.statuses(m.addrs)
	for i := range fresh {
		if i < len(answers) {
			fresh[i].Health, fresh[i].HealthErr = answers[i].health, answers[i].err
		}
	}
	return fresh
}

// checkHealth asks addr's grpc.health.v1 for the Manager service's status
// over a connection of its own.
func (m *NorskManager) checkHealth(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	opts := append(append([]grpc.DialOption{}, m.probeOpts...), grpc.WithDefaultServiceConfig(probeServiceConfig))
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: managerService})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}
