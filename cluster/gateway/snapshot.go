package gateway

import (
	"context"
	"crypto/sha256"
	"hash"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/persistence/backupfile"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// snapshotChunkSize is the payload of one SnapshotData message: well
// under gRPC's default 4 MiB receive limit.
const snapshotChunkSize = 256 << 10

// SnapshotSave streams an online backup of the store
// (docs/design/backup.md): after the read barrier (in a cluster, the local
// replica has applied every write acknowledged before the call), one read
// view is counted and sent as a SnapshotHeader, the backup file in
// SnapshotData chunks, and a SnapshotTrailer with the file's SHA-256 and
// size. Applies go on while it streams.
//
// One backup at a time per manager: a second gets ResourceExhausted.
// Unavailable: no leader (in a cluster), or the store is being restored
// from the leader's snapshot. A client that stops reading holds the read
// view until gRPC's flow control ends the call with the client's deadline
// or cancellation.
func (s *Server) SnapshotSave(_ *managerpb.SnapshotSaveRequest, stream managerpb.Manager_SnapshotSaveServer) error {
	if !s.snapshotting.CompareAndSwap(false, true) {
		return status.Error(codes.ResourceExhausted, "a backup is already being taken from this manager; retry when it ends, or ask another manager")
	}
	defer s.snapshotting.Store(false)
	ctx := stream.Context()
	if err := s.barrier(ctx); err != nil {
		return err
	}
	// Audited first, so that the backup holds its own entry.
	s.auditBackup(ctx)
	start := time.Now()
	b, err := s.cfg.Store.BeginBackup(persistence.BackupInfo{ManagerVersion: s.cfg.Version.GetManagerVersion(), Now: s.cfg.Clock})
	if err != nil {
		return toStatus(err)
	}
	defer b.Close()
	m := b.Meta()
	hdr := &managerpb.SnapshotHeader{
		FileFormatVersion: backupfile.Version, StoreFormatVersion: m.StoreFormat, AppliedIndex: m.AppliedIndex, StoreId: m.StoreID,
		CreatedAt: timestamppb.New(m.CreatedAt), EstimatedSizeBytes: uint64(b.EstimatedSize()), Keys: m.Keys,
		EventHeadIndex: m.EventHead, ManagerVersion: m.ManagerVersion,
	}
	if err := stream.Send(&managerpb.SnapshotChunk{Chunk: &managerpb.SnapshotChunk_Header{Header: hdr}}); err != nil {
		return err
	}
	cw := &chunkWriter{stream: stream, backup: b, sum: sha256.New()}
	size, err := b.WriteTo(cw)
	if err == nil {
		err = cw.flush()
	}
	if err != nil {
		if cw.sendErr != nil {
			return cw.sendErr // the client went away: gRPC's own status
		}
		s.log.Error("snapshot save failed", "error", err, "applied_index", m.AppliedIndex, "bytes_sent", cw.sent)
		return toStatus(err)
	}
	tr := &managerpb.SnapshotTrailer{Sha256: cw.sum.Sum(nil), SizeBytes: uint64(size)}
	if err := stream.Send(&managerpb.SnapshotChunk{Chunk: &managerpb.SnapshotChunk_Trailer{Trailer: tr}}); err != nil {
		return err
	}
	s.log.Info("snapshot saved", "applied_index", m.AppliedIndex, "keys", m.Keys, "bytes", size,
		"event_head", m.EventHead, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// chunkWriter sends what the backup writes as SnapshotData messages of
// snapshotChunkSize bytes, hashing it.
type chunkWriter struct {
	stream  managerpb.Manager_SnapshotSaveServer
	backup  *persistence.Backup
	sum     hash.Hash
	buf     []byte
	sent    int64
	sendErr error // the first failed Send
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.sendErr != nil {
		return 0, w.sendErr
	}
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			// A fresh buffer per message: gRPC may hold a sent message.
			w.buf = make([]byte, 0, snapshotChunkSize)
		}
		k := min(len(p), snapshotChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == snapshotChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush sends the buffered bytes, if any.
func (w *chunkWriter) flush() error {
	if w.sendErr != nil || len(w.buf) == 0 {
		return w.sendErr
	}
	w.sum.Write(w.buf)
	err := w.stream.Send(&managerpb.SnapshotChunk{Chunk: &managerpb.SnapshotChunk_Data{Data: &managerpb.SnapshotData{
		Data: w.buf, KeysDone: w.backup.KeysWritten()}}})
	w.sent += int64(len(w.buf))
	w.buf = nil
	if err != nil {
		w.sendErr = err
	}
	return err
}

// auditBackup writes the audit entry "snapshot.save" (who): a backup holds
// every registration token and node credential, so
// taking one is recorded although it changes nothing. Best effort: a
// backup is what an operator needs most when the cluster is in trouble, so
// when the log takes no writes (no quorum) the backup goes on, not
// audited, and the manager logs a warning (docs/design/audit.md).
func (s *Server) auditBackup(ctx context.Context) {
	if s.cfg.Journal == nil {
		return
	}
	audit := auditIntent(ctx, "snapshot.save", map[string]string{"manager": s.cfg.Version.GetManagerVersion()})
	actx, cancel := context.WithTimeout(ctx, poolAppendTimeout)
	defer cancel()
	if _, err := s.cfg.Journal.Append(actx, "", 0, persistence.Change{At: s.cfg.Clock(), Audit: audit}); err != nil {
		s.log.Warn("backup not audited: the audit entry could not be appended", "who", audit.GetWho(), "error", err)
	}
}
