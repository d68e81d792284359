package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newJobCommand builds "norsk-ctl job".
func newJobCommand() *cobra.Command {
	cmd := withExitCodes(&cobra.Command{
		Use:   "job",
		Short: "Create, inspect, search, start, stop, complete and delete jobs",
		Long: `Jobs are stacks of services that the manager runs on nodes under a role
("primary", "backup", …). A job file is the protojson form of a
norsk.api.manager.Job (see examples/hello-http/job.json).`,
	})
	cmd.AddCommand(
		newJobCreateCommand(),
		newJobUpdateCommand(),
		newJobGetCommand(),
		newJobPlacementCommand(),
		newJobSearchCommand(),
		newJobInstanceCommand("start", "Start a job on a node under a role"),
		newJobInstanceCommand("stop", "Stop the instance of a job running under a role on a node"),
		newJobMigrateCommand(),
		newJobAbortMigrationCommand(),
		newJobIDCommand("complete", "Complete a job: stop every instance; it is not placed again", "completed"),
		newJobIDCommand("delete", "Delete a job", "deleted"),
	)
	return cmd
}

// ctlReadJobFile reads a protojson Job from path (ctlReadProtoFile) and
// requires its id.
func ctlReadJobFile(cmd *cobra.Command, path string) (*managerpb.Job, error) {
	job := &managerpb.Job{}
	if err := ctlReadProtoFile(cmd, path, "job", job); err != nil {
		return nil, err
	}
	if job.GetJobId().GetJobId() == "" {
		return nil, ctlUsagef(`--file %s: the job has no id (set "jobId": {"jobId": "…"})`, path)
	}
	return job, nil
}

// ctlReadProtoFile reads the protojson message m (a "what": job, bundle,
// pool) from path ("-": the command's standard input). Every failure, an
// unreadable file included, is a usage error naming --file, the file and
// the message type.
func ctlReadProtoFile(cmd *cobra.Command, path, what string, m proto.Message) error {
	name := m.ProtoReflect().Descriptor().FullName()
	if path == "" {
		return ctlUsagef("--file is required (a protojson %s, \"-\" for standard input)", name)
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err // the path is in the message already
		}
		return ctlUsagef("--file (-f) %s: cannot read the %s file: %v", path, what, err)
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		return ctlUsagef("--file %s: not a protojson %s: %v", path, name, err)
	}
	return nil
}

// ctlPrintWarnings prints the manager's warnings about a write it
// accepted on standard error, one "warning: ..." line each (a missing
// security group: docs/design/pools.md).
func ctlPrintWarnings(e *ctlEnv, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintln(e.errOut, "warning: "+w)
	}
}

// newJobCreateCommand builds "job create".
func newJobCreateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f JOB.json",
		Short: "Create a job from a protojson file; prints its id and hash",
		Args:  ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			job, err := ctlReadJobFile(e.cmd, file)
			if err != nil {
				return err
			}
			id := job.GetJobId().GetJobId()
			hash, warnings, err := m.CreateJobWarnings(ctx, job)
			if err != nil {
				return ctlAbout(err, "job %s", id)
			}
			ctlPrintWarnings(e, warnings)
			if e.jsonOut {
				return e.printJSON(&managerpb.JobHash{Hash: hash})
			}
			_, err = fmt.Fprintf(e.out, "created job %s (hash %d)\n", id, hash)
			return err
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `job file (protojson norsk.api.manager.Job); "-" reads standard input`)
	return cmd
}

// newJobUpdateCommand builds "job update".
func newJobUpdateCommand() *cobra.Command {
	var file string
	var hash int64
	cmd := &cobra.Command{
		Use:   "update -f JOB.json [--hash N]",
		Short: "Replace a job by the one in a protojson file; prints the new hash",
		Long: `Replace a job by the one in a protojson file. The manager accepts the update
only if the job has not changed since it was read: the file's currentHash,
or --hash, must be the job's current hash (norsk-ctl job get ID shows it).`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			job, err := ctlReadJobFile(e.cmd, file)
			if err != nil {
				return err
			}
			if e.cmd.Flags().Changed("hash") {
				job.CurrentHash = hash
			}
			if job.GetCurrentHash() == 0 {
				return ctlUsagef("the job has no currentHash: pass --hash (norsk-ctl job get %s shows it)", job.GetJobId().GetJobId())
			}
			id := job.GetJobId().GetJobId()
			newHash, warnings, err := m.UpdateJobWarnings(ctx, job)
			if err != nil {
				return ctlAbout(err, "job %s at hash %d", id, job.GetCurrentHash())
			}
			ctlPrintWarnings(e, warnings)
			if e.jsonOut {
				return e.printJSON(&managerpb.JobHash{Hash: newHash})
			}
			_, err = fmt.Fprintf(e.out, "updated job %s (hash %d)\n", id, newHash)
			return err
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `job file (protojson norsk.api.manager.Job); "-" reads standard input`)
	cmd.Flags().Int64Var(&hash, "hash", 0, "the job's current hash (overrides currentHash in the file)")
	return cmd
}

// newJobGetCommand builds "job get".
func newJobGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB_ID",
		Short: "Show a job: definition, state, running instances and history",
		Long: `Show a job: definition, state, running instances and history.

"job update" never restarts a running instance: an instance still running
an older definition is shown as "runs definition hash X; current Y: restart
or migrate to apply" (stop and start it to apply the current one).`,
		Args: ctlArgs("JOB_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			resp, err := m.JobByID(ctx, client.JobID(args[0]))
			if err != nil {
				return ctlAbout(err, "job %s", args[0])
			}
			if e.jsonOut {
				return e.printJSON(resp)
			}
			return writeJobDetails(e.out, resp)
		}),
	}
}

// writeJobDetails renders a JobById answer for a terminal.
func writeJobDetails(w io.Writer, resp *managerpb.JobByIdResponse) error {
	job := resp.GetJob().GetJob()
	var b strings.Builder
	field := func(name, value string) { fmt.Fprintf(&b, "%-13s %s\n", name+":", value) }
	field("Job", job.GetJobId().GetJobId())
	field("State", format.JobState(job.GetState()))
	field("Hash", fmt.Sprint(job.GetCurrentHash()))
	field("Updates", updateStrategyText(job.GetUpdateStrategy()))
	if job.GetDescription() != "" {
		field("Description", job.GetDescription())
	}
	field("Start", format.Time(job.GetStartDateTime()))
	field("Tags", format.Tags(job.GetTags()))
	if ts := job.GetTerminalState(); ts != nil {
		field("Failed", ts.GetFailureReason())
	}
	if t := job.GetProductTemplate(); t != nil {
		field("Template", fmt.Sprintf("%s %s, %d parameters (the worker runs its compose stack)", t.GetName(), t.GetVersion(), len(job.GetProductTemplateParameters())))
	}
	fmt.Fprintf(&b, "Services:\n")
	switch {
	case len(job.GetServices()) == 0 && job.GetProductTemplate() != nil:
		b.WriteString("  (none: the template's)\n")
	case len(job.GetServices()) == 0:
		b.WriteString("  (none)\n")
	}
	for _, s := range job.GetServices() {
		fmt.Fprintf(&b, "  %s\n", format.Service(s))
	}
	fmt.Fprintf(&b, "Instances:\n")
	if len(resp.GetInstances()) == 0 {
		b.WriteString("  (none running)\n")
	}
	for _, rj := range resp.GetInstances() {
		fmt.Fprintf(&b, "  %s on node %s%s\n", rj.GetJobKey().GetRole(), rj.GetNodeId().GetNodeId(), driftNote(job, rj))
	}
	if len(resp.GetMigrations()) > 0 {
		fmt.Fprintf(&b, "Moving:\n")
	}
	for _, mv := range resp.GetMigrations() {
		fmt.Fprintf(&b, "  %s\n", format.MigrationDetails(job.GetJobId().GetJobId(), mv))
	}
	if len(resp.GetLastFailures()) > 0 {
		fmt.Fprintf(&b, "Last failures:\n")
	}
	for _, f := range resp.GetLastFailures() {
		fmt.Fprintf(&b, "  %s on node %s at %s: %s\n", f.GetRole(), f.GetNodeId().GetNodeId(), format.Time(f.GetAt()), f.GetReason())
	}
	fmt.Fprintf(&b, "History:\n")
	for _, h := range resp.GetJob().GetHistoryEntry() {
		ts, text := format.HistoryEntry(h)
		fmt.Fprintf(&b, "  %-20s  %s\n", format.Time(ts), text)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ctlJobSearchFlags are the filters of "job search".
type ctlJobSearchFlags struct {
	tags, tagsNeq, tagsRe, tagsExist, tagsAbsent []string
	ids, idsNeq, idsRe                           []string
	startAt, startAfter, startBefore             string
	startFrom, startUntil                        string
}

// filters turns the flags into JobSearch filters.
func (f *ctlJobSearchFlags) filters() ([]*managerpb.JobFilter, error) {
	var out []*managerpb.JobFilter
	kv := func(flag string, values []string, build func(k, v string) *managerpb.JobFilter) error {
		for _, v := range values {
			k, val, err := ctlSplitKV(flag, v)
			if err != nil {
				return err
			}
			out = append(out, build(k, val))
		}
		return nil
	}
	if err := kv("tag", f.tags, client.TagEq); err != nil {
		return nil, err
	}
	if err := kv("tag-neq", f.tagsNeq, client.TagNeq); err != nil {
		return nil, err
	}
	if err := kv("tag-re", f.tagsRe, client.TagRe); err != nil {
		return nil, err
	}
	for _, k := range f.tagsExist {
		out = append(out, client.TagExists(k))
	}
	for _, k := range f.tagsAbsent {
		out = append(out, client.TagAbsent(k))
	}
	for _, id := range f.ids {
		out = append(out, client.IDEq(client.JobID(id)))
	}
	for _, id := range f.idsNeq {
		out = append(out, client.IDNeq(client.JobID(id)))
	}
	for _, re := range f.idsRe {
		out = append(out, client.IDRe(re))
	}
	dates := []struct {
		flag, value string
		build       func(t time.Time) *managerpb.JobFilter
	}{
		{"start-at", f.startAt, client.DateEq},
		{"start-after", f.startAfter, client.DateGt},
		{"start-before", f.startBefore, client.DateLt},
		{"start-from", f.startFrom, client.DateGte},
		{"start-until", f.startUntil, client.DateLte},
	}
	for _, d := range dates {
		if d.value == "" {
			continue
		}
		t, err := ctlParseTime(d.flag, d.value)
		if err != nil {
			return nil, err
		}
		out = append(out, d.build(t))
	}
	return out, nil
}

// newJobSearchCommand builds "job search".
func newJobSearchCommand() *cobra.Command {
	f := &ctlJobSearchFlags{}
	cmd := &cobra.Command{
		Use:   "search [filters]",
		Short: "List the jobs matching every filter given (none: all jobs)",
		Long: `List the jobs matching every filter given (none: all jobs). Filters may be
repeated; all must match. Times are RFC 3339 (2026-01-02T15:04:05Z) and
compare the job's start time.`,
		Example: `  norsk-ctl job search --tag example=hello-http
  norsk-ctl job search --tag-re region='^eu-' --start-after 2026-01-01T00:00:00Z`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			filters, err := f.filters()
			if err != nil {
				return err
			}
			jobs, err := m.JobSearch(ctx, filters...)
			if err != nil {
				return err
			}
			if e.jsonOut {
				return ctlPrintJSONList(e, jobs)
			}
			return writeJobTable(e.out, jobs)
		}),
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.tags, "tag", nil, "tag equals: key=value (repeatable)")
	fl.StringArrayVar(&f.tagsNeq, "tag-neq", nil, "tag absent or different: key=value")
	fl.StringArrayVar(&f.tagsRe, "tag-re", nil, "tag matches a regular expression: key=regexp")
	fl.StringArrayVar(&f.tagsExist, "tag-exists", nil, "tag present: key")
	fl.StringArrayVar(&f.tagsAbsent, "tag-absent", nil, "tag absent: key")
	fl.StringArrayVar(&f.ids, "id", nil, "job id equals")
	fl.StringArrayVar(&f.idsNeq, "id-neq", nil, "job id differs")
	fl.StringArrayVar(&f.idsRe, "id-re", nil, "job id matches a regular expression")
	fl.StringVar(&f.startAt, "start-at", "", "starts exactly at this time")
	fl.StringVar(&f.startAfter, "start-after", "", "starts after this time")
	fl.StringVar(&f.startBefore, "start-before", "", "starts before this time")
	fl.StringVar(&f.startFrom, "start-from", "", "starts at or after this time")
	fl.StringVar(&f.startUntil, "start-until", "", "starts at or before this time")
	return cmd
}

// writeJobTable renders JobSearch results as a table.
func writeJobTable(w io.Writer, jobs []*managerpb.CurrentJob) error {
	if len(jobs) == 0 {
		_, err := fmt.Fprintln(w, "no matching jobs")
		return err
	}
	rows := make([][]string, 0, len(jobs))
	for _, cj := range jobs {
		j := cj.GetJob()
		rows = append(rows, []string{
			j.GetJobId().GetJobId(), format.JobState(j.GetState()), format.Time(j.GetStartDateTime()),
			format.Placements(cj.GetInstances()), format.Tags(j.GetTags()),
		})
	}
	return ctlTable(w, []string{"JOB ID", "STATE", "START", "INSTANCES", "TAGS"}, rows)
}

// newJobInstanceCommand builds "job start" and "job stop".
func newJobInstanceCommand(verb, short string) *cobra.Command {
	var role, node string
	cmd := &cobra.Command{
		Use:   verb + " JOB_ID --node NODE_ID [--role ROLE]",
		Short: short,
		Args:  ctlArgs("JOB_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			if strings.TrimSpace(node) == "" {
				return ctlUsagef("--node is required")
			}
			if strings.TrimSpace(role) == "" {
				return ctlUsagef("--role must not be empty")
			}
			id := client.JobID(args[0])
			call, done := m.StartJob, "start requested:"
			if verb == "stop" {
				call, done = m.StopJob, "stop requested:"
			}
			if err := call(ctx, id, role, client.NodeID(node)); err != nil {
				return ctlAbout(err, "job %s as %s on node %s", id, role, node)
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "%s job %s as %s on node %s (follow with: norsk-ctl events)\n", done, id, role, node)
			return err
		}),
	}
	cmd.Flags().StringVar(&role, "role", "primary", `role of the instance ("primary", "backup", …)`)
	cmd.Flags().StringVar(&node, "node", "", "node id (norsk-ctl node list)")
	return cmd
}

// newJobIDCommand builds the job commands that take only a job id.
func newJobIDCommand(verb, short, done string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " JOB_ID",
		Short: short,
		Args:  ctlArgs("JOB_ID"),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error {
			id := client.JobID(args[0])
			call := m.CompleteJob
			if verb == "delete" {
				call = m.DeleteJob
			}
			if err := call(ctx, id); err != nil {
				return ctlAbout(err, "job %s", id)
			}
			if e.jsonOut {
				return e.printJSON(&emptypb.Empty{})
			}
			_, err := fmt.Fprintf(e.out, "%s job %s\n", done, id)
			return err
		}),
	}
}
