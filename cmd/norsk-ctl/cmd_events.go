package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-oss/norsk-manager/client"
	"github.com/norsk-oss/norsk-manager/client/format"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// newEventsCommand builds "norsk-ctl events".
func newEventsCommand() *cobra.Command {
	var window time.Duration
	var resumeFrom uint64
	var jsonLines bool
	cmd := &cobra.Command{
		Use:   "events [--window 1h] [--resume-from N] [--json]",
		Short: "Follow the manager's event stream until interrupted",
		Long: `Follow the manager's event stream until interrupted (Ctrl-C), one line per
event: the time it happened (UTC), log index, kind and the event's key
fields. The time is the manager's record of the change (its commit time),
so a replay (--resume-from, or a reconnect) prints when each event
happened, not when it arrived; snapshot events and initial_data_complete
carry the time the snapshot was read. A manager too old to send event
times gets the time received instead.

Without --resume-from the stream starts with a snapshot (running nodes,
active jobs) ending in initial_data_complete, then live events. With
--resume-from N it continues after log index N. A broken stream is resumed
automatically, so every event is printed exactly once; a stream_reset line
means the resume point was lost and a fresh snapshot follows.

If no manager of --manager-url answers at the start, events fails at once
(exit code 6). Once a manager has answered, it never gives up: it
reconnects, to any manager listed, until interrupted. Following until
Ctrl-C is its normal end, so an interrupted events exits with code 0 (not
130) and prints the index to continue from on standard error.

--json prints each event as one line of protojson instead.`,
		Example: `  norsk-ctl events
  norsk-ctl events --resume-from 42 --json | jq .`,
		Args: ctlArgs(),
		RunE: ctlWithClient(func(ctx context.Context, e *ctlEnv, m *client.NorskManager, _ []string) error {
			if window < 0 {
				return ctlUsagef("--window must not be negative")
			}
			settings := client.EventStreamSettings{PendingWindow: window}
			if e.cmd.Flags().Changed("resume-from") {
				settings.ResumeFromIndex = &resumeFrom
			}
			jsonOut := jsonLines || e.jsonOut
			settings.OnEvent = func(ev *managerpb.EventStreamEvent) error {
				if jsonOut {
					b, err := ctlJSON(ev, "")
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(e.out, "%s\n", b)
					return err
				}
				at := ev.GetEventTime()
				if at == nil { // a manager older than event_time
					at = timestamppb.New(e.now())
				}
				_, err := fmt.Fprintf(e.out, "%s  %s\n", format.Time(at), format.EventLine(ev))
				return err
			}
			sub, err := m.Subscribe(settings)
			if err != nil {
				return ctlUsagef("%v", err)
			}
			if err := ctlReachable(ctx, m); err != nil {
				if ctx.Err() != nil {
					return nil // interrupted before anything was followed
				}
				return err
			}
			err = sub.Run(ctx)
			if last, ok := sub.LastIndex(); ok && errors.Is(err, context.Canceled) {
				fmt.Fprintf(e.errOut, "stopped after log index %d (continue with: norsk-ctl events --resume-from %d)\n", last, last)
			}
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}),
	}
	cmd.Long += "\n" + ctlFollowExitCodesHelp
	cmd.Flags().DurationVar(&window, "window", time.Hour, "pending window: jobs starting within it are reported as job_pending")
	cmd.Flags().Uint64Var(&resumeFrom, "resume-from", 0, "continue after this log index instead of starting with a snapshot")
	cmd.Flags().BoolVar(&jsonLines, "json", false, "print each event as one line of protojson")
	return cmd
}

// ctlReachable asks the manager for its version (bounded by --timeout) to
// learn whether any manager of the connection answers: the event
// subscription itself retries forever, which is right once it has
// followed a manager but not when the address is wrong or no manager was
// ever up. It returns the call's error (a *client.CallError) only when no
// manager answered (codes.Unavailable or DeadlineExceeded) or ctx ended;
// any answer, even a refusal such as Unimplemented from a manager without
// Version, counts as reachable.
func ctlReachable(ctx context.Context, m *client.NorskManager) error {
	_, err := m.Version(ctx)
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return err
	}
	return nil
}
