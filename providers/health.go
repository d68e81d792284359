package providers

import (
	"sort"
	"sync"
	"time"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Health tracks a provider's health per location (AWS region, OCI
// availability domain) from the outcomes of its calls:
//
//   - FAILED after failedAfter failures (capacity or outage) in the
//     location with no successful launch between them and none more than
//     window apart;
//   - UNSTABLE after any failure or throttling within Window;
//   - HEALTHY otherwise (and again once Window passes without one).
//
// A change of any location's health calls the OnChange function given to
// NewHealth (provider_health_change). Safe for concurrent use.
type Health struct {
	window      time.Duration
	failedAfter int
	now         func() time.Time

	mu       sync.Mutex
	loc      map[string]*locHealth
	onChange func(location string, h managerpb.Health)
}

type locHealth struct {
	consecutive int // failures in a row
	lastBad     time.Time
	reported    managerpb.Health
}

// NewHealth returns a tracker: window is how long a failure or throttling
// keeps a location UNSTABLE (default 5 minutes), failedAfter how many
// consecutive failures make it FAILED (default 3). now may be nil
// (time.Now); onChange may be nil.
func NewHealth(window time.Duration, failedAfter int, now func() time.Time, onChange func(location string, h managerpb.Health)) *Health {
	if window <= 0 {
		window = 5 * time.Minute
	}
	if failedAfter <= 0 {
		failedAfter = 3
	}
	if now == nil {
		now = time.Now
	}
	return &Health{window: window, failedAfter: failedAfter, now: now, onChange: onChange, loc: map[string]*locHealth{}}
}

// Record notes the outcome of one call in location.
func (h *Health) Record(location string, o Outcome) {
	h.mu.Lock()
	l := h.loc[location]
	if l == nil {
		l = &locHealth{}
		h.loc[location] = l
	}
	now := h.now()
	if !l.lastBad.IsZero() && now.Sub(l.lastBad) >= h.window {
		l.consecutive = 0 // the failures are old news
	}
	switch o {
	case OK:
	case Launched:
		l.consecutive = 0
	case Throttled:
		l.lastBad = now
	default:
		l.consecutive++
		l.lastBad = now
	}
	changed, cur := h.refreshLocked(location, l, now)
	onChange := h.onChange
	h.mu.Unlock()
	if changed && onChange != nil {
		onChange(location, cur)
	}
}

// Seed sets location's health as last published (by this or another
// manager, before a restart) without calling OnChange: a location seeded
// UNSTABLE or FAILED counts as having failed now, so it recovers (and the
// recovery is published) once the window passes without failures.
func (h *Health) Seed(location string, health managerpb.Health) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := &locHealth{reported: health}
	if health != managerpb.Health_HEALTHY {
		l.lastBad = h.now()
		if health == managerpb.Health_FAILED {
			l.consecutive = h.failedAfter
		}
	}
	h.loc[location] = l
}

// SetOnChange replaces the function called (outside the tracker's lock,
// on the goroutine that recorded the outcome) when a location's health
// changes; nil for none.
func (h *Health) SetOnChange(f func(location string, h managerpb.Health)) {
	h.mu.Lock()
	h.onChange = f
	h.mu.Unlock()
}

func (h *Health) refreshLocked(location string, l *locHealth, now time.Time) (bool, managerpb.Health) {
	if !l.lastBad.IsZero() && now.Sub(l.lastBad) >= h.window {
		l.consecutive = 0 // the failures are old news
	}
	cur := managerpb.Health_HEALTHY
	switch {
	case l.consecutive >= h.failedAfter:
		cur = managerpb.Health_FAILED
	case !l.lastBad.IsZero() && now.Sub(l.lastBad) < h.window:
		cur = managerpb.Health_UNSTABLE
	}
	if cur == l.reported {
		return false, cur
	}
	l.reported = cur
	return true, cur
}

// Snapshot returns every known location's health, sorted by location;
// locations recover to HEALTHY here once their window has passed.
func (h *Health) Snapshot() []LocationHealth {
	h.mu.Lock()
	now := h.now()
	var out []LocationHealth
	var changes []LocationHealth
	for loc, l := range h.loc {
		if changed, cur := h.refreshLocked(loc, l, now); changed {
			changes = append(changes, LocationHealth{Location: loc, Health: cur})
		}
		out = append(out, LocationHealth{Location: loc, Health: l.reported})
	}
	onChange := h.onChange
	h.mu.Unlock()
	if onChange != nil {
		for _, c := range changes {
			onChange(c.Location, c.Health)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Location < out[j].Location })
	return out
}

// LocationHealth is one location's health.
type LocationHealth struct {
	Location string
	Health   managerpb.Health
}
