package acl

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
)

// recheckStream is the stream a handler of a streaming call accepted with
// a token gets: every message it sends first checks that the token is
// still known to this manager's replica and unexpired. A stream lives as
// long as its client wants (EventStream for days), so the check at open
// alone would let a revoked or expired token's holder keep reading every
// event. A failed check is the Unauthenticated status the handler then
// returns, which ends the stream; nothing more is sent on it. The cost is
// one local index read per message (no barrier: as for a new call, the
// revocation holds once this replica has applied it).
//
// A stream that sends nothing is not ended by a revocation: it delivers
// nothing either, and its next message is refused.
type recheckStream struct {
	callerStream
	a   *Authorizer
	tok *internalpb.AclTokenRecord
}

// SendMsg sends m if the stream's token is still valid, else returns
// Unauthenticated without sending.
func (s *recheckStream) SendMsg(m any) error {
	if err := s.recheck(); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}

// recheck is nil while the token the stream was opened with is stored and
// unexpired.
func (s *recheckStream) recheck() error {
	if err := s.a.checkExpiry(s.tok); err != nil {
		return err
	}
	t := s.tok.GetToken()
	cur, err := s.a.cfg.Tokens.FindToken(s.tok.GetSecretHash())
	switch {
	case errors.Is(err, persistence.ErrNotFound) || (err == nil && cur.GetToken().GetAccessorId() != t.GetAccessorId()):
		s.a.cfg.Logger.Info("stream ended: its acl token was revoked", "token", t.GetAccessorId(), "token_name", t.GetName())
		return status.Errorf(codes.Unauthenticated, "ACL token %q (%s) was revoked while this stream was open", t.GetName(), t.GetAccessorId())
	case err != nil:
		return status.Errorf(codes.Internal, "read ACL tokens: %v", err)
	}
	return nil
}
