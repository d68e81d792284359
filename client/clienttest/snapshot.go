package clienttest

import (
	"crypto/sha256"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// snapshotChunk is the data size of the fake's SnapshotData messages:
// small, so that tests see several.
const snapshotChunk = 1000

// snapshotState is the backup SnapshotSave streams.
type snapshotState struct {
	mu      sync.Mutex
	set     bool
	header  *managerpb.SnapshotHeader
	file    []byte
	trailer *managerpb.SnapshotTrailer
}

// SetSnapshot makes SnapshotSave stream header, then file in chunks of
// 1000 bytes, then trailer; a nil trailer is computed from file (its
// SHA-256 and size), a non-nil one is sent as given (to test a client's
// checks). Until it is called SnapshotSave answers Unimplemented. The
// fake does not look inside file.
func (m *Manager) SetSnapshot(header *managerpb.SnapshotHeader, file []byte, trailer *managerpb.SnapshotTrailer) {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	if trailer == nil {
		sum := sha256.Sum256(file)
		trailer = &managerpb.SnapshotTrailer{Sha256: sum[:], SizeBytes: uint64(len(file))}
	}
	m.snap.set, m.snap.header, m.snap.file, m.snap.trailer = true, proto.Clone(header).(*managerpb.SnapshotHeader), append([]byte(nil), file...), trailer
}

// SnapshotSave streams what SetSnapshot set, or fails with an error
// injected with Fail("SnapshotSave", …).
func (m *Manager) SnapshotSave(_ *managerpb.SnapshotSaveRequest, stream managerpb.Manager_SnapshotSaveServer) error {
	m.mu.Lock()
	err := m.injectedLocked("SnapshotSave")
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.snap.mu.Lock()
	set, hdr, file, tr := m.snap.set, m.snap.header, m.snap.file, m.snap.trailer
	m.snap.mu.Unlock()
	if !set {
		return status.Error(codes.Unimplemented, "clienttest: no snapshot set (SetSnapshot)")
	}
	if err := stream.Send(&managerpb.SnapshotChunk{Chunk: &managerpb.SnapshotChunk_Header{Header: hdr}}); err != nil {
		return err
	}
	for off := 0; off < len(file); off += snapshotChunk {
		end := min(off+snapshotChunk, len(file))
		keys := hdr.GetKeys() * uint64(end) / uint64(len(file))
		if err := stream.Send(&managerpb.SnapshotChunk{Chunk: &managerpb.SnapshotChunk_Data{Data: &managerpb.SnapshotData{
			Data: file[off:end], KeysDone: keys}}}); err != nil {
			return err
		}
	}
	return stream.Send(&managerpb.SnapshotChunk{Chunk: &managerpb.SnapshotChunk_Trailer{Trailer: tr}})
}
