package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
)

// Metadata is a template version's template.json (optional; all fields
// optional, unknown fields refused):
//
//	{
//	  "description": "two probes, web waits for api's healthcheck",
//	  "requiredParameters": ["STREAM_KEY"],
//	  "launchDefaults": {"log": {"level": "info"}}
//	}
//
// description is for people. requiredParameters are variables a job must
// set (in product_template_parameters, or the template's .env gives them):
// each unset or empty one fails the job (ErrInvalidJob naming it), as a
// ${VAR:?} in the compose file would. launchDefaults is the author's
// launch config, the base of the fusion (launch.go); it must be a JSON
// object. No launchDefaults: {}.
type Metadata struct {
	Description        string          `json:"description,omitempty"`
	RequiredParameters []string        `json:"requiredParameters,omitempty"`
	LaunchDefaults     json.RawMessage `json:"launchDefaults,omitempty"`
}

// variablePattern is an interpolation variable's name, as compose-go's
// template package accepts it unbraced.
var variablePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseMetadata parses a template.json strictly: one JSON object, no
// unknown fields, requiredParameters valid variable names, launchDefaults
// an object. Errors name the field.
func ParseMetadata(raw []byte) (Metadata, error) {
	var m Metadata
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Metadata{}, fmt.Errorf("%s: %w", MetadataFile, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Metadata{}, fmt.Errorf("%s: data after the JSON object", MetadataFile)
	}
	for i, p := range m.RequiredParameters {
		if !variablePattern.MatchString(p) {
			return Metadata{}, fmt.Errorf("%s: requiredParameters[%d] %q is not a variable name (letters, digits, '_', not starting with a digit)", MetadataFile, i, p)
		}
	}
	if len(m.LaunchDefaults) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(m.LaunchDefaults, &obj); err != nil || obj == nil {
			return Metadata{}, fmt.Errorf("%s: launchDefaults must be a JSON object", MetadataFile)
		}
	}
	return m, nil
}
