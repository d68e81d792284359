package persistence

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// appendCmd builds the AppendCommand of a job append with one event.
func appendCmd(id string, expected Seq, reqID string) *internalpb.AppendCommand {
	return &internalpb.AppendCommand{
		EntityKey:   string(JobKey(id)),
		ExpectedSeq: uint64(expected),
		RequestId:   reqID,
		Record:      jobRecord(id, map[string]string{"k": id}, time.Time{}, reqID),
		Events:      []*managerpb.EventStreamEvent{jobDeleted(id)},
		At:          timestamppb.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)),
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

func unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

// testHCLogger sends raft's logs (warnings and errors) to t.Log.
func testHCLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testLogWriter{t}})
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func commandLog(t testing.TB, idx uint64, cmds ...*internalpb.AppendCommand) *raft.Log {
	t.Helper()
	var data []byte
	if len(cmds) == 1 {
		b, err := EncodeAppend(cmds[0])
		require.NoError(t, err)
		data = b
	} else {
		data = mustMarshal(t, &internalpb.AppendBatch{Commands: cmds})
	}
	return &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}
}

func TestEncodeAppend(t *testing.T) {
	cmd := appendCmd("a", 0, "r1")
	b, err := EncodeAppend(cmd)
	require.NoError(t, err)
	var batch internalpb.AppendBatch
	require.NoError(t, unmarshal(b, &batch))
	require.Len(t, batch.GetCommands(), 1)
	require.Equal(t, "job/a", batch.GetCommands()[0].GetEntityKey())

	bad := appendCmd("a", 0, "r1")
	bad.RequestId = "\xff\xfe not utf-8"
	_, err = EncodeAppend(bad)
	require.Error(t, err, "data the FSM could not decode never reaches the log")
	require.Contains(t, err.Error(), "job/a")
}

func TestRaftFSM_ApplyBatch(t *testing.T) {
	store, _ := TestStore(t)
	fsm := NewRaftFSM(store)

	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{0}},
		commandLog(t, 2, appendCmd("a", 0, "r1")),
		commandLog(t, 3, appendCmd("a", 0, "r2"), appendCmd("b", 0, "r3"), &internalpb.AppendCommand{EntityKey: "nokind"}),
		commandLog(t, 4, appendCmd("a", 1, "r1")), // a repeated request id
		commandLog(t, 5), // an empty batch
	}
	resp := fsm.ApplyBatch(logs)
	require.Len(t, resp, len(logs))
	require.Nil(t, resp[0], "non-command logs are answered nil")

	r2 := resp[1].(*RaftApplyResponse)
	require.Equal(t, []CommandOutcome{{Result: AppendResult{Seq: 1, LastEvent: 1}}}, r2.Results)

	r3 := resp[2].(*RaftApplyResponse).Results
	require.Len(t, r3, 3)
	var ce *ConflictError
	require.ErrorAs(t, r3[0].Err, &ce, "a conflict is an outcome, not a failure of the log")
	require.Equal(t, Seq(1), ce.Actual)
	require.NoError(t, r3[1].Err)
	require.Equal(t, AppendResult{Seq: 1, LastEvent: 2}, r3[1].Result)
	require.ErrorIs(t, r3[2].Err, ErrCorrupt, "a malformed command fails alone")

	require.True(t, resp[3].(*RaftApplyResponse).Results[0].Result.Duplicate)
	require.Empty(t, resp[4].(*RaftApplyResponse).Results)
	require.Equal(t, uint64(5), store.FSM().AppliedIndex())

	// Raft replays logs after a restart: those at or below the applied
	// index are skipped and change nothing.
	before := dumpStore(t, store)
	resp = fsm.ApplyBatch(append(logs, commandLog(t, 6, appendCmd("c", 0, "r4"))))
	for i := range logs {
		require.Nil(t, resp[i], "replayed log %d", logs[i].Index)
	}
	require.Equal(t, AppendResult{Seq: 1, LastEvent: 3}, resp[len(logs)].(*RaftApplyResponse).Results[0].Result)
	after := dumpStore(t, store)
	delete(after, string(entKey(JobKey("c"))))
	for k := range after {
		if strings.HasPrefix(k, prefixIndex) && strings.HasSuffix(k, "c") || strings.HasPrefix(k, prefixEv) || strings.HasPrefix(k, prefixMeta) {
			delete(after, k)
			delete(before, k)
		}
	}
	require.Equal(t, before, after)

	// A batch of configuration logs only still advances the applied index;
	// Apply is ApplyBatch of one.
	require.Nil(t, fsm.ApplyBatch([]*raft.Log{{Index: 7, Type: raft.LogConfiguration}})[0])
	require.Equal(t, uint64(7), store.FSM().AppliedIndex())
	r := fsm.Apply(commandLog(t, 8, appendCmd("d", 0, "r5")))
	require.NoError(t, r.(*RaftApplyResponse).Results[0].Err)
	require.Equal(t, uint64(8), store.FSM().AppliedIndex())
}

func TestRaftFSM_ApplyBatch_PanicsOnUndecodableLog(t *testing.T) {
	store, _ := TestStore(t)
	fsm := NewRaftFSM(store)
	var v any
	func() {
		defer func() { v = recover() }()
		fsm.ApplyBatch([]*raft.Log{
			commandLog(t, 2, appendCmd("a", 0, "")),
			{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte{0xff}},
		})
	}()
	require.NotNil(t, v, "an undecodable log panics")
	require.Contains(t, v, "persistence: raft log 3 (term 2) is not an AppendBatch")
	require.Zero(t, store.FSM().AppliedIndex(), "nothing of the batch is applied")
}

// TestRaftFSM_ApplyBatch_TxnTooBig: a batch beyond badger's transaction
// limit is applied in parts; a log that alone exceeds it fails its own
// commands, and the applied index still covers it.
func TestRaftFSM_ApplyBatch_TxnTooBig(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.SyncWrites, cfg.GCInterval = false, 0
	cfg.MemTableSize, cfg.MaxBatchBytes = 8<<20, 900<<10 // badger's txn limit: 1.2 MiB
	store, _ := TestStoreWithConfig(t, cfg)
	fsm := NewRaftFSM(store)
	big := strings.Repeat("x", 400<<10) // under the value threshold: counted in full
	cmd := func(id string) *internalpb.AppendCommand {
		return &internalpb.AppendCommand{EntityKey: string(JobKey(id)), Record: bigJobRecord(id, big)}
	}
	var logs []*raft.Log
	for i := range 6 {
		logs = append(logs, commandLog(t, uint64(i+1), cmd(fmt.Sprint("j", i))))
	}
	logs = append(logs, commandLog(t, 7, cmd("h1"), cmd("h2"), cmd("h3"), cmd("h4")))
	logs = append(logs, commandLog(t, 8, cmd("after")))
	resp := fsm.ApplyBatch(logs)
	for i := range 6 {
		require.NoError(t, resp[i].(*RaftApplyResponse).Results[0].Err, "log %d", i+1)
	}
	for _, o := range resp[6].(*RaftApplyResponse).Results {
		require.ErrorIs(t, o.Err, ErrTooLarge)
	}
	require.NoError(t, resp[7].(*RaftApplyResponse).Results[0].Err)
	require.Equal(t, uint64(8), store.FSM().AppliedIndex())
	_, _, err := store.Load(JobKey("h1"))
	require.ErrorIs(t, err, ErrNotFound)
}

// memSink is a raft.SnapshotSink into memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// TestRaftFSM_Snapshot_CapturesTheMoment: Persist streams the state of the
// moment Snapshot was called, while applies continue.
func TestRaftFSM_Snapshot_CapturesTheMoment(t *testing.T) {
	store, _ := TestStore(t)
	fsm := NewRaftFSM(store)
	for i := range 5 {
		fsm.ApplyBatch([]*raft.Log{commandLog(t, uint64(i+1), appendCmd(fmt.Sprint("j", i), 0, ""))})
	}
	want := dumpStore(t, store)
	snap, err := fsm.Snapshot()
	require.NoError(t, err)
	defer snap.Release()
	for i := 5; i < 10; i++ {
		fsm.ApplyBatch([]*raft.Log{commandLog(t, uint64(i+1), appendCmd(fmt.Sprint("j", i), 0, ""))})
	}
	sink := &memSink{}
	require.NoError(t, snap.Persist(sink))
	require.True(t, sink.closed)

	dst, dstLog := TestStore(t)
	require.NoError(t, dstLog.Close())
	require.NoError(t, NewRaftFSM(dst).Restore(io.NopCloser(&sink.Buffer)))
	require.Equal(t, want, dumpStore(t, dst))
	require.Equal(t, uint64(5), dst.FSM().AppliedIndex())
}

func TestRaftFSM_Restore_RefusesCorrupt(t *testing.T) {
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 2)
	snap := snapshotBytes(t, src)
	snap[len(snap)/3] ^= 0x40

	dst, dstLog := TestStore(t)
	populate(t, dstLog, "dst", 2)
	require.NoError(t, dstLog.Close())
	before := dumpStore(t, dst)
	err := NewRaftFSM(dst).Restore(io.NopCloser(bytes.NewReader(snap)))
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, before, dumpStore(t, dst))
}

func TestRaftFSM_NeedsSnapshotRestore(t *testing.T) {
	newSnaps := func(t *testing.T) raft.SnapshotStore {
		snaps, err := raft.NewFileSnapshotStoreWithLogger(t.TempDir(), 2, testHCLogger(t))
		require.NoError(t, err)
		return snaps
	}
	// persist writes a raft snapshot of src into snaps.
	persist := func(t *testing.T, snaps raft.SnapshotStore, src *Store) {
		sink, err := snaps.Create(raft.SnapshotVersionMax, src.FSM().AppliedIndex()+3, 1, raft.Configuration{}, 1, nil)
		require.NoError(t, err)
		require.NoError(t, src.WriteSnapshot(sink))
		require.NoError(t, sink.Close())
	}
	src, srcLog := TestStore(t)
	populate(t, srcLog, "src", 3)

	cases := []struct {
		name  string
		setup func(t *testing.T, store *Store, snaps raft.SnapshotStore)
		want  bool
	}{
		{"no snapshot", func(*testing.T, *Store, raft.SnapshotStore) {}, false},
		{"store at the snapshot", func(t *testing.T, store *Store, snaps raft.SnapshotStore) {
			persist(t, snaps, src)
			require.NoError(t, store.RestoreSnapshot(bytes.NewReader(snapshotBytes(t, src))))
		}, false},
		{"store beyond the snapshot", func(t *testing.T, store *Store, snaps raft.SnapshotStore) {
			persist(t, snaps, src)
			require.NoError(t, store.RestoreSnapshot(bytes.NewReader(snapshotBytes(t, src))))
			NewRaftFSM(store).ApplyBatch([]*raft.Log{commandLog(t, store.FSM().AppliedIndex()+10, appendCmd("x", 0, ""))})
		}, false},
		{"store behind the snapshot (restore refused or never run)", func(t *testing.T, _ *Store, snaps raft.SnapshotStore) {
			persist(t, snaps, src)
		}, true},
		{"interrupted restore", func(t *testing.T, store *Store, snaps raft.SnapshotStore) {
			store.fsm.setRestoring()
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, log := TestStore(t)
			require.NoError(t, log.Close())
			snaps := newSnaps(t)
			tc.setup(t, store, snaps)
			got, err := NewRaftFSM(store).NeedsSnapshotRestore(snaps)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestRaftFSM_Snapshot_IsolatedFromRestore: a snapshot captured before a
// Restore (raft may persist one while a follower installs the leader's)
// still streams the state it captured.
func TestRaftFSM_Snapshot_IsolatedFromRestore(t *testing.T) {
	store, log := TestStore(t)
	populate(t, log, "old", 4)
	require.NoError(t, log.Close())
	want := dumpStore(t, store)
	fsm := NewRaftFSM(store)
	snap, err := fsm.Snapshot()
	require.NoError(t, err)
	defer snap.Release()

	src, srcLog := TestStore(t)
	populate(t, srcLog, "new", 3)
	require.NoError(t, fsm.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, src)))))
	require.Equal(t, dumpStore(t, src), dumpStore(t, store))

	sink := &memSink{}
	require.NoError(t, snap.Persist(sink))
	dst, dstLog := TestStore(t)
	require.NoError(t, dstLog.Close())
	require.NoError(t, dst.RestoreSnapshot(&sink.Buffer))
	require.Equal(t, want, dumpStore(t, dst))
}
