package persistence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// LocalLog is the Journal of a single manager: it funnels every Append into
// one goroutine that applies whatever has queued up as one batch — one
// badger transaction, one fsync — so concurrent appends share a group
// commit. Log indexes are the FSM's applied index plus one per batch, the
// same numbering a Raft log would give.
type LocalLog struct {
	store    *Store
	maxBatch int
	maxBytes int

	appendCh chan *pendingAppend
	stopCh   chan struct{} // closed by Close
	doneCh   chan struct{} // closed when run returns
	once     sync.Once
}

var _ Journal = (*LocalLog)(nil)

type pendingAppend struct {
	cmd    *internalpb.AppendCommand
	size   int
	result chan commandResult // buffered, capacity 1
}

// NewLocalLog starts the log's apply goroutine over store. Close it before
// closing the store.
func NewLocalLog(store *Store) *LocalLog {
	l := &LocalLog{
		store:    store,
		maxBatch: store.cfg.MaxBatch,
		maxBytes: store.cfg.MaxBatchBytes,
		appendCh: make(chan *pendingAppend, 4*store.cfg.MaxBatch),
		stopCh:   make(chan struct{}),
		doneCh:   make(chan struct{}),
	}
	go l.run()
	return l
}

// Append implements Journal. Besides the Journal's errors it refuses, with
// nothing written, a change over Config.MaxBatchBytes (ErrTooLarge) and any
// change while the data dir's filesystem is under its free-space reserve
// (a *NoSpaceError, ErrNoSpace; Config.MinFreeDisk).
func (l *LocalLog) Append(ctx context.Context, key EntityKey, expectedSeq Seq, change Change) (AppendResult, error) {
	cmd := &internalpb.AppendCommand{
		EntityKey:   string(key),
		ExpectedSeq: uint64(expectedSeq),
		RequestId:   change.RequestID,
		Record:      change.Record,
		Delete:      change.Delete,
		Events:      change.Events,
		At:          timestamppb.New(change.At),
		Audit:       change.Audit,
	}
	p := &pendingAppend{cmd: cmd, size: proto.Size(cmd), result: make(chan commandResult, 1)}
	if p.size > l.maxBytes {
		return AppendResult{}, fmt.Errorf("append to %s: the change is %d bytes, the limit is %d: %w", key, p.size, l.maxBytes, ErrTooLarge)
	}
	select {
	case <-l.stopCh:
		return AppendResult{}, ErrClosed
	default:
	}
	if err := l.store.space.Admit(p.size); err != nil {
		return AppendResult{}, fmt.Errorf("append to %s: %w", key, err)
	}
	select {
	case l.appendCh <- p:
	case <-ctx.Done():
		return AppendResult{}, ctx.Err()
	case <-l.stopCh:
		return AppendResult{}, ErrClosed
	}
	select {
	case r := <-p.result:
		return r.res, r.err
	case <-ctx.Done():
		return AppendResult{}, ctx.Err()
	case <-l.doneCh:
		// The apply loop has exited; it answers everything it took before
		// closing doneCh, so no answer now means the append was not applied.
		select {
		case r := <-p.result:
			return r.res, r.err
		default:
			return AppendResult{}, ErrClosed
		}
	}
}

// Load implements Journal.
func (l *LocalLog) Load(ctx context.Context, key EntityKey) ([]byte, Seq, error) {
	return l.store.Load(key)
}

// LastSeq implements Journal.
func (l *LocalLog) LastSeq(ctx context.Context, key EntityKey) (Seq, error) {
	return l.store.Seq(key)
}

// Close stops the log after the batch in flight; appends still queued, and
// appends racing with Close, get ErrClosed. Idempotent.
func (l *LocalLog) Close() error {
	l.once.Do(func() { close(l.stopCh) })
	<-l.doneCh
	return nil
}

func (l *LocalLog) run() {
	defer close(l.doneCh)
	batch := make([]*pendingAppend, 0, l.maxBatch)
	for {
		var first *pendingAppend
		select {
		case first = <-l.appendCh:
		case <-l.stopCh:
			l.drainClosed()
			return
		}
		batch = append(batch[:0], first)
		size := first.size
	fill:
		for len(batch) < l.maxBatch {
			select {
			case p := <-l.appendCh:
				if size+p.size > l.maxBytes {
					l.apply(batch)
					batch, size = batch[:0], 0
				}
				batch = append(batch, p)
				size += p.size
			default:
				break fill
			}
		}
		l.apply(batch)
	}
}

func (l *LocalLog) apply(batch []*pendingAppend) {
	cmds := make([]*internalpb.AppendCommand, len(batch))
	for i, p := range batch {
		cmds[i] = p.cmd
	}
	idx := l.store.fsm.AppliedIndex() + 1
	results, err := l.store.fsm.ApplyBatch(idx, cmds)
	if errors.Is(err, badger.ErrTxnTooBig) {
		// The sizes are bounded by MaxBatchBytes, but badger counts keys
		// and index entries too: apply the halves on their own, so one
		// large append cannot fail the others.
		if len(batch) > 1 {
			l.apply(batch[:len(batch)/2])
			l.apply(batch[len(batch)/2:])
			return
		}
		err = fmt.Errorf("append to %s: too large for one transaction (%v): %w", batch[0].cmd.GetEntityKey(), err, ErrTooLarge)
	}
	for i, p := range batch {
		if err != nil {
			p.result <- commandResult{err: err}
			continue
		}
		p.result <- results[i]
	}
}

// drainClosed fails every append still queued after Close.
func (l *LocalLog) drainClosed() {
	for {
		select {
		case p := <-l.appendCh:
			p.result <- commandResult{err: ErrClosed}
		default:
			return
		}
	}
}
