package gateway

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
)

// RedactedValue replaces the value of every environment variable in what a
// caller below the operator role reads (docs/design/security.md,
// "Secrets in job definitions"): jobs carry credentials there
// (AWS_SECRET_ACCESS_KEY), and a read or events token is for dashboards.
const RedactedValue = "<redacted>"

// redactsEnv reports whether the caller of ctx gets environment values
// redacted: with ACLs on, a role without AccessOperate (read, events).
// With ACLs off nothing is redacted, as nothing else is blanked.
func (s *Server) redactsEnv(ctx context.Context) bool {
	return !acl.CallerMay(ctx, s.cfg.ACL.Enabled, acl.AccessOperate)
}

// redactFor redacts m's environment values (redactEnv) if the caller of
// ctx may not see them (redactsEnv), and returns m. m must be the caller's
// own copy (decoded for this response): it is changed in place, never the
// stored record.
func redactFor[M proto.Message](s *Server, ctx context.Context, m M) M {
	if s.redactsEnv(ctx) {
		redactEnv(m)
	}
	return m
}

// envDescriptor is the message whose value is redacted.
var envDescriptor = (&commonpb.EnvironmentVariable{}).ProtoReflect().Descriptor()

// redactEnv replaces, in place, the value of every
// norsk.api.common.EnvironmentVariable set anywhere inside m (a job, a
// job's history, a bundle's job templates, an event) with RedactedValue;
// names stay. An empty value stays empty. Safe on nil. Idempotent, and a
// second pass over an already redacted message writes nothing, so it may
// run while another goroutine encodes that message.
func redactEnv(m proto.Message) {
	if m == nil {
		return
	}
	redactMessage(m.ProtoReflect())
}

func redactMessage(m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	if m.Descriptor().FullName() == envDescriptor.FullName() {
		value := envDescriptor.Fields().ByName("value")
		// Never write a value already redacted: a stream's derived event
		// (job_pending, job_out_of_window) shares its job with the log
		// event pushed before it, which the sender may be encoding now,
		// so a second pass must only read.
		if v := m.Get(value).String(); v != "" && v != RedactedValue {
			m.Set(value, protoreflect.ValueOfString(RedactedValue))
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					redactMessage(mv.Message())
					return true
				})
			}
		case fd.Message() == nil:
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				redactMessage(l.Get(i).Message())
			}
		default:
			redactMessage(v.Message())
		}
		return true
	})
}
