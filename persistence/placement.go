package persistence

import (
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// PoolTag is the job tag that names the placement pool of a plain
// auto-placed job (docs/design/pools.md); a job without it may go to any
// schedulable node. It lives here, beside the pool records, so that the
// gateway (which validates it) and the placement engine (which reads it)
// share one constant without the engine importing the gateway.
const PoolTag = "pool"

// JobsSeq calls fn for every live job record with its sequence, in job-id
// order, until fn returns an error (which JobsSeq returns). The sequence
// rises with every write of the job, so (job, sequence) names one version
// of its record: the placement engine derives its request ids from it.
func (r *Reader) JobsSeq(fn func(*internalpb.JobRecord, Seq) error) error {
	return r.entitiesSeq(KindJob, func() proto.Message { return &internalpb.JobRecord{} }, func(m proto.Message, seq Seq) error {
		return fn(m.(*internalpb.JobRecord), seq)
	})
}
