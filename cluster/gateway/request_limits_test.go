package gateway

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/noderesources"
)

// requestFields returns the full name of every repeated and map field a
// Manager request can carry: each method's input and every message nested
// in one, through lists and map values.
func requestFields() map[protoreflect.FullName]bool {
	out := map[protoreflect.FullName]bool{}
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fs := md.Fields()
		for i := range fs.Len() {
			f := fs.Get(i)
			if f.IsList() || f.IsMap() {
				out[f.FullName()] = true
			}
			switch {
			case f.IsMap():
				if v := f.MapValue().Message(); v != nil {
					walk(v)
				}
			case f.Message() != nil:
				walk(f.Message())
			}
		}
	}
	methods := managerpb.File_manager_proto.Services().ByName("Manager").Methods()
	for i := range methods.Len() {
		walk(methods.Get(i).Input())
	}
	return out
}

// TestRequestLimits_EveryFieldHasOne: every repeated and map field of every
// Manager request has its own limit in requestFieldLimits, and the table
// names no field a request cannot carry (issue 21 §3: "every map and list
// on every request gets a count and total-size limit"). A field added to
// the protocol fails here until it is given one.
func TestRequestLimits_EveryFieldHasOne(t *testing.T) {
	fields := requestFields()
	if len(fields) < 30 {
		t.Fatalf("found only %d repeated fields: the walk is broken", len(fields))
	}
	for f := range fields {
		lim, ok := requestFieldLimits[f]
		if !ok {
			t.Errorf("%s: no limit in requestFieldLimits", f)
			continue
		}
		if lim.count <= 0 || lim.bytes <= 0 {
			t.Errorf("%s: limit %+v must be positive", f, lim)
		}
	}
	for f := range requestFieldLimits {
		if !fields[f] {
			t.Errorf("requestFieldLimits names %s, which no request carries", f)
		}
	}
}

func tags(n, size int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		k := fmt.Sprintf("k%05d", i)
		out[k] = strings.Repeat("v", max(size-len(k), 0))
	}
	return out
}

// TestCheckRequestLimits: a map or list over its count or its total size
// is InvalidArgument naming it with its path; at the limit it passes.
func TestCheckRequestLimits(t *testing.T) {
	svcWith := func(n int) *managerpb.Job {
		return &managerpb.Job{Services: []*commonpb.Service{{Name: "a",
			Parameters: &commonpb.ServiceParameters{PortMappings: make([]*commonpb.PortMapping, n)}}}}
	}
	cases := []struct {
		name string
		req  proto.Message
		want string // "" passes
	}{
		{"slot tags at the limit", &managerpb.RegisterClusterNodeRequest{Tags: tags(128, 500)}, ""},
		{"slot tags: the issue's 3,800 of 1 KB", &managerpb.RegisterClusterNodeRequest{Tags: tags(3800, 1024)},
			"tags: has 3800 entries; the limit is 128"},
		{"slot tags too big in all", &managerpb.RegisterClusterNodeRequest{Tags: tags(100, 1000)},
			"tags: is 100000 bytes in all; the limit is 65536"},
		{"mock node tags", &managerpb.CreateMockNodeRequest{Tags: tags(129, 10)}, "tags: has 129 entries"},
		{"oci node tags", &managerpb.CreateOciNodeRequest{Tags: tags(100, 1000)}, "tags: is 100000 bytes"},
		{"aws node tags", &managerpb.CreateAwsNodeRequest{Tags: tags(50, 10)}, "tags: has 50 entries; the limit is 49"},
		{"job tags", &managerpb.Job{Tags: tags(129, 10)}, "job.tags: has 129 entries"},
		{"nested list in a job", svcWith(257), "job.services[0].parameters.port_mappings: has 257 entries; the limit is 256"},
		{"nested list at its limit", svcWith(256), ""},
		{"pool selector", &managerpb.Pool{Tiers: []*managerpb.PoolTier{{NodeSelector: tags(33, 4)}}},
			"pool.tiers[0].node_selector: has 33 entries; the limit is 32"},
		{"worker resources", &managerpb.ClusterMemberRegisterRequest{Resources: &commonpb.NodeResources{Cores: make([]uint32, 8193)}},
			"resources.cores: has 8193 entries; the limit is 8192"},
		{"the largest catalogue noderesources allows", &managerpb.ClusterMemberRegisterRequest{Resources: &commonpb.NodeResources{Templates: fullCatalogue()}}, ""},
		{"job filters", &managerpb.JobSearchRequest{JobFilter: make([]*managerpb.JobFilter, 65)},
			"job_filter: has 65 entries; the limit is 64"},
		{"bundle's template job", &managerpb.Bundle{Jobs: []*managerpb.BundleJobSpec{{Job: &managerpb.Job{NorskCpuList: make([]uint32, 1025)}}}},
			"bundle.jobs[0].job.norsk_cpu_list: has 1025 entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRequestLimits(tc.req)
			if tc.want == "" {
				requireOK(t, err)
				return
			}
			requireStatus(t, err, codes.InvalidArgument, tc.want)
		})
	}
}

// serveConn serves s on a loopback port and returns a connection to it.
func serveConn(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	s.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); <-done })
	return conn
}

// rawCodec sends a request's bytes as they are (a client that does not
// check UTF-8) and keeps the answer's.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestRegister_BadRequestsAreInvalidArgument: on a real gRPC server, a
// request with invalid UTF-8 in a string field (unary or streamed) is
// InvalidArgument naming the field, not Internal naming nothing (issue 21
// §11), and one over a map limit is refused before any handler runs (the
// server here has no router: a request reaching a grain would panic).
func TestRegister_BadRequestsAreInvalidArgument(t *testing.T) {
	conn := serveConn(t, New(Config{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	badString := func(num protowire.Number, s string) []byte {
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendString(b, s)
	}
	msg := func(num protowire.Number, fields ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), slices.Concat(fields...))
	}
	var out []byte
	for _, tc := range []struct {
		method string
		req    []byte
		field  string
	}{
		{"CreateJob", badString(2, "caf\xe9"), "job.description"},
		{"CreateJob", slices.Concat(msg(7, badString(1, "a")), msg(7, badString(1, "b\xff"))), "job.services[1].name"},
		{"RegisterClusterNode", slices.Concat(badString(1, "n"), msg(2, badString(1, "k\xc0"), badString(2, "v"))), "tags.key"},
	} {
		err := conn.Invoke(ctx, "/norsk.api.manager.Manager/"+tc.method, tc.req, &out, grpc.ForceCodecV2(rawCodec{}))
		requireStatus(t, err, codes.InvalidArgument, tc.field+": is not valid UTF-8")
	}

	st, err := conn.NewStream(ctx, &managerpb.Manager_ServiceDesc.Streams[1], "/norsk.api.manager.Manager/JobSearch", grpc.ForceCodecV2(rawCodec{}))
	requireOK(t, err)
	requireOK(t, st.SendMsg(msg(2, msg(1, badString(1, "\xff")))))
	requireOK(t, st.CloseSend())
	requireStatus(t, st.RecvMsg(&out), codes.InvalidArgument, "job_filter[0].tag_filter.tagName: is not valid UTF-8")

	c := managerpb.NewManagerClient(conn)
	_, err = c.RegisterClusterNode(ctx, &managerpb.RegisterClusterNodeRequest{NodeName: "n", Tags: tags(3800, 1024)})
	requireStatus(t, err, codes.InvalidArgument, "tags: has 3800 entries; the limit is 128")
}

// fullCatalogue is a worker's product-template catalogue at every
// noderesources limit: 128 templates of 64 versions, names and versions of
// 64 bytes.
func fullCatalogue() []*commonpb.ProductTemplateOffer {
	out := make([]*commonpb.ProductTemplateOffer, noderesources.MaxTemplates)
	for i := range out {
		o := &commonpb.ProductTemplateOffer{Name: fmt.Sprintf("%064d", i)}
		for v := range noderesources.MaxTemplateVersions {
			o.Versions = append(o.Versions, fmt.Sprintf("%064d", v))
		}
		out[i] = o
	}
	return out
}
