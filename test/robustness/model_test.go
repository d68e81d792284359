package robustness

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Hashes and payloads of a test history: write i has payload "p<i>" and
// hash i+1000.
func h(i int) int64           { return int64(1000 + i) }
func p(i int) string          { return "p" + string(rune('0'+i)) }
func at(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func create(c, w, call, ret int) Op {
	return Op{Client: c, Manager: "m1", Input: Input{Kind: Create, Key: "j", Payload: p(w), NewHash: h(w)},
		Output: Output{Outcome: OK, Hash: h(w)}, Call: at(call), Return: at(ret)}
}

func update(c, from, w, call, ret int) Op {
	return Op{Client: c, Manager: "m1", Input: Input{Kind: Update, Key: "j", FromHash: h(from), Payload: p(w), NewHash: h(w)},
		Output: Output{Outcome: OK, Hash: h(w)}, Call: at(call), Return: at(ret)}
}

func del(c, call, ret int) Op {
	return Op{Client: c, Manager: "m1", Input: Input{Kind: Delete, Key: "j"}, Output: Output{Outcome: OK}, Call: at(call), Return: at(ret)}
}

// read answers write w's state; w < 0: NotFound.
func read(c, w, call, ret int) Op {
	out := Output{Outcome: OK}
	if w >= 0 {
		out = Output{Outcome: OK, Found: true, Hash: h(w), Payload: p(w)}
	}
	return Op{Client: c, Manager: "m1", Input: Input{Kind: Read, Key: "j"}, Output: out, Call: at(call), Return: at(ret)}
}

func unknown(op Op) Op {
	op.Output = Output{Outcome: Unknown, Code: codes.Unavailable}
	return op
}

func refused(op Op, code codes.Code, claim Claim, named int64) Op {
	op.Output = Output{Outcome: Refused, Code: code, Claim: claim, Hash: named}
	return op
}

func TestModel_Check(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
		// stats, if set, is what History must report.
		stats *HistoryStats
	}{
		{
			// The smallest history of issue 15: v1 written via m1, v1→v2
			// via m2, both read v2, then m1 refuses a write from v2 naming
			// v1 as current, and m3 accepts the same write.
			name: "issue 15: stale-hash refusal naming the previous hash",
			ops: []Op{
				create(0, 0, 0, 1), update(0, 0, 1, 2, 3), update(1, 1, 2, 4, 5),
				read(0, 2, 6, 7), read(1, 2, 6, 7),
				refused(update(0, 2, 3, 8, 9), codes.FailedPrecondition, ClaimStaleHash, h(1)),
				update(2, 2, 4, 10, 11),
			},
			want: porcupine.Illegal,
		},
		{
			name: "stale-hash refusal naming no hash while the hash is current",
			ops:  []Op{create(0, 0, 0, 1), read(1, 0, 2, 3), refused(update(1, 0, 1, 4, 5), codes.FailedPrecondition, ClaimStaleHash, 0)},
			want: porcupine.Illegal,
		},
		{
			name: "sequential create, update, delete, re-create",
			ops: []Op{
				read(0, -1, 0, 1), create(0, 0, 2, 3), read(1, 0, 4, 5), update(1, 0, 1, 6, 7), read(0, 1, 8, 9),
				del(0, 10, 11), read(1, -1, 12, 13), create(1, 2, 14, 15), read(0, 2, 16, 17),
			},
			want: porcupine.Ok,
		},
		{
			name: "two concurrent CAS from one hash: one wins, the other names the winner",
			ops: []Op{
				create(0, 0, 0, 1), update(0, 0, 1, 2, 6),
				refused(update(1, 0, 2, 3, 7), codes.FailedPrecondition, ClaimStaleHash, h(1)), read(2, 1, 8, 9),
			},
			want: porcupine.Ok,
		},
		{
			name: "two CAS from one hash both acknowledged",
			ops:  []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 6), update(1, 0, 2, 3, 7)},
			want: porcupine.Illegal,
		},
		{
			name: "a read after an acknowledged update returns the older value",
			ops:  []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 3), read(1, 0, 4, 5)},
			want: porcupine.Illegal,
		},
		{
			name: "reads concurrent with an update may return either value",
			ops:  []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 10), read(1, 0, 3, 4), read(2, 1, 3, 5)},
			want: porcupine.Ok,
		},
		{
			name: "the old value after a read returned the new one, during the update",
			ops:  []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 10), read(2, 1, 3, 5), read(1, 0, 6, 7)},
			want: porcupine.Illegal,
		},
		{
			name:  "an unknown update nobody observed is dropped",
			ops:   []Op{create(0, 0, 0, 1), unknown(update(0, 0, 1, 2, 3)), read(1, 0, 4, 5), update(1, 0, 2, 6, 7), read(0, 2, 8, 9)},
			want:  porcupine.Ok,
			stats: &HistoryStats{Unknown: 1, Dropped: 1},
		},
		{
			name:  "an unknown update observed later took effect before the observer",
			ops:   []Op{create(0, 0, 0, 1), unknown(update(0, 0, 1, 2, 3)), read(1, 0, 4, 5), read(1, 1, 20, 21), update(2, 1, 2, 22, 23)},
			want:  porcupine.Ok,
			stats: &HistoryStats{Unknown: 1, Bounded: 1},
		},
		{
			name: "an unknown update observed before it was called",
			ops:  []Op{create(0, 0, 0, 1), read(1, 1, 2, 3), unknown(update(0, 0, 1, 4, 5))},
			want: porcupine.Illegal,
		},
		{
			name: "an unknown update observed by a read is not dropped; then a stale read",
			ops:  []Op{create(0, 0, 0, 1), unknown(update(0, 0, 1, 2, 3)), read(1, 1, 10, 11), read(2, 0, 12, 13)},
			want: porcupine.Illegal,
		},
		{
			name: "an unknown create explains a later AlreadyExists",
			ops: []Op{
				unknown(create(0, 0, 0, 1)), refused(create(1, 1, 2, 3), codes.AlreadyExists, ClaimExists, 0),
			},
			want: porcupine.Ok,
		},
		{
			name: "AlreadyExists for a job that never existed",
			ops:  []Op{read(0, -1, 0, 1), refused(create(1, 1, 2, 3), codes.AlreadyExists, ClaimExists, 0)},
			want: porcupine.Illegal,
		},
		{
			name: "an unknown delete explains a later NotFound",
			ops:  []Op{create(0, 0, 0, 1), unknown(del(0, 2, 3)), refused(update(1, 0, 1, 4, 5), codes.NotFound, ClaimAbsent, 0)},
			want: porcupine.Ok,
		},
		{
			name: "NotFound for an update of an existing job",
			ops:  []Op{create(0, 0, 0, 1), refused(update(1, 0, 1, 4, 5), codes.NotFound, ClaimAbsent, 0)},
			want: porcupine.Illegal,
		},
		{
			name: "an aborted update changes nothing",
			ops:  []Op{create(0, 0, 0, 1), refused(update(0, 0, 1, 2, 3), codes.Aborted, NoClaim, 0), read(1, 0, 4, 5)},
			want: porcupine.Ok,
		},
		{
			name: "an aborted update that took effect",
			ops:  []Op{create(0, 0, 0, 1), refused(update(0, 0, 1, 2, 3), codes.Aborted, NoClaim, 0), read(1, 1, 4, 5)},
			want: porcupine.Illegal,
		},
		{
			name: "a create answering another hash than its definition's",
			ops: []Op{func() Op {
				op := create(0, 0, 0, 1)
				op.Output.Hash = 7
				return op
			}()},
			want: porcupine.Illegal,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(tc.ops, nil, 10*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			if res.Result != tc.want {
				t.Fatalf("porcupine: %s, want %s; violations: %v", res.Result, tc.want, res.Violations)
			}
			if tc.want == porcupine.Illegal && (len(res.Violations) != 1 || res.Violations[0].Key != "j" || len(res.Violations[0].Stuck) == 0) {
				t.Fatalf("want one violation of job j naming the operations that cannot follow, got %v", res.Violations)
			}
			if tc.stats != nil && res.Stats != *tc.stats {
				t.Fatalf("history stats %+v, want %+v", res.Stats, *tc.stats)
			}
		})
	}
}

// TestCheck_IssueHistoryNamesTheRefusal checks the failure summary of the
// issue's history: it must point at the stale-hash refusal.
func TestCheck_IssueHistoryNamesTheRefusal(t *testing.T) {
	ops := []Op{
		create(0, 0, 0, 1), update(0, 0, 1, 2, 3), update(1, 1, 2, 4, 5), read(0, 2, 6, 7),
		refused(update(0, 2, 3, 8, 9), codes.FailedPrecondition, ClaimStaleHash, h(1)),
	}
	dir := t.TempDir()
	res, err := Check(ops, []Fault{{Desc: "SIGSTOP m2", Start: at(1), End: at(5)}}, 10*time.Second, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 {
		t.Fatalf("violations %v", res.Violations)
	}
	v := res.Violations[0]
	if v.Linearized != 4 || len(v.Stuck) != 1 || !strings.Contains(v.Stuck[0], "FailedPrecondition: current is #"+shortHash(h(1))) {
		t.Fatalf("violation %s: want 4 linearized and the refusal as the one that cannot follow", v)
	}
	if res.Visualization == "" || res.HistoryFile == "" {
		t.Fatalf("no visualisation or history written: %+v", res)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		kind  OpKind
		err   error
		want  Outcome
		claim Claim
		hash  int64
	}{
		{Update, nil, OK, NoClaim, 0},
		{Update, status.Error(codes.FailedPrecondition, `job "j": stale current_hash 5, the job's current hash is -42 (it changed since you read it): re-read the job and retry`), Refused, ClaimStaleHash, -42},
		{Update, status.Error(codes.FailedPrecondition, "reworded"), Refused, ClaimStaleHash, 0},
		{Update, status.Error(codes.NotFound, "x"), Refused, ClaimAbsent, 0},
		{Update, status.Error(codes.Aborted, "x"), Refused, NoClaim, 0},
		{Update, status.Error(codes.Unavailable, "x"), Unknown, NoClaim, 0},
		{Update, status.Error(codes.DeadlineExceeded, "x"), Unknown, NoClaim, 0},
		{Update, status.Error(codes.Canceled, "x"), Unknown, NoClaim, 0},
		{Update, status.Error(codes.Internal, "x"), Unknown, NoClaim, 0},
		{Update, errors.New("not a status"), Unknown, NoClaim, 0},
		{Create, status.Error(codes.AlreadyExists, "x"), Refused, ClaimExists, 0},
		{Create, status.Error(codes.NotFound, "x"), Unknown, NoClaim, 0},
		{Create, status.Error(codes.FailedPrecondition, "x"), Unknown, NoClaim, 0},
		{Delete, status.Error(codes.NotFound, "x"), Refused, ClaimAbsent, 0},
		{Delete, status.Error(codes.FailedPrecondition, "x"), Refused, ClaimExists, 0},
		{Delete, status.Error(codes.Unavailable, "x"), Unknown, NoClaim, 0},
	}
	for _, tc := range cases {
		got := Classify(tc.kind, tc.err)
		if got.Outcome != tc.want || got.Claim != tc.claim || got.Hash != tc.hash {
			t.Errorf("Classify(%s, %v) = %s claim %d hash %d, want %s claim %d hash %d", tc.kind, tc.err, got.Outcome, got.Claim, got.Hash, tc.want, tc.claim, tc.hash)
		}
	}
	if got := ClassifyRead(status.Error(codes.NotFound, "x")); got.Outcome != OK || got.Found {
		t.Errorf("ClassifyRead(NotFound) = %+v, want an observed absence", got)
	}
	if got := ClassifyRead(status.Error(codes.Unavailable, "x")); got.Outcome != Unknown {
		t.Errorf("ClassifyRead(Unavailable) = %+v, want Unknown", got)
	}
}

func TestLostWrites(t *testing.T) {
	final := func(op Op) map[string][]finalRead {
		return map[string][]finalRead{"j": {{manager: "m2", op: op, ok: true}}}
	}
	cases := []struct {
		name string
		ops  []Op
		fin  Op
		lost bool
	}{
		{"the last acknowledged write", []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 3)}, read(5, 1, 10, 11), false},
		{"an older write", []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 3)}, read(5, 0, 10, 11), true},
		{"a concurrent write", []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 5), update(1, 0, 2, 3, 6)}, read(5, 1, 10, 11), false},
		{"an unknown earlier write", []Op{create(0, 0, 0, 1), unknown(update(1, 0, 2, 1, 2)), update(0, 0, 1, 2, 3)}, read(5, 2, 10, 11), false},
		{"gone after an acknowledged write", []Op{create(0, 0, 0, 1), update(0, 0, 1, 2, 3)}, read(5, -1, 10, 11), true},
		{"deleted last", []Op{create(0, 0, 0, 1), del(0, 2, 3)}, read(5, -1, 10, 11), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := lostWrites(tc.ops, final(tc.fin))
			if (len(got) > 0) != tc.lost {
				t.Fatalf("lostWrites = %v, want lost: %t", got, tc.lost)
			}
		})
	}
}

func TestAcceptedAll(t *testing.T) {
	on := func(op Op, key, manager string) Op {
		op.Input.Key, op.Manager = key, manager
		return op
	}
	ops := []Op{
		on(update(0, 0, 1, 1, 2), "a", "m1"), // before the heal
		on(refused(update(0, 0, 2, 11, 12), codes.FailedPrecondition, ClaimStaleHash, 0), "a", "m1"), // refused
		on(update(0, 0, 3, 13, 15), "a", "m1"),
		on(create(0, 4, 12, 14), "b", "m1"),
		on(update(1, 0, 5, 11, 12), "b", "m2"), // another manager
	}
	if got := acceptedAll(ops, "m1", []string{"a", "b"}, at(10)); got != at(5) {
		t.Fatalf("acceptedAll = %s, want 5ms (job a's first acknowledged write after the heal returned at 15ms)", got)
	}
}
