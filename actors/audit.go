package actors

import (
	"slices"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// maxHeldAudits bounds the audit intents a grain holds: commands waiting
// for their commit (a StartJob waits for the node grain). The oldest is
// dropped beyond it; a command refused before it committed leaves its
// intent until then, harmlessly: only a commit with the same request id
// (a retry of the same call) could take it.
const maxHeldAudits = 64

// Audits holds the audit intents of the API commands a grain handles, by
// request id, until the commit of the change they record takes them
// (docs/design/audit.md): the grain calls Hold when a command arrives and
// Take in its commit, whose append then carries the intent. Only a commit
// that applies consumes it (Done), so a refused or repeated command writes
// no entry, and a command that commits twice is audited once. The zero
// value is ready; like the rest of a grain's state it is touched only
// from Receive.
type Audits struct {
	ids     []string
	intents map[string]*internalpb.AuditIntent
}

// Hold keeps in for the command reqID (nothing for an empty id or intent).
func (a *Audits) Hold(reqID string, in *internalpb.AuditIntent) {
	if reqID == "" || in == nil {
		return
	}
	if a.intents == nil {
		a.intents = map[string]*internalpb.AuditIntent{}
	}
	if _, ok := a.intents[reqID]; !ok {
		a.ids = append(a.ids, reqID)
	}
	a.intents[reqID] = in
	if over := len(a.ids) - maxHeldAudits; over > 0 {
		for _, id := range a.ids[:over] {
			delete(a.intents, id)
		}
		a.ids = slices.Delete(a.ids, 0, over)
	}
}

// Take returns the intent held for reqID (nil: none), still held.
func (a *Audits) Take(reqID string) *internalpb.AuditIntent {
	if reqID == "" {
		return nil
	}
	return a.intents[reqID]
}

// Done forgets reqID's intent once its change committed.
func (a *Audits) Done(reqID string) {
	if _, ok := a.intents[reqID]; !ok {
		return
	}
	delete(a.intents, reqID)
	a.ids = slices.DeleteFunc(a.ids, func(id string) bool { return id == reqID })
}
