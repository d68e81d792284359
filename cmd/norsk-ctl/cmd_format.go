package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ctlJSON renders msg as protojson, normalised by encoding/json so that the
// output is stable (protojson deliberately varies its whitespace). indent ""
// gives one line.
func ctlJSON(msg proto.Message, indent string) ([]byte, error) {
	raw, err := protojson.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode %s as JSON: %w", msg.ProtoReflect().Descriptor().FullName(), err)
	}
	var buf bytes.Buffer
	if indent == "" {
		err = json.Compact(&buf, raw)
	} else {
		err = json.Indent(&buf, raw, "", indent)
	}
	if err != nil {
		return nil, fmt.Errorf("normalise JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// printJSON writes msg as indented protojson and a newline.
func (e *ctlEnv) printJSON(msg proto.Message) error {
	b, err := ctlJSON(msg, "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.out, "%s\n", b)
	return err
}

// ctlPrintJSONList writes msgs as an indented JSON array of protojson objects.
func ctlPrintJSONList[T proto.Message](e *ctlEnv, msgs []T) error {
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		b, err := ctlJSON(m, "")
		if err != nil {
			return err
		}
		parts = append(parts, string(b))
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte("["+strings.Join(parts, ",")+"]"), "", "  "); err != nil {
		return fmt.Errorf("normalise JSON: %w", err)
	}
	_, err := fmt.Fprintf(e.out, "%s\n", buf.Bytes())
	return err
}

// ctlTable writes rows under header, aligned in columns.
func ctlTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
