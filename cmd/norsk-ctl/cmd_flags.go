package main

import (
	"strings"
	"time"
)

// ctlParseTags turns the k=v values of the flag named flag into a map; nil
// if there are none. A value without "=" or with an empty key is a usage
// error naming the flag; a repeated key keeps the last value.
func ctlParseTags(flag string, values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	tags := make(map[string]string, len(values))
	for _, v := range values {
		k, val, err := ctlSplitKV(flag, v)
		if err != nil {
			return nil, err
		}
		tags[k] = val
	}
	return tags, nil
}

// ctlSplitKV splits one k=v value of the flag named flag.
func ctlSplitKV(flag, v string) (string, string, error) {
	k, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return "", "", ctlUsagef("--%s: %q is not key=value", flag, v)
	}
	return k, val, nil
}

// ctlParseTime parses the RFC 3339 value of the flag named flag.
func ctlParseTime(flag, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, ctlUsagef("--%s: %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", flag, v)
	}
	return t, nil
}

// ctlShellQuote quotes s for a POSIX shell when it contains anything but
// letters, digits and -_.:=/,+@%.
func ctlShellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:=/,+@%", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
