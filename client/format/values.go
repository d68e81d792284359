package format

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// Tags renders tags as "k=v,k2=v2" in key order, or "-" if there are none.
// Keys and values are not quoted or escaped.
func Tags(tags map[string]string) string {
	if len(tags) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + tags[k]
	}
	return strings.Join(parts, ",")
}

// Time renders ts in RFC 3339 in UTC, to the second ("2026-05-04T12:00:00Z"),
// or "-" if ts is nil.
func Time(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// Age renders how long before now ts was, truncated to a whole unit: "12s
// ago" under a minute, "5m ago" under an hour, "3h ago" under 48 hours, "4d
// ago" beyond. A ts after now renders as "just now"; a nil or unset ts (in
// the first second of the Unix epoch, or Go's zero time) as "never".
func Age(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil || ts.AsTime().IsZero() || ts.AsTime().Unix() == 0 {
		return "never"
	}
	d := now.Sub(ts.AsTime())
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// Enum renders an enum value name (as returned by its String method) without
// prefix, in lower case: Enum("NODE_LIFECYCLE_STARTED", "NODE_LIFECYCLE_")
// is "started". If name does not start with prefix, only the case changes.
func Enum(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// Value renders v as the value of a key=value pair: as it is when it is
// non-empty and has no white space, quote, '=' or non-printable character
// (every id and role of the id rules, docs/design/jobs.md#ids), else
// Go-quoted ("my role" → "\"my role\""), so that the pairs of a line stay
// apart for a reader and for a script splitting on spaces. Roles are free
// text, and ids of stores from before the id rules may hold spaces.
func Value(v string) string {
	if v == "" || strings.ContainsFunc(v, func(r rune) bool {
		return r == '"' || r == '=' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) {
		return strconv.Quote(v)
	}
	return v
}
