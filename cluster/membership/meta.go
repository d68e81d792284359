package membership

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Meta is what a manager advertises about itself to the others. It travels
// in memberlist's node meta, which is limited to memberlist.MetaMaxSize
// (512) bytes once encoded; SetMeta, Validate and New refuse more with
// ErrMetaTooLarge. Values are copied on the way in and out: a Meta obtained
// from Members may be modified by the caller.
type Meta struct {
	// Name is the manager's name; always equal to Config.Name.
	Name string
	// APIAddr is the public gRPC API address ("host:port"), empty if none.
	APIAddr string
	// RaftAddr is the Raft transport address ("host:port"), empty if none.
	RaftAddr string
	// ActorHost and ActorPort are the protoactor remote endpoint; ActorPort
	// 0 means the manager hosts no actors (yet).
	ActorHost string
	ActorPort int
	// ActorID is the protoactor actor-system id (ActorSystem.ID), random per
	// process start; protoactor uses it as the cluster member id.
	ActorID string
	// Kinds are the protoactor cluster kinds this manager hosts.
	Kinds []string
	// Version is the manager's build version, informational.
	Version string
	// Fenced lists the actor ids (ActorID) of members that are alive in the
	// gossip but that this manager's protoactor has blocked: they were
	// declared failed once (a freeze, a partition) and protoactor never
	// accepts a blocked id back. A manager that finds its own ActorID
	// fenced by a majority of the others must rejoin under a new id
	// (FencedBy; docs/design/ha.md "Fenced actor ids"). Set by Provider.
	Fenced []string
}

// MaxFenced bounds Meta.Fenced (the meta must fit memberlist's 512 bytes).
const MaxFenced = 6

// Clone returns a deep copy of m.
func (m Meta) Clone() Meta {
	m.Kinds = slices.Clone(m.Kinds)
	m.Fenced = slices.Clone(m.Fenced)
	return m
}

// wireMeta is Meta's encoding: compact JSON with one-letter keys.
//
// # Version History
//
// 1: n, a, r, h, p, i, k, ver, l. Unknown keys are ignored on decode, so a
// field may be added without a version bump; removing or re-typing one
// needs a new key. Added since: f (fenced actor ids).
type wireMeta struct {
	Name      string   `json:"n"`
	APIAddr   string   `json:"a,omitempty"`
	RaftAddr  string   `json:"r,omitempty"`
	ActorHost string   `json:"h,omitempty"`
	ActorPort int      `json:"p,omitempty"`
	ActorID   string   `json:"i,omitempty"`
	Kinds     []string `json:"k,omitempty"`
	Version   string   `json:"ver,omitempty"`
	// Leaving is set by Leave just before memberlist's leave broadcast: it
	// is how the others tell a graceful leave from a failure, because
	// memberlist v0.7.0 never fills Node.State in its callbacks.
	Leaving bool     `json:"l,omitempty"`
	Fenced  []string `json:"f,omitempty"`
}

// encodeMeta encodes m with the leaving flag, refusing more than
// memberlist.MetaMaxSize bytes with a wrapped ErrMetaTooLarge.
func encodeMeta(m Meta, leaving bool) ([]byte, error) {
	buf, err := json.Marshal(wireMeta{
		Name: m.Name, APIAddr: m.APIAddr, RaftAddr: m.RaftAddr,
		ActorHost: m.ActorHost, ActorPort: m.ActorPort, ActorID: m.ActorID,
		Kinds: m.Kinds, Version: m.Version, Leaving: leaving, Fenced: m.Fenced,
	})
	if err != nil {
		return nil, fmt.Errorf("membership: encode meta: %w", err)
	}
	if len(buf) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d (Kinds: %d, Version: %d bytes)",
			ErrMetaTooLarge, len(buf), memberlist.MetaMaxSize, len(m.Kinds), len(m.Version))
	}
	return buf, nil
}

// decodeMeta decodes what encodeMeta produced. The returned Meta shares
// nothing with buf.
func decodeMeta(buf []byte) (Meta, bool, error) {
	var w wireMeta
	if err := json.Unmarshal(buf, &w); err != nil {
		return Meta{}, false, fmt.Errorf("membership: decode meta (%d bytes): %w", len(buf), err)
	}
	return Meta{
		Name: w.Name, APIAddr: w.APIAddr, RaftAddr: w.RaftAddr,
		ActorHost: w.ActorHost, ActorPort: w.ActorPort, ActorID: w.ActorID,
		Kinds: w.Kinds, Version: w.Version, Fenced: w.Fenced,
	}, w.Leaving, nil
}
