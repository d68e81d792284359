package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// The request-validation fuzz targets (issue 12 §4) feed wire bytes of a
// request, as a hostile client would send them, to the gateway's
// validation. None may panic; a refusal must be InvalidArgument whose
// message starts with the field it names ("job.services[3].name: …"),
// under the request's root; and validation must be a function of the
// request (the same verdict for a re-encoded copy).

// addExampleSeeds adds the protojson files of examples/ whose message type
// is m's, encoded as wire bytes, to f's corpus.
func addExampleSeeds(f *testing.F, m proto.Message, patterns ...string) {
	f.Helper()
	for _, p := range patterns {
		files, err := filepath.Glob(filepath.Join("..", "..", "examples", p))
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			msg := m.ProtoReflect().New().Interface()
			if err := protojson.Unmarshal(data, msg); err != nil {
				continue // another message type
			}
			b, err := proto.Marshal(msg)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

func addSeeds(f *testing.F, msgs ...proto.Message) {
	f.Helper()
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkRefusal fails t unless err is InvalidArgument naming a field under
// root, or one of the other codes allowed.
func checkRefusal(t *testing.T, err error, root string, also ...codes.Code) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("refusal is not a gRPC status: %v (%T)", err, err)
	}
	for _, c := range also {
		if st.Code() == c {
			return
		}
	}
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("refusal code %s, want InvalidArgument: %v", st.Code(), err)
	}
	field, reason, ok := strings.Cut(st.Message(), ": ")
	if !ok || !strings.HasPrefix(field, root) || reason == "" {
		t.Fatalf("refusal %q does not name a field under %q and a reason", st.Message(), root)
	}
}

// sameVerdict fails t if validating a re-encoded copy of m gives another
// answer than first.
func sameVerdict[M proto.Message](t *testing.T, m M, first error, validate func(M) error) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		return // e.g. invalid UTF-8 in a string field: nothing to compare
	}
	again := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, again); err != nil {
		t.Fatalf("re-encoded request does not decode: %v", err)
	}
	if second := validate(again); status.Convert(second).Message() != status.Convert(first).Message() {
		t.Fatalf("verdict changed on a re-encoded copy: %v, then %v", first, second)
	}
}

func FuzzValidateJob(f *testing.F) {
	addExampleSeeds(f, &managerpb.Job{}, "*/job.json")
	addSeeds(f, &managerpb.Job{JobId: &commonpb.JobId{JobId: "j1"}, Tags: map[string]string{"a": "b"},
		Services:   []*commonpb.Service{{Name: "a"}, {Name: "b", DependsOn: []string{"a", "norsk-media"}}},
		WriteFiles: []*commonpb.WriteFile{{Path: "conf/x.json", Services: []string{"b"}}},
		NorskServiceParameters: &commonpb.ServiceParameters{PortMappings: []*commonpb.PortMapping{
			{ContainerPort: 80, HostPort: &commonpb.PortMapping_Range{Range: &commonpb.HostPortRange{MinPort: 8000, MaxPort: 8010}}, HostAddress: "::1"}},
			EnvironmentVariables: []*commonpb.EnvironmentVariable{{Name: "A", Value: "1"}}}},
		&managerpb.Job{Services: []*commonpb.Service{{Name: "a", DependsOn: []string{"c"}}, {Name: "b", DependsOn: []string{"a"}}, {Name: "c", DependsOn: []string{"b"}}}},
		&managerpb.Job{ProductTemplate: &commonpb.ProductTemplateRef{Name: "hello", Version: "1.0"}, ProductTemplateParameters: map[string]string{"GREETING": "hi"}},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var j managerpb.Job
		if proto.Unmarshal(data, &j) != nil {
			return
		}
		if _, err := newJobID("job.job_id", j.GetJobId()); err != nil {
			checkRefusal(t, err, "job.job_id")
		}
		err := validateJob(&j)
		if err != nil {
			checkRefusal(t, err, "job")
		}
		sameVerdict(t, &j, err, validateJob)
	})
}

func FuzzValidateBundle(f *testing.F) {
	addExampleSeeds(f, &managerpb.Bundle{}, "*/bundle.json")
	addSeeds(f, &managerpb.Bundle{BundleId: &managerpb.BundleId{BundleId: "b1"}, Pool: "live", Jobs: []*managerpb.BundleJobSpec{
		{JobName: "enc", StartMode: "auto", Job: &managerpb.Job{Services: []*commonpb.Service{{Name: "s"}}}},
		{JobName: "pkg", StartMode: "manual", CoLocateWith: []string{"enc"}},
		{JobName: "backup", SeparateFrom: []string{"enc"}},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b managerpb.Bundle
		if proto.Unmarshal(data, &b) != nil {
			return
		}
		err := validateBundle(&b)
		if err != nil {
			checkRefusal(t, err, "bundle")
		}
		sameVerdict(t, &b, err, validateBundle)
	})
}

func FuzzValidatePool(f *testing.F) {
	addExampleSeeds(f, &managerpb.Pool{}, "*/pool.json", "pools/*.json")
	addSeeds(f, &managerpb.Pool{Name: "live", Description: "d", Tiers: []*managerpb.PoolTier{
		{Name: "gold", NodeSelector: map[string]string{"tier": "gold"}}, {Name: "silver"}},
		RestartCeiling: &managerpb.RestartCeiling{MaxFailures: 5, WindowSeconds: 600}})
	addSeeds(f, &managerpb.Pool{Name: "elastic", Tiers: []*managerpb.PoolTier{
		{Name: "mock", LingerSeconds: 60, Provisioner: &managerpb.PoolTier_Mock{Mock: &managerpb.MockTierProvisioner{
			Offering: &managerpb.TierInstanceType{Capacity: 8}}}},
		{Name: "aws", MaxNodes: 3, Provisioner: &managerpb.PoolTier_Aws{Aws: &managerpb.AwsTierProvisioner{Region: "eu-west-2",
			AvailabilityZones: []string{"eu-west-2a"}, Template: &managerpb.AwsLaunchTemplate{Template: &managerpb.AwsLaunchTemplate_Name{Name: "w"}},
			InstanceTypes: []*managerpb.TierInstanceType{{InstanceType: "c6i.large", Capacity: 2}}}}}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p managerpb.Pool
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		before := proto.Clone(&p)
		out, err := validatePool(&p)
		if !proto.Equal(before, &p) {
			t.Fatalf("validatePool modified its input")
		}
		if err != nil {
			checkRefusal(t, err, "pool")
			return
		}
		if out.GetRestartCeiling() == nil || out.GetVersion() != 0 {
			t.Fatalf("a valid pool is stored without its ceiling or with a version: %v", out)
		}
		for i, tier := range out.GetTiers() {
			if tier.GetProvisioner() != nil && tier.GetLingerSeconds() == 0 {
				t.Fatalf("tier %d has a provisioner and is stored without its linger", i)
			}
		}
		sameVerdict(t, &p, err, func(p *managerpb.Pool) error { _, err := validatePool(p); return err })
	})
}

// FuzzValidateMemberRegister: a worker's registration (the part validated
// before the store is read). Unauthenticated is the refusal of a request
// with neither token nor credential; other refusals name the field.
func FuzzValidateMemberRegister(f *testing.F) {
	addSeeds(f,
		&managerpb.ClusterMemberRegisterRequest{Token: "t", Address: "127.0.0.1", Port: 7000, WorkerVersion: "0.1.0"},
		&managerpb.ClusterMemberRegisterRequest{NodeCredential: "c", Address: "worker-1.example", Port: 1,
			Resources: &commonpb.NodeResources{Capacity: 100, Capabilities: map[string]string{"nvenc": "2"}}},
		&managerpb.ClusterMemberRegisterRequest{Token: "t", Address: "::1", Port: 65535},
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var in managerpb.ClusterMemberRegisterRequest
		if proto.Unmarshal(data, &in) != nil {
			return
		}
		err := validateMemberRegister(&in)
		if err == nil {
			return
		}
		if status.Code(err) == codes.Unauthenticated && (in.GetToken() != "" || in.GetNodeCredential() != "") {
			t.Fatalf("Unauthenticated for a request with a token or credential: %v", err)
		}
		checkRefusal(t, err, "", codes.Unauthenticated)
		if st := status.Convert(err); st.Code() == codes.InvalidArgument {
			field, _, _ := strings.Cut(st.Message(), ": ")
			if field != "address" && field != "port" && !strings.HasPrefix(field, "resources.") && !strings.HasPrefix(field, "resources[") && field != "resources" {
				t.Fatalf("refusal names %q, not a field of the request", field)
			}
		}
	})
}
