package worker

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"google.golang.org/protobuf/proto"
)

// infoBuffer keeps the job info (output lines, container events, compose
// stages) published while no session is current, so that the next
// verified session gets it in order instead of it being lost. It is
// bounded per (job, role), in messages and bytes, so that one chatty job
// cannot evict the last lines of a quiet one (the lines that explain why
// that one failed), and in total bytes, so that a worker with many jobs
// and no manager for days stays bounded; beyond the total the job holding
// the most bytes loses its oldest line first. The oldest lines go: the
// newest explain the present. A (job, role) that lost lines gets one
// synthetic "N job info lines dropped" container_event ahead of the lines
// kept.
//
// Not safe for concurrent use: the hub guards it with its mutex.
type infoBuffer struct {
	lines      int // per (job, role): most messages kept (OfflineInfoLines)
	bytes      int // per (job, role): most bytes kept (OfflineInfoBytes)
	totalBytes int // across every (job, role) (OfflineInfoTotalBytes)

	ord   uint64 // publication order of the last message added
	total int    // bytes kept across every key
	keys  map[JobKey]*keyInfo
}

// keyInfo is the buffered info of one (job, role), oldest first.
type keyInfo struct {
	entries []bufferedInfo
	bytes   int
	dropped int          // messages dropped since the last flush
	last    bufferedInfo // the last message dropped (its position and time place the note)
}

// bufferedInfo is one buffered job info message, or the note about
// dropped messages (dropped > 0).
type bufferedInfo struct {
	ord     uint64 // publication order among job info
	after   uint64 // the hub's lifecycle seq when published: it follows that event
	ev      Event
	size    int // bytes (proto size of the message)
	dropped int // > 0: ev is the note saying this many were dropped
}

func newInfoBuffer(lines, bytes, totalBytes int) *infoBuffer {
	return &infoBuffer{lines: lines, bytes: bytes, totalBytes: totalBytes, keys: map[JobKey]*keyInfo{}}
}

// add buffers ev (an EventInfo), published after lifecycle event seq
// after. It reports whether a (job, role) began losing messages (its first
// drop since the last take), for the caller to log.
func (b *infoBuffer) add(ev Event, after uint64) (firstDrop bool) {
	b.ord++
	return b.push(bufferedInfo{ord: b.ord, after: after, ev: ev, size: proto.Size(ev.Info)})
}

// push appends e to its key's buffer and trims to the bounds.
func (b *infoBuffer) push(e bufferedInfo) (firstDrop bool) {
	k := b.key(e.ev.Key)
	k.entries = append(k.entries, e)
	k.bytes += e.size
	b.total += e.size
	for len(k.entries) > 0 && (len(k.entries) > b.lines || k.bytes > b.bytes) {
		firstDrop = b.dropOldest(k) || firstDrop
	}
	for b.total > b.totalBytes {
		k := b.largest()
		if len(k.entries) == 0 {
			break // only zero-size messages left; cannot happen
		}
		firstDrop = b.dropOldest(k) || firstDrop
	}
	return firstDrop
}

func (b *infoBuffer) key(key JobKey) *keyInfo {
	k := b.keys[key]
	if k == nil {
		k = &keyInfo{}
		b.keys[key] = k
	}
	return k
}

// dropOldest drops k's oldest message; true if it is k's first drop.
func (b *infoBuffer) dropOldest(k *keyInfo) bool {
	e := k.entries[0]
	k.entries[0] = bufferedInfo{} // let the message be collected
	k.entries = k.entries[1:]
	k.bytes -= e.size
	b.total -= e.size
	k.dropped++
	k.last = e
	return k.dropped == 1
}

// largest returns the key holding the most bytes (b.total > 0).
func (b *infoBuffer) largest() *keyInfo {
	var best *keyInfo
	for _, k := range b.keys {
		if best == nil || k.bytes > best.bytes {
			best = k
		}
	}
	return best
}

// droppedTotal returns how many messages have been dropped since the last
// take.
func (b *infoBuffer) droppedTotal() int {
	n := 0
	for _, k := range b.keys {
		n += k.dropped
	}
	return n
}

// take empties the buffer and returns what it held in publication order,
// each key's note (if it lost messages) just before its first message kept,
// or where its last dropped message was if it kept none.
func (b *infoBuffer) take() []bufferedInfo {
	var out []bufferedInfo
	for key, k := range b.keys {
		if k.dropped > 0 {
			at := k.last
			if len(k.entries) > 0 {
				at = k.entries[0]
			}
			out = append(out, b.note(key, k.dropped, at))
		}
		out = append(out, k.entries...)
	}
	slices.SortStableFunc(out, func(x, y bufferedInfo) int {
		if x.ord != y.ord {
			return cmp.Compare(x.ord, y.ord)
		}
		return cmp.Compare(notNote(x), notNote(y)) // a note goes before the message it shares a position with
	})
	b.keys, b.total = map[JobKey]*keyInfo{}, 0
	return out
}

// requeue puts back messages taken but not sent (a session that ended
// before sending its backlog), ahead of what was buffered since; a note
// becomes a drop count again.
func (b *infoBuffer) requeue(items []bufferedInfo) {
	newer := b.take()
	for _, e := range slices.Concat(items, newer) {
		if e.dropped > 0 {
			k := b.key(e.ev.Key)
			k.dropped += e.dropped
			k.last = e
			continue
		}
		b.push(e)
	}
}

// note returns the synthetic message saying that n messages of key were
// dropped, placed at at's position.
func (b *infoBuffer) note(key JobKey, n int, at bufferedInfo) bufferedInfo {
	ts := time.Now()
	if t := at.ev.Info.GetTimestamp(); t != nil {
		ts = t.AsTime()
	}
	ev := NewInfo(key, ts)
	ev.Info.Message = &commonpb.JobInfoMessage_ContainerEvent{ContainerEvent: &commonpb.JobInfoContainerEvent{
		Text: fmt.Sprintf("%d job info lines dropped while no manager session was up (the worker keeps the last %d lines, %d KiB, of each job)",
			n, b.lines, b.bytes/1024),
	}}
	return bufferedInfo{ord: at.ord, after: at.after, ev: ev, size: proto.Size(ev.Info), dropped: n}
}

func notNote(e bufferedInfo) uint64 {
	if e.dropped > 0 {
		return 0
	}
	return 1
}
