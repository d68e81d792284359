package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/cluster/agent"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Tag cardinalities of benchJob: a "customer" eq search matches 1 job in
// numCustomers.
const (
	numCustomers = 1000
	numRegions   = 8
)

// encoderConfig is a typical service configuration blob (a few hundred
// bytes of YAML).
var encoderConfig = strings.TrimSpace(`
input:
  srt: { port: 5001, passphrase_env: SRT_PASSPHRASE, latency_ms: 120 }
ladder:
  - { name: 1080p, width: 1920, height: 1080, bitrate_kbps: 6000, codec: h264, profile: high }
  - { name: 720p, width: 1280, height: 720, bitrate_kbps: 3000, codec: h264, profile: main }
  - { name: 480p, width: 854, height: 480, bitrate_kbps: 1200, codec: h264, profile: main }
audio: { codec: aac, bitrate_kbps: 128, channels: 2 }
output:
  hls: { segment_s: 2, playlist_len: 6, path: /srv/hls/live }
`)

// benchJob returns a realistic job: four tags, a description, one service
// with a command, a configuration blob, two environment variables and one
// port mapping (about 1 KiB marshalled). One job in five is scheduled
// (start_date_time within the next 30 days, so PRE); the others are ACTIVE.
func benchJob(id string, n int) *managerpb.Job {
	j := &managerpb.Job{
		JobId:       &commonpb.JobId{JobId: id},
		Description: fmt.Sprintf("Live channel %d: SRT contribution from the venue encoder in, three-rung H.264 HLS ladder out to the origin (bench job)", n),
		Tags: map[string]string{
			"customer": customerTag(n),
			"region":   fmt.Sprintf("region-%d", n%numRegions),
			"tier":     []string{"gold", "silver", "bronze"}[n%3],
			"channel":  fmt.Sprintf("ch-%06d", n),
		},
		Services: []*commonpb.Service{{
			Name:          "encoder",
			Command:       "norsk-media --config /etc/norsk/encoder.yaml --log-level info --metrics 127.0.0.1:9100",
			Restart:       commonpb.Service_ON_FAILURE,
			RestartCount:  3,
			RestartPeriod: 60,
			Configuration: encoderConfig,
			Parameters: &commonpb.ServiceParameters{
				PortMappings: []*commonpb.PortMapping{{
					ContainerPort: 5001,
					Protocol:      commonpb.ProtocolFamily_UDP,
					HostPort:      &commonpb.PortMapping_Ephemeral{Ephemeral: &commonpb.HostPortEphemeral{}},
					HostAddress:   "127.0.0.1",
				}},
				EnvironmentVariables: []*commonpb.EnvironmentVariable{
					{Name: "NORSK_CHANNEL", Value: fmt.Sprintf("ch-%06d", n)},
					{Name: "SRT_PASSPHRASE", Value: "bench-passphrase-0123456789"},
					{Name: "NORSK_ORIGIN_URL", Value: fmt.Sprintf("https://origin.example.net/live/ch-%06d/master.m3u8", n)},
				},
			},
		}},
	}
	if n%5 == 0 {
		j.StartDateTime = timestamppb.New(time.Now().Add(time.Hour + time.Duration(n%720)*time.Hour))
	}
	return j
}

func customerTag(n int) string { return fmt.Sprintf("cust-%04d", n%numCustomers) }

// appendSize is the size of what one CreateJob writes, measured on a real
// store: the job's entity value, its events in the event log and its index
// keys.
type appendSize struct {
	job, record, events, entity, indexKeys int
	numEvents                              int
	// value is the stored bytes (entity value ‖ events), used as the raw
	// badger value so that it compresses like the real thing.
	value []byte
}

// total is the value bytes of one CreateJob append (entity + events).
func (s appendSize) total() int { return s.entity + s.events }

// measureAppend creates one bench job on an in-process manager (no fsync)
// and reads back what was stored.
func measureAppend(ctx context.Context, dir string) (appendSize, error) {
	cfg := agent.DevConfig(dir)
	cfg.Store.SyncWrites = false
	a, err := agent.New(cfg)
	if err != nil {
		return appendSize{}, err
	}
	defer a.Shutdown()
	if err := a.Start(); err != nil {
		return appendSize{}, err
	}
	conn, api, err := dial(a.APIAddr())
	if err != nil {
		return appendSize{}, err
	}
	defer conn.Close()
	job := benchJob("size-probe-job-000001", 1)
	_, head0 := a.Store().EventBounds()
	if _, err := api.CreateJob(ctx, job); err != nil {
		return appendSize{}, fmt.Errorf("CreateJob: %w", err)
	}
	s := appendSize{job: proto.Size(job)}
	rec, _, err := a.Store().Load(persistence.JobKey(job.GetJobId().GetJobId()))
	if err != nil {
		return s, fmt.Errorf("load the job record: %w", err)
	}
	s.record, s.entity = len(rec), 9+len(rec) // seq ‖ live flag ‖ record (persistence/fsm.go)
	_, head := a.Store().EventBounds()
	evs, err := a.Store().ReadEvents(head0+1, int(head-head0))
	if err != nil {
		return s, fmt.Errorf("read events: %w", err)
	}
	s.value = append(make([]byte, 9), rec...)
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		if err != nil {
			return s, err
		}
		s.events += len(b)
		s.numEvents++
		s.value = append(s.value, b...)
	}
	// Index keys (persistence/keys.go: one per tag, a start key and a state
	// key; job 1 is ACTIVE, so no pre key), computed from the key layout.
	id := job.GetJobId().GetJobId()
	for k, v := range job.GetTags() {
		s.indexKeys += len("ix/job/tag/") + 1 + len(k) + 1 + len(v) + len(id)
	}
	s.indexKeys += len("ix/job/start/") + 8 + len(id) + len("ix/job/state/") + 1 + len(id)
	return s, nil
}
