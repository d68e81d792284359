package gateway

import (
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// checkPoolDisconnect checks pool.disconnect (issue 21 §10): each field
// UNSPECIFIED or one of its named values. A number the enum does not
// name (a client built from a newer proto, or a typo in JSON given as a
// number) is InvalidArgument naming the field, rather than stored and
// read as the default.
func checkPoolDisconnect(d *managerpb.PoolDisconnect) error {
	if d == nil {
		return nil
	}
	if _, ok := managerpb.PoolDisconnect_Fence_name[int32(d.GetFence())]; !ok {
		return invalid("pool.disconnect.fence", "is %d; it must be FENCE_ON or FENCE_OFF (unset: FENCE_ON)", int32(d.GetFence()))
	}
	if _, ok := managerpb.PoolDisconnect_Replace_name[int32(d.GetReplace())]; !ok {
		return invalid("pool.disconnect.replace", "is %d; it must be REPLACE_IMMEDIATELY or REPLACE_WAIT (unset: REPLACE_IMMEDIATELY)",
			int32(d.GetReplace()))
	}
	return nil
}

// withDisconnectDefaults stores the disconnect settings that apply
// (persistence.PoolDisconnect), so that GetPool shows them.
func withDisconnectDefaults(p *managerpb.Pool) {
	p.Disconnect = persistence.PoolDisconnect(p)
}
