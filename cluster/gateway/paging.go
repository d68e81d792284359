package gateway

import (
	"encoding/base64"
	"errors"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Listings are paged (docs/design/protocol.md, "Paging"; issue 21 §3): an
// answer holds at most the page size a caller asks for, and never more
// than the reply budget in bytes, whatever it asks. Entries left over are
// signalled by next_page_token, the key of the last entry sent; the next
// page starts after it. A caller that asks nothing (a 1.0.384 client) gets
// one answer of the same shape as before: everything, when it fits.
const (
	// DefaultMaxListReplyBytes is the default reply budget of one page:
	// 4 MiB, the receive limit of a default grpc-go or @grpc/grpc-js
	// client, less room for the answer's other fields and gRPC's framing.
	DefaultMaxListReplyBytes = 4<<20 - 64<<10
	// replyReserve is kept free of entries below a send limit given in
	// Config.MaxSendMsgSize.
	replyReserve = 64 << 10
)

// errPageFull stops a store scan once a page is full.
var errPageFull = errors.New("page full")

// pager collects one page of a listing in key order.
type pager struct {
	// kind names the listing in its tokens ("nodes", "slots", …): a
	// token of one listing is refused by another.
	kind string
	// after is the key of the previous page's last entry ("" from the
	// start): entries up to it are skipped.
	after string
	// size is the most entries a page takes (0: no count limit); budget
	// the most bytes.
	size, budget int
	n, used      int
	last         string
	// next is the answer's next_page_token, set once an entry did not fit.
	next string
}

// newPager reads a request's page_size and page_token for listing kind;
// budget is the page's byte budget (Server.listBudget). InvalidArgument
// naming page_token for a token not made by this listing.
func newPager(kind string, size uint32, token string, budget int) (*pager, error) {
	p := &pager{kind: kind, size: int(size), budget: budget}
	if token == "" {
		return p, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	key, ok := strings.CutPrefix(string(raw), kind+"\x00")
	if err != nil || !ok || key == "" {
		return nil, invalid("page_token", "is not a next_page_token of this listing (%s); pass the one the previous answer carried, or none for the first page", kind)
	}
	p.after = key
	return p, nil
}

// skip reports whether the entry with key belongs to an earlier page.
func (p *pager) skip(key string) bool { return p.after != "" && key <= p.after }

// fits reports whether m, the entry with key, goes on this page, and
// counts it if so. The first entry of a page always fits (a page makes
// progress); past the page size or the byte budget, fits returns false
// and sets the next page's token to start after the last entry taken.
func (p *pager) fits(key string, m proto.Message) bool {
	// The entry's bytes in the answer: tag, length and body.
	n := proto.Size(m)
	n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(n))
	if p.n > 0 && (p.size > 0 && p.n >= p.size || p.used+n > p.budget) {
		p.next = base64.RawURLEncoding.EncodeToString([]byte(p.kind + "\x00" + p.last))
		return false
	}
	p.n++
	p.used += n
	p.last = key
	return true
}

// done maps a scan's error: errPageFull (the page is full) is no error.
func (p *pager) done(err error) error {
	if errors.Is(err, errPageFull) {
		return nil
	}
	return err
}

// listBudget is the byte budget of one page of a listing: the default
// client's receive limit (DefaultMaxListReplyBytes), or less when the
// server's own send limit (Config.MaxSendMsgSize) is smaller.
func (s *Server) listBudget() int {
	b := s.cfg.MaxListReplyBytes
	if b <= 0 {
		b = DefaultMaxListReplyBytes
	}
	if m := s.cfg.MaxSendMsgSize; m > 0 {
		b = min(b, max(m-replyReserve, m/2))
	}
	return b
}
