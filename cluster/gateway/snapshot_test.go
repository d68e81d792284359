package gateway

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// blockingStream is a SnapshotSave stream whose Send blocks, after the
// header, until release is closed.
type blockingStream struct {
	grpc.ServerStream
	ctx     context.Context
	header  chan struct{} // closed when the header was sent
	release chan struct{}
	data    bytes.Buffer
	trailer *managerpb.SnapshotTrailer
}

func (s *blockingStream) Context() context.Context { return s.ctx }

func (s *blockingStream) Send(c *managerpb.SnapshotChunk) error {
	switch x := c.GetChunk().(type) {
	case *managerpb.SnapshotChunk_Header:
		close(s.header)
		return nil
	case *managerpb.SnapshotChunk_Data:
		<-s.release
		s.data.Write(x.Data.GetData())
	case *managerpb.SnapshotChunk_Trailer:
		s.trailer = x.Trailer
	}
	return nil
}

// TestServer_SnapshotSave_OneAtATime: while one backup streams, a second
// is refused with ResourceExhausted; once it ends, the next is served, and
// the data is a backup that verifies.
func TestServer_SnapshotSave_OneAtATime(t *testing.T) {
	store, _ := persistence.TestStore(t)
	s := New(Config{Store: store})
	first := &blockingStream{ctx: context.Background(), header: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- s.SnapshotSave(&managerpb.SnapshotSaveRequest{}, first) }()
	<-first.header
	second := &blockingStream{ctx: context.Background(), header: make(chan struct{}), release: make(chan struct{})}
	err := s.SnapshotSave(&managerpb.SnapshotSaveRequest{}, second)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second SnapshotSave = %v, want ResourceExhausted", err)
	}
	close(first.release)
	if err := <-done; err != nil {
		t.Fatalf("first SnapshotSave: %v", err)
	}
	if _, err := persistence.VerifyBackup(bytes.NewReader(first.data.Bytes())); err != nil {
		t.Fatalf("the streamed backup does not verify: %v", err)
	}
	if first.trailer.GetSizeBytes() != uint64(first.data.Len()) {
		t.Errorf("trailer size %d, streamed %d", first.trailer.GetSizeBytes(), first.data.Len())
	}
	third := &blockingStream{ctx: context.Background(), header: make(chan struct{}), release: make(chan struct{})}
	close(third.release)
	if err := s.SnapshotSave(&managerpb.SnapshotSaveRequest{}, third); err != nil {
		t.Fatalf("SnapshotSave after the first ended: %v", err)
	}
}
