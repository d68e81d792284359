package gateway

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/cluster/acl"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
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
//
// The definition hashes in m are redacted with the values (rehash): a
// job's current_hash is FNV-1a over the whole definition, values
// included, so a caller who sees it can test guesses of a redacted value
// offline (a 4-digit PIN in well under a second). A redacted caller sees
// current_hash = job.Hash of the redacted job instead: it still changes
// when anything it can see changes; it cannot be used to update the job,
// which needs the operator role anyway.
func redactEnv(m proto.Message) {
	if m == nil {
		return
	}
	redactMessage(m.ProtoReflect())
	rehash(m.ProtoReflect())
}

// Full names of the messages whose hashes rehash replaces.
const (
	jobName        protoreflect.FullName = "norsk.api.manager.Job"
	runningJobName protoreflect.FullName = "norsk.api.manager.RunningJob"
	driftName      protoreflect.FullName = "norsk.api.manager.DefinitionDrift"
)

// rehash replaces, in m whose environment values are already redacted,
// every Job.current_hash with job.Hash of that (redacted) job, and every
// other hash of a definition (RunningJob.definition_hash,
// DefinitionDrift.current_hash and the hashes in its message) with the
// redacted hash of the same definition when m holds it, else with 0
// (unknown) or "<redacted>" in text. Like redactMessage it writes nothing
// on a second pass.
func rehash(m protoreflect.Message) {
	mapped := map[int64]int64{}
	walkMessages(m, func(x protoreflect.Message) {
		if x.Descriptor().FullName() != jobName {
			return
		}
		j, ok := x.Interface().(*managerpb.Job)
		if !ok || j.GetCurrentHash() == 0 {
			return
		}
		h := job.Hash(j)
		mapped[j.GetCurrentHash()], mapped[h] = h, h
		if j.GetCurrentHash() != h {
			j.CurrentHash = h
		}
	})
	redacted := func(h int64) int64 {
		if h == 0 {
			return 0
		}
		return mapped[h] // 0 (unknown) for a definition m does not hold
	}
	// Drifts first: their text names their instances' hashes, which the
	// walk after this one replaces.
	walkMessages(m, func(x protoreflect.Message) {
		if x.Descriptor().FullName() == driftName {
			d, ok := x.Interface().(*managerpb.DefinitionDrift)
			if !ok {
				return
			}
			msg := d.GetMessage()
			for _, h := range append([]int64{d.GetCurrentHash()}, definitionHashes(d)...) {
				if h == 0 || mapped[h] == h {
					continue
				}
				to := RedactedValue
				if n := redacted(h); n != 0 {
					to = strconv.FormatInt(n, 10)
				}
				msg = strings.ReplaceAll(msg, strconv.FormatInt(h, 10), to)
			}
			if msg != d.GetMessage() {
				d.Message = msg
			}
			if d.GetCurrentHash() != redacted(d.GetCurrentHash()) {
				d.CurrentHash = redacted(d.GetCurrentHash())
			}
		}
	})
	walkMessages(m, func(x protoreflect.Message) {
		if x.Descriptor().FullName() == runningJobName {
			if r, ok := x.Interface().(*managerpb.RunningJob); ok && r.GetDefinitionHash() != redacted(r.GetDefinitionHash()) {
				r.DefinitionHash = redacted(r.GetDefinitionHash())
			}
		}
	})
}

// definitionHashes returns the definition_hash of d's instances.
func definitionHashes(d *managerpb.DefinitionDrift) []int64 {
	out := make([]int64, 0, len(d.GetInstances()))
	for _, r := range d.GetInstances() {
		out = append(out, r.GetDefinitionHash())
	}
	return out
}

// walkMessages calls fn on every message set inside m and then on m:
// children before parents, so that a job's hash is taken over the hashes
// already replaced inside it (a second pass then finds nothing to change).
func walkMessages(m protoreflect.Message, fn func(protoreflect.Message)) {
	if !m.IsValid() {
		return
	}
	defer fn(m)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walkMessages(mv.Message(), fn)
					return true
				})
			}
		case fd.Message() == nil:
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				walkMessages(l.Get(i).Message(), fn)
			}
		default:
			walkMessages(v.Message(), fn)
		}
		return true
	})
}

func redactMessage(m protoreflect.Message) {
	value := envDescriptor.Fields().ByName("value")
	walkMessages(m, func(x protoreflect.Message) {
		if x.Descriptor().FullName() != envDescriptor.FullName() {
			return
		}
		// Never write a value already redacted: a stream's derived event
		// (job_pending, job_out_of_window) shares its job with the log
		// event pushed before it, which the sender may be encoding now,
		// so a second pass must only read.
		if v := x.Get(value).String(); v != "" && v != RedactedValue {
			x.Set(value, protoreflect.ValueOfString(RedactedValue))
		}
	})
}
