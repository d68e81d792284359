package template

import (
	"bytes"
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/norsk-oss/norsk-manager/worker"
)

// FuseLaunchConfig fuses a job's launch config (issue 14 §1): start from
// the template's launchDefaults (template.json; {} when empty), apply the
// job's template_launch_defaults_json as an RFC 7396 merge patch when set
// (the author tier as the manager forwards it), then its
// launch_config_json (the operator's) the same way; a tier that is nil or
// blank is skipped. It returns the result
// as compact JSON. A tier that is not valid JSON fails with ErrInvalidJob
// naming the field. The result has its object keys sorted. Patches follow RFC 7396 exactly: null deletes a key, a
// non-object patch replaces the whole document.
func FuseLaunchConfig(defaults []byte, authorTier, operatorTier *string) ([]byte, error) {
	doc := []byte("{}")
	if len(bytes.TrimSpace(defaults)) > 0 {
		if !json.Valid(defaults) {
			return nil, fmt.Errorf("%w: %s launchDefaults is not valid JSON", worker.ErrInvalidJob, MetadataFile)
		}
		doc = defaults
	}
	tiers := []struct {
		field string
		patch *string
	}{{"template_launch_defaults_json", authorTier}, {"launch_config_json", operatorTier}}
	for _, t := range tiers {
		if t.patch == nil || len(bytes.TrimSpace([]byte(*t.patch))) == 0 {
			continue // unset, or set to "" (as unset)
		}
		p := []byte(*t.patch)
		if !json.Valid(p) {
			return nil, fmt.Errorf("%w: %s is not valid JSON", worker.ErrInvalidJob, t.field)
		}
		merged, err := jsonpatch.MergePatch(doc, p)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: merge patch: %w", worker.ErrInvalidJob, t.field, err)
		}
		doc = merged
	}
	return canonicalJSON(doc)
}

// canonicalJSON re-encodes doc compactly with object keys sorted (numbers
// kept as written), so that the same tiers always give the same bytes.
func canonicalJSON(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: fused launch config: %w", worker.ErrInvalidJob, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: fused launch config: %w", worker.ErrInvalidJob, err)
	}
	return out, nil
}
