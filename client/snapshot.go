package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// SnapshotProgress is how far a SnapshotSave has got.
type SnapshotProgress struct {
	// Bytes is how many bytes of the backup file were received and written.
	Bytes int64
	// EstimatedBytes is the manager's estimate of the file's size.
	EstimatedBytes int64
	// Keys is how many of the snapshot's records the manager has sent.
	Keys uint64
	// TotalKeys is the snapshot's number of records.
	TotalKeys uint64
}

// SnapshotInfo describes a backup that SnapshotSave received whole.
type SnapshotInfo struct {
	// Header is what the manager said the backup holds (applied index,
	// store id, creation time, keys...).
	Header *managerpb.SnapshotHeader
	// SHA256 is the SHA-256 of the whole file, checked against the
	// manager's trailer (what sha256sum prints for the file).
	SHA256 []byte
	// Size is the file's size in bytes, checked against the trailer.
	Size int64
	// Addr is the address of the manager that answered ("" if unknown).
	Addr string
}

// ErrSnapshotIntegrity is wrapped by SnapshotSave when the stream the
// manager sent is not a whole, intact backup (messages out of order, a
// checksum or size that does not match what arrived): what was written
// must not be used.
var ErrSnapshotIntegrity = errors.New("client: snapshot stream failed its integrity check")

// SnapshotSave asks one manager (of Settings.URL; give a single address to
// choose which) for an online backup of its store and writes the backup
// file's bytes to w as they arrive, calling progress (if set) after each
// chunk, from the calling goroutine. It returns once the whole file arrived
// and its SHA-256 and size match the manager's trailer; w then holds
// exactly the file. On any error w may hold a prefix, which the caller must
// discard.
//
// The per-call timeout (Settings.Timeout) bounds the wait for each message,
// not the whole backup. Errors: a *CallError for the call (Unavailable: no
// leader, or the store is being restored; ResourceExhausted: a backup is
// already being taken from that manager), ErrSnapshotIntegrity for a bad
// stream, or w's error.
func (m *NorskManager) SnapshotSave(ctx context.Context, w io.Writer, progress func(SnapshotProgress)) (*SnapshotInfo, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := m.idleTimer(cancel)
	defer idle.stop()
	var p peer.Peer
	stream, err := m.api.SnapshotSave(ctx, &managerpb.SnapshotSaveRequest{}, grpc.Peer(&p))
	if err != nil {
		return nil, m.callErr(ctx, "SnapshotSave", idle.cause(ctx, err), nil)
	}
	r := &snapshotReceiver{w: w, sum: sha256.New(), progress: progress}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if isEOF(err) {
				return nil, fmt.Errorf("client: SnapshotSave: the stream ended after %d bytes without a trailer: %w", r.n, ErrSnapshotIntegrity)
			}
			return nil, m.callErr(ctx, "SnapshotSave", idle.cause(ctx, err), &p)
		}
		idle.reset()
		done, err := r.take(msg)
		if err != nil {
			return nil, err
		}
		if done {
			break
		}
	}
	// The trailer is the last message: drain the end of the stream so
	// that the call completes (and its peer is known).
	if _, err := stream.Recv(); !isEOF(err) {
		if err == nil {
			return nil, fmt.Errorf("client: SnapshotSave: a message after the trailer: %w", ErrSnapshotIntegrity)
		}
		return nil, m.callErr(ctx, "SnapshotSave", idle.cause(ctx, err), &p)
	}
	info := &SnapshotInfo{Header: r.hdr, SHA256: r.sum.Sum(nil), Size: r.n}
	if p.Addr != nil {
		info.Addr = p.Addr.String()
	}
	return info, nil
}

// snapshotReceiver checks the order of a SnapshotSave stream and writes
// its data.
type snapshotReceiver struct {
	w        io.Writer
	sum      hash.Hash // of the data so far
	progress func(SnapshotProgress)
	hdr      *managerpb.SnapshotHeader
	n        int64 // data bytes so far
}

// take handles one message; done is true after the (valid) trailer.
func (r *snapshotReceiver) take(msg *managerpb.SnapshotChunk) (done bool, err error) {
	switch c := msg.GetChunk().(type) {
	case *managerpb.SnapshotChunk_Header:
		if r.hdr != nil {
			return false, fmt.Errorf("client: SnapshotSave: a second header: %w", ErrSnapshotIntegrity)
		}
		r.hdr = c.Header
		r.report(0)
	case *managerpb.SnapshotChunk_Data:
		if r.hdr == nil {
			return false, fmt.Errorf("client: SnapshotSave: data before the header: %w", ErrSnapshotIntegrity)
		}
		d := c.Data.GetData()
		if _, err := r.w.Write(d); err != nil {
			return false, fmt.Errorf("client: SnapshotSave: write the backup: %w", err)
		}
		r.sum.Write(d)
		r.n += int64(len(d))
		r.report(c.Data.GetKeysDone())
	case *managerpb.SnapshotChunk_Trailer:
		if r.hdr == nil {
			return false, fmt.Errorf("client: SnapshotSave: trailer before the header: %w", ErrSnapshotIntegrity)
		}
		got := r.sum.Sum(nil)
		switch {
		case uint64(r.n) != c.Trailer.GetSizeBytes():
			return false, fmt.Errorf("client: SnapshotSave: received %d bytes, the manager sent %d: %w", r.n, c.Trailer.GetSizeBytes(), ErrSnapshotIntegrity)
		case !bytes.Equal(got, c.Trailer.GetSha256()):
			return false, fmt.Errorf("client: SnapshotSave: the SHA-256 of what arrived (%x) is not the manager's (%x): %w", got, c.Trailer.GetSha256(), ErrSnapshotIntegrity)
		}
		return true, nil
	default:
		return false, fmt.Errorf("client: SnapshotSave: an empty or unknown message: %w", ErrSnapshotIntegrity)
	}
	return false, nil
}

func (r *snapshotReceiver) report(keys uint64) {
	if r.progress != nil {
		r.progress(SnapshotProgress{Bytes: r.n, EstimatedBytes: int64(r.hdr.GetEstimatedSizeBytes()), Keys: keys, TotalKeys: r.hdr.GetKeys()})
	}
}

// errIdle is the cancellation cause of a stream that sent nothing for the
// per-call timeout.
var errIdle = errors.New("client: no message from the manager within the per-call timeout")

// idleTimer cancels a stream when no message arrives for the per-call
// timeout (none without one).
type idleTimer struct {
	t *time.Timer
	d time.Duration
}

func (m *NorskManager) idleTimer(cancel context.CancelCauseFunc) *idleTimer {
	it := &idleTimer{d: m.timeout}
	if it.d > 0 {
		it.t = time.AfterFunc(it.d, func() { cancel(errIdle) })
	}
	return it
}

func (it *idleTimer) reset() {
	if it.t != nil {
		it.t.Reset(it.d)
	}
}

func (it *idleTimer) stop() {
	if it.t != nil {
		it.t.Stop()
	}
}

// cause returns err, or a DeadlineExceeded status (gRPC's local deadline
// message, so it is reported as the client's) naming the idle timeout
// when that is what ended the call.
func (it *idleTimer) cause(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errIdle) {
		return status.Errorf(codes.DeadlineExceeded, "context deadline exceeded: no message from the manager for %s (the per-call timeout)", it.d)
	}
	return err
}
