package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/norsk-oss/norsk-manager/proto/workerauth"
)

// Retirement: a manager refusing this worker's own node for good.
//
// When a cluster slot is deregistered, or an operator terminates its node,
// while the worker is offline, the manager records the node's instances as
// ended and will never dial the worker again. Its jobs would then run,
// unmanaged, for as long as the host lives. So a refusal that says the node
// is gone (retiresNode) and answers a registration that presented this
// node's credential makes Agent.Run stop every job the runtime runs before
// it returns (docs/design/worker-sessions.md §1, "Retired nodes").
//
// Refusals that only say the manager does not know the token or credential
// (TOKEN_UNKNOWN, CREDENTIAL_UNKNOWN) stop nothing: a manager restored from
// an old backup may not know a slot that is still in use, and its jobs must
// survive (worker-sessions.md §6, "Orphans").
//
// The stop is as durable as the runtime's own: each job's record says it
// is stopping before its first service is signalled, and a worker killed
// midway finishes those stops when it restores; one killed before a job's
// stop began takes the job back, is refused again at its first
// registration (the manager's answer is permanent) and stops it then.

// retiresNode reports whether a refusal with the manager's reason (a
// workerauth.Reason*) means that the node it concerns is gone for good:
// its slot was deregistered (TOKEN_REVOKED; a manager also gives it for the
// credential of a deregistered slot) or an operator terminated it
// (NODE_TERMINATED).
func retiresNode(reason string) bool {
	return reason == workerauth.ReasonTokenRevoked || reason == workerauth.ReasonNodeTerminated
}

// markRetired sets rej.NodeRetired and rej.NodeID when the refusal retires
// the node whose credential the registration presented. A registration
// without a credential (a first one with a token) concerns a slot this
// worker never ran jobs for: its jobs, if any, belong to another identity.
func (a *Agent) markRetired(rej *RegistrationError, presented string) {
	id, ok := a.Identity()
	if !ok || presented == "" || presented != id.Credential || !retiresNode(rej.Reason) {
		return
	}
	rej.NodeRetired, rej.NodeID = true, id.NodeID
}

// retiredNode returns the refusal in err if it retired this worker's node
// (RegistrationError.NodeRetired), else nil.
func retiredNode(err error) *RegistrationError {
	if rej, ok := errors.AsType[*RegistrationError](err); ok && rej.NodeRetired {
		return rej
	}
	return nil
}

// retire stops every job the runtime runs, because rej retired this
// worker's node, and records in rej which jobs were stopped and which were
// not. Sessions must have ended (no command can arrive any more); the
// event pump must still run, since the runtime blocks on reporting each
// stop. Starts queued or in flight stop being waited for first, as a
// stop_job does. The stops run concurrently, one per job, each with
// Config.StopGrace, under ctx: if ctx ends (SIGTERM), the remaining stops
// are reported as interrupted (the runtime's records finish them on the
// next start).
func (a *Agent) retire(ctx context.Context, rej *RegistrationError) {
	a.mu.Lock()
	for _, cancels := range a.mu.starting {
		for cancel := range cancels {
			(*cancel)()
		}
	}
	a.mu.Unlock()
	var keys []JobKey
	for _, rj := range a.rt.List() {
		keys = append(keys, rj.Key())
	}
	slices.SortFunc(keys, func(x, y JobKey) int { return strings.Compare(x.String(), y.String()) })
	log := a.log.With("node_id", rej.NodeID, "reason", rej.Reason)
	if len(keys) == 0 {
		log.Warn("the manager refused this node for good; it runs no jobs")
		return
	}
	log.Warn("the manager refused this node for good: stopping every job it runs, since no manager will manage them again",
		"jobs", keyList(keys), "grace", a.cfg.StopGrace)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		queued := a.ops.Do(key, func() {
			defer wg.Done()
			errs[i] = a.rt.Stop(ctx, key, a.cfg.StopGrace)
		})
		if !queued {
			wg.Done()
			errs[i] = ErrRuntimeClosed
		}
	}
	wg.Wait()
	for i, key := range keys {
		if errs[i] != nil {
			log.Warn("job of the refused node not stopped", "job_id", key.JobID, "role", key.Role, "error", errs[i])
			rej.NotStopped = append(rej.NotStopped, key)
			continue
		}
		log.Info("stopped job of the refused node", "job_id", key.JobID, "role", key.Role)
		rej.Stopped = append(rej.Stopped, key)
	}
	rej.StopErr = errors.Join(errs...)
}

// retirementSummary says, for RegistrationError.Error, what the worker did
// with the jobs of a retired node.
func (e *RegistrationError) retirementSummary() string {
	if !e.NodeRetired {
		return ""
	}
	if len(e.Stopped) == 0 && len(e.NotStopped) == 0 {
		return fmt.Sprintf(" Node %s ran no jobs on this worker.", e.NodeID)
	}
	var b strings.Builder
	if len(e.Stopped) > 0 {
		fmt.Fprintf(&b, " This worker stopped the %d job(s) it ran for node %s (%s): no manager will manage them again.",
			len(e.Stopped), e.NodeID, keyList(e.Stopped))
	}
	if len(e.NotStopped) > 0 {
		fmt.Fprintf(&b, " %d job(s) of node %s are not stopped yet (%s: %v); starting this worker again on its state directory "+
			"(it is refused again) stops them.", len(e.NotStopped), e.NodeID, keyList(e.NotStopped), e.StopErr)
	}
	return b.String()
}

// keyList renders keys as "job/role, job/role".
func keyList(keys []JobKey) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.String()
	}
	return strings.Join(parts, ", ")
}
