package job

import (
	"hash/fnv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// cloneHash is Hash as it was first written (clone, clear, marshal): the
// JobHash values stored in every data dir and held by clients. Hash must
// keep them.
func cloneHash(j *managerpb.Job) int64 {
	c := proto.Clone(j).(*managerpb.Job)
	c.CurrentHash, c.State = 0, managerpb.Job_PRE
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		panic(err)
	}
	h := fnv.New64a()
	h.Write(b)
	if v := int64(h.Sum64()); v != 0 {
		return v
	}
	return 1
}

func TestHashKeepsTheClonedEncodingsValues(t *testing.T) {
	full := func() *managerpb.Job {
		return &managerpb.Job{
			JobId:       &commonpb.JobId{JobId: "j1"},
			Description: "a live channel",
			Tags:        map[string]string{"customer": "c1", "region": "eu", "tier": "gold", "channel": "ch-1"},
			Services: []*commonpb.Service{{Name: "encoder", Command: "norsk-media --config x", RestartCount: 3,
				Parameters: &commonpb.ServiceParameters{EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "A", Value: "1"}}}}},
			StartDateTime: &timestamppb.Timestamp{Seconds: 1_900_000_000, Nanos: 5},
		}
	}
	withState := full()
	withState.CurrentHash, withState.State = 1234567, managerpb.Job_ACTIVE
	withPost := full()
	withPost.State = managerpb.Job_POST
	unknown := full()
	unknown.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x3f, 0x01}) // field 1023, varint 1
	big := full()
	big.Description = strings.Repeat("x", 100<<10) // beyond a pooled buffer
	for _, tc := range []struct {
		name string
		job  *managerpb.Job
	}{
		{"empty", &managerpb.Job{}},
		{"only manager fields", &managerpb.Job{CurrentHash: 99, State: managerpb.Job_ACTIVE}},
		{"full", full()},
		{"current hash and state set", withState},
		{"post", withPost},
		{"unknown fields", unknown},
		{"larger than the pooled buffer", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.job)
			for range 3 { // pooled buffers are reused: same value every time
				if got, want := Hash(tc.job), cloneHash(tc.job); got != want {
					t.Fatalf("Hash = %d, the cloned encoding's hash is %d", got, want)
				}
			}
			if !proto.Equal(before, tc.job) {
				t.Fatal("Hash changed the job")
			}
		})
	}
	if Hash(withState) != Hash(full()) {
		t.Error("current_hash and state changed the hash")
	}
}

// The field numbers Hash leaves out are those of current_hash and state.
func TestHashFieldNumbers(t *testing.T) {
	fields := (&managerpb.Job{}).ProtoReflect().Descriptor().Fields()
	if n := fields.ByName("current_hash").Number(); n != jobCurrentHashField {
		t.Errorf("current_hash is field %d, Hash leaves out %d", n, jobCurrentHashField)
	}
	if n := fields.ByName("state").Number(); n != jobStateField {
		t.Errorf("state is field %d, Hash leaves out %d", n, jobStateField)
	}
}
