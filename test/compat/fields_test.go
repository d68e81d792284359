package compat_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/errorpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
	"github.com/norsk-oss/norsk-manager/proto/workerpb"
)

// ourDescriptorSet returns the descriptors the Go packages were generated
// from — shared/common.proto, shared/error.proto, manager.proto and
// worker.proto — with their imports, dependencies first.
func ourDescriptorSet() *descriptorpb.FileDescriptorSet {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range []protoreflect.FileDescriptor{
		commonpb.File_shared_common_proto, errorpb.File_shared_error_proto,
		managerpb.File_manager_proto, workerpb.File_worker_proto,
	} {
		add(fd)
	}
	return set
}

// checkFields writes set to a file and runs fields.mjs on it.
func checkFields(t *testing.T, set *descriptorpb.FileDescriptorSet) (string, error) {
	t.Helper()
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "descriptors.pb")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return runNode(30*time.Second, "fields.mjs", path)
}

// TestNorskAPI_Descriptors_1_0_384 compares every message, field, enum value
// and RPC of the published package's generated code with our descriptors.
func TestNorskAPI_Descriptors_1_0_384(t *testing.T) {
	requireNodeModules(t)
	out, err := checkFields(t, ourDescriptorSet())
	if err != nil {
		t.Fatalf("node fields.mjs: %v: our protos differ from @norskvideo/norsk-api@1.0.384:\n%s", err, out)
	}
	logLines(t, "fields.mjs: ", out)
}

// TestNorskAPI_Descriptors_DetectsChanges breaks one 1.0.384 definition at a
// time in a copy of our descriptors and checks that fields.mjs reports it.
func TestNorskAPI_Descriptors_DetectsChanges(t *testing.T) {
	requireNodeModules(t)
	cases := []struct {
		name   string
		mutate func(t *testing.T, set *descriptorpb.FileDescriptorSet)
		want   string
	}{{
		name: "field renamed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.Job", "description").Name = proto.String("summary")
		},
		want: `MISMATCH norsk.api.manager.Job.description (#2): name: ours is "summary"`,
	}, {
		name: "field renumbered",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.common.Service", "command").Number = proto.Int32(108)
		},
		want: "MISMATCH norsk.api.common.Service.command (#8): renumbered: ours is #108",
	}, {
		name: "field dropped",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			m := message(t, s, "norsk.api.common.PortMapping")
			m.Field = dropField(m.Field, "group")
		},
		want: "MISMATCH norsk.api.common.PortMapping.group (#7): missing in ours",
	}, {
		name: "scalar retyped",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.JobHash", "hash").Type = descriptorpb.FieldDescriptorProto_TYPE_UINT64.Enum()
		},
		want: "MISMATCH norsk.api.manager.JobHash.hash (#1): type: ours is UINT64, 1.0.384 INT64",
	}, {
		name: "message type changed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.CurrentJob", "job").TypeName = proto.String(".norsk.api.manager.JobWithHistory")
		},
		want: "MISMATCH norsk.api.manager.CurrentJob.job (#1): type: ours is message norsk.api.manager.JobWithHistory, 1.0.384 message norsk.api.manager.Job",
	}, {
		name: "enum type changed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.Job", "norsk_media_version").TypeName = proto.String(".norsk.api.manager.Health")
		},
		want: "MISMATCH norsk.api.manager.Job.norsk_media_version (#8): type: ours is enum norsk.api.manager.Health, 1.0.384 enum norsk.api.manager.Version",
	}, {
		name: "no longer repeated",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.Job", "volumes").Label = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
		},
		want: "MISMATCH norsk.api.manager.Job.volumes (#10): repeated: ours false, 1.0.384 true",
	}, {
		name: "no longer packed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.common.ServiceParameters", "cpu_set").Options = &descriptorpb.FieldOptions{Packed: proto.Bool(false)}
		},
		want: "MISMATCH norsk.api.common.ServiceParameters.cpu_set (#4): packed: ours false, 1.0.384 true",
	}, {
		name: "map value retyped",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.Job.TagsEntry", "value").Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
		},
		want: "MISMATCH norsk.api.manager.Job.tags (#3): type: ours is map<STRING, BYTES>, 1.0.384 map<STRING, STRING>",
	}, {
		name: "map no longer a map",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			message(t, s, "norsk.api.manager.Job.TagsEntry").Options = nil
		},
		want: "MISMATCH norsk.api.manager.Job.tags (#3): type: ours is message norsk.api.manager.Job.TagsEntry, 1.0.384 map<STRING, STRING>",
	}, {
		name: "left its oneof",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.common.PortMapping", "ephemeral").OneofIndex = nil
		},
		want: "MISMATCH norsk.api.common.PortMapping.ephemeral (#3): oneof: ours (none), 1.0.384 host_port",
	}, {
		name: "JSON name changed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			field(t, s, "norsk.api.manager.Job", "availabilityDomain").JsonName = proto.String("availability_domain")
		},
		want: `MISMATCH norsk.api.manager.Job.availabilityDomain (#15): JSON name: ours is "availability_domain", 1.0.384 "availabilityDomain"`,
	}, {
		name: "enum value renumbered",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			enumValue(t, s, "norsk.api.manager.Job.JobState", "POST").Number = proto.Int32(3)
		},
		want: "MISMATCH norsk.api.manager.Job.JobState.POST (= 2): renumbered: ours is 3",
	}, {
		name: "enum value renamed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			enumValue(t, s, "norsk.api.manager.NodeStopping.Reason", "USER_REQUESTED").Name = proto.String("USER_REQUEST")
		},
		want: "MISMATCH norsk.api.manager.NodeStopping.Reason.USER_REQUESTED (= 8): missing in ours; 8 is USER_REQUEST",
	}, {
		name: "message dropped",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			f := file(t, s, "shared/error.proto")
			f.MessageType = f.MessageType[1:]
		},
		want: "message missing in ours",
	}, {
		name: "RPC streaming changed",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			method(t, s, "manager.proto", "EventStream").ServerStreaming = nil
		},
		want: "MISMATCH ManagerService /norsk.api.manager.Manager/EventStream: server streaming: ours false, 1.0.384 true",
	}, {
		name: "RPC request retyped",
		mutate: func(t *testing.T, s *descriptorpb.FileDescriptorSet) {
			method(t, s, "manager.proto", "CompleteJob").InputType = proto.String(".norsk.api.common.NodeId")
		},
		want: "MISMATCH ManagerService /norsk.api.manager.Manager/CompleteJob: request: ours .norsk.api.common.NodeId, 1.0.384 .norsk.api.common.JobId",
	}}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			set := ourDescriptorSet()
			tc.mutate(t, set)
			out, err := checkFields(t, set)
			if code := exitCode(err); code != 1 {
				t.Fatalf("fields.mjs on descriptors with a %s: want exit status 1, got %v:\n%s", tc.name, err, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("fields.mjs on descriptors with a %s: output lacks %q:\n%s", tc.name, tc.want, out)
			}
		})
	}
}

func file(t *testing.T, s *descriptorpb.FileDescriptorSet, path string) *descriptorpb.FileDescriptorProto {
	t.Helper()
	for _, f := range s.GetFile() {
		if f.GetName() == path {
			return f
		}
	}
	t.Fatalf("no file %s in our descriptors", path)
	return nil
}

// message finds a message by full name, nested ones included.
func message(t *testing.T, s *descriptorpb.FileDescriptorSet, fullName string) *descriptorpb.DescriptorProto {
	t.Helper()
	var find func(prefix string, ms []*descriptorpb.DescriptorProto) *descriptorpb.DescriptorProto
	find = func(prefix string, ms []*descriptorpb.DescriptorProto) *descriptorpb.DescriptorProto {
		for _, m := range ms {
			name := prefix + "." + m.GetName()
			if name == fullName {
				return m
			}
			if found := find(name, m.GetNestedType()); found != nil {
				return found
			}
		}
		return nil
	}
	for _, f := range s.GetFile() {
		if m := find(f.GetPackage(), f.GetMessageType()); m != nil {
			return m
		}
	}
	t.Fatalf("no message %s in our descriptors", fullName)
	return nil
}

func field(t *testing.T, s *descriptorpb.FileDescriptorSet, msg, name string) *descriptorpb.FieldDescriptorProto {
	t.Helper()
	for _, f := range message(t, s, msg).GetField() {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("no field %s.%s in our descriptors", msg, name)
	return nil
}

func dropField(fs []*descriptorpb.FieldDescriptorProto, name string) []*descriptorpb.FieldDescriptorProto {
	var out []*descriptorpb.FieldDescriptorProto
	for _, f := range fs {
		if f.GetName() != name {
			out = append(out, f)
		}
	}
	return out
}

// enumValue finds a value of an enum nested in a message (full name
// "pkg.Message.Enum").
func enumValue(t *testing.T, s *descriptorpb.FileDescriptorSet, enum, name string) *descriptorpb.EnumValueDescriptorProto {
	t.Helper()
	i := strings.LastIndex(enum, ".")
	for _, e := range message(t, s, enum[:i]).GetEnumType() {
		if e.GetName() != enum[i+1:] {
			continue
		}
		for _, v := range e.GetValue() {
			if v.GetName() == name {
				return v
			}
		}
	}
	t.Fatalf("no enum value %s.%s in our descriptors", enum, name)
	return nil
}

func method(t *testing.T, s *descriptorpb.FileDescriptorSet, path, name string) *descriptorpb.MethodDescriptorProto {
	t.Helper()
	for _, svc := range file(t, s, path).GetService() {
		for _, m := range svc.GetMethod() {
			if m.GetName() == name {
				return m
			}
		}
	}
	t.Fatalf("no method %s in %s", name, path)
	return nil
}
