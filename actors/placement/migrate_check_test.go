package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/norsk-oss/norsk-manager/actors/bundle"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// CheckMove leaves to the job grain what the grain explains better than
// the chain (which, with no other node free, would answer "fits no
// node"): a job whose role is already moving, a move to the node the role
// runs on, a completed job, a job with a terminal verdict. A dormant bundle job is refused: its
// instances are being stopped, a move would start one the drain of
// dormant jobs stops again.
func TestCheckMove_LeavesTheJobsStateToTheGrain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(f *fixture)
		want    error
	}{
		{"moving", func(f *fixture) {
			f.putNode("b", 4, "z1", nil)
			f.begin("j", "primary", "b")
			f.pass() // the target holds b's room
		}, nil},
		{"completed", func(f *fixture) {
			rec := f.job("j")
			rec.Job.Job.State = managerpb.Job_POST
			f.putJob(rec)
		}, nil},
		{"terminal", func(f *fixture) {
			rec := f.job("j")
			rec.Job.Job.TerminalState = &managerpb.TerminalState{FailureReason: "restart ceiling"}
			f.putJob(rec)
		}, nil},
		{"to its own node", func(f *fixture) {}, nil},
		{"dormant", func(f *fixture) {
			rec := f.job("j")
			rec.Job.Job.Tags = map[string]string{bundle.TagDormant: "true"}
			f.putJob(rec)
		}, ErrMoveRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.router.provisioning = true
			f.putNode("a", 4, "z1", nil)
			f.putJob(autoJob("j", 3, nil))
			f.pass()
			f.run("j", "primary")
			tc.prepare(f) // no node but the source's has room

			to := ""
			if tc.name == "to its own node" {
				to = "a"
			}
			err := CheckMove(f.store, f.now, "j", "primary", to)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), "dormant")
		})
	}
}

// After a move the role runs as primary~1: a MigrateJob of "primary" is
// checked as the grain will carry it out, a move of that instance (its
// node excluded from "any").
func TestCheckMove_LogicalRoleOfAMovedRole(t *testing.T) {
	f := newFixture(t)
	f.router.provisioning = true
	f.putNode("a", 4, "z1", nil)
	f.putJob(autoJob("j", 3, nil))
	f.pass()
	f.run("j", "primary")
	f.putNode("b", 4, "z1", nil)
	require.Equal(t, "primary~1", f.moveTo("j", "primary", "b"))
	err := CheckMove(f.store, f.now, "j", "primary", "b")
	require.NoError(t, err, "the grain answers: it already runs on b")
	f.putNode("small", 1, "z1", nil)
	err = CheckMove(f.store, f.now, "j", "primary", "small")
	require.ErrorIs(t, err, ErrMoveDoesNotFit, "the moved instance's requirements, checked")
}

// A job started by hand (no auto_placement) moves too: to "any" node the
// chain chooses (never its source's), and CheckMove agrees.
func TestEngine_Move_ManualJobToAny(t *testing.T) {
	f := newFixture(t)
	f.putNode("a", 4, "z1", nil)
	manual := autoJob("m", 1, nil)
	manual.Job.Job.AutoPlacement = nil
	f.putJob(manual)
	f.manualStart("m", "primary", "a")
	f.putNode("b", 4, "z1", nil)
	require.NoError(t, CheckMove(f.store, f.now, "m", "primary", ""))
	f.router.provisioning = true
	require.Equal(t, "primary~1", f.moveTo("m", "primary", ""))
	require.Equal(t, "b", f.nodeOf("m", "primary~1"))
	require.Len(t, f.job("m").GetInstances(), 1)
}
