package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Job warnings (issue 21 §9; docs/design/pools.md, "Security groups of a
// job in an AWS tier"):
// CreateJob and UpdateJob look up a job's extra_security_groups in the
// region of every AWS tier of its pool (the job's "pool" tag) once the
// job is stored, and answer each group that does not exist there as a
// warning — not an error: the group may be created later, and the
// placement engine places the job once it is. Warnings go in the
// response header WarningHeader, one value each (the answer, JobHash, is
// the published protocol's and stays as it is; a client that does not
// read headers loses nothing), and in the manager's log.

// WarningHeader is the gRPC response header (metadata key) carrying a
// write's warnings, one human-readable value per warning ("job j:
// extra_security_groups: security group \"x\" does not exist in region
// eu-west-2 (pool live, tier aws); ...").
const WarningHeader = "norsk-warning"

// SecurityGroupChecker looks security groups up in an AWS region
// (providers.AWS implements it, with a cache per region).
type SecurityGroupChecker interface {
	// MissingSecurityGroups returns the names among names that are no
	// security group in region (nil when all exist); an error when the
	// cloud could not answer.
	MissingSecurityGroups(ctx context.Context, region string, names []string) ([]string, error)
}

// warningLookupTimeout bounds the look-ups of one CreateJob or UpdateJob:
// a cloud that does not answer costs the write its warnings, not time.
const warningLookupTimeout = 3 * time.Second

// jobWarnings returns the warnings about j, stored as job id: each of its
// extra security groups missing in the region of an AWS tier of its
// pool. A pool that does not exist, a look-up that fails and a manager
// without the AWS provider give none.
func (s *Server) jobWarnings(ctx context.Context, id string, j *managerpb.Job) []string {
	groups := j.GetExtraSecurityGroups()
	poolName := j.GetTags()[persistence.PoolTag]
	if len(groups) == 0 || poolName == "" || s.cfg.SecurityGroups == nil {
		return nil
	}
	var pool *managerpb.Pool
	if err := s.view(ctx, func(r *persistence.Reader) error {
		rec, _, err := r.PlacementPool(poolName)
		pool = rec.GetPool()
		return err
	}); err != nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, warningLookupTimeout)
	defer cancel()
	var out []string
	missingIn := map[string][]string{} // by region: one look-up each
	looked := map[string]bool{}
	for _, t := range pool.GetTiers() {
		region := t.GetAws().GetRegion()
		if t.GetAws() == nil || region == "" {
			continue
		}
		if !looked[region] {
			looked[region] = true
			missing, err := s.cfg.SecurityGroups.MissingSecurityGroups(lctx, region, groups)
			if err != nil {
				s.log.Debug("look up a job's security groups for its warnings", "job_id", id, "region", region, "error", err)
				continue
			}
			missingIn[region] = missing
		}
		for _, g := range missingIn[region] {
			out = append(out, fmt.Sprintf("job %s: extra_security_groups: security group %q does not exist in region %s (pool %s, tier %s); "+
				"no node of that tier is created for the job until it does", id, g, region, poolName, t.GetName()))
		}
	}
	return out
}

// sendWarnings logs the warnings of a write and sets them in its
// response header (WarningHeader).
func (s *Server) sendWarnings(ctx context.Context, method string, warnings []string) {
	if len(warnings) == 0 {
		return
	}
	s.log.Warn(method+": stored, with warnings", "warnings", strings.Join(warnings, " | "))
	md := metadata.MD{}
	md.Append(WarningHeader, warnings...)
	if err := grpc.SetHeader(ctx, md); err != nil {
		s.log.Debug("set the warning header", "method", method, "error", err)
	}
}
