package format_test

import (
	"testing"

	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// TestEventLine_DefinitionDrift: definition_drift prints the manager's
// message, which names the stale instances and both hashes.
func TestEventLine_DefinitionDrift(t *testing.T) {
	ev := &managerpb.EventStreamEvent{LogIndex: 15, Event: &managerpb.EventStreamEvent_DefinitionDrift{DefinitionDrift: &managerpb.DefinitionDrift{
		JobId: &commonpb.JobId{JobId: "j1"}, CurrentHash: 22,
		Message: "job j1: primary on node n1 runs definition hash 11; current 22: restart or migrate to apply"}}}
	want := "#15    definition_drift        job j1: primary on node n1 runs definition hash 11; current 22: restart or migrate to apply"
	if got := format.EventLine(ev); got != want {
		t.Errorf("EventLine = %q\nwant        %q", got, want)
	}
}
