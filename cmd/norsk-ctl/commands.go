package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/norsk-oss/norsk-manager/client"
)

// Exit codes of the operator subcommands (documented in ctlExitCodesHelp).
const (
	ctlExitFailure      = 1
	ctlExitUsage        = 2
	ctlExitNotFound     = 3
	ctlExitPrecondition = 4
	ctlExitExists       = 5
	ctlExitUnavailable  = 6
	ctlExitUnauthorised = 7
	ctlExitInterrupted  = 130
)

// ctlExitCodesHelp is appended to the help of the root and of every command
// group.
const ctlExitCodesHelp = `
Exit codes:
  0    success
  1    any other failure
  2    usage error (bad flag or argument), or the manager rejected the request as invalid
  3    not found (job, node, cluster slot)
  4    precondition failed (stale --hash/currentHash, job, node or bundle in the wrong state),
       or aborted (a concurrent request on the same bundle; safe to retry)
  5    already exists
  6    manager unreachable, without quorum, or too slow (see --timeout)
  7    not authorised (bad or revoked token)
  130  interrupted (Ctrl-C)`

// ctlFollowExitCodesHelp is ctlExitCodesHelp for a command whose normal
// end is Ctrl-C (events): interrupting it is a success.
var ctlFollowExitCodesHelp = strings.NewReplacer(
	"  0    success\n", "  0    success, including the end by Ctrl-C (following until interrupted is the normal end)\n",
	"\n  130  interrupted (Ctrl-C)", "",
).Replace(ctlExitCodesHelp)

// Names of the persistent flags of the operator subcommands.
const (
	ctlFlagManagerURL = "manager-url"
	ctlFlagTimeout    = "timeout"
	ctlFlagOutput     = "output"
	ctlEnvManagerURL  = "NORSK_MANAGER_URL"
)

// addClientCommands adds the operator subcommands (job, node, slot, events,
// version, demo) and their persistent flags to root.
func addClientCommands(root *cobra.Command) {
	pf := root.PersistentFlags()
	// --manager-url may already be defined by the worker flags; both read
	// the same value, so define it only once.
	if pf.Lookup(ctlFlagManagerURL) == nil {
		pf.String(ctlFlagManagerURL, client.DefaultURL,
			"manager address host:port, or a comma-separated list of the managers of one cluster (env "+ctlEnvManagerURL+")")
	}
	if pf.Lookup(ctlFlagTimeout) == nil {
		pf.Duration(ctlFlagTimeout, 30*time.Second, "time limit of each call to the manager (0: none)")
	}
	if pf.Lookup(ctlFlagOutput) == nil {
		short := "o"
		if pf.ShorthandLookup(short) != nil || root.Flags().ShorthandLookup(short) != nil {
			short = ""
		}
		pf.StringP(ctlFlagOutput, short, "text", `output format: "text" or "json" (protojson of the manager's answer)`)
	}
	addTLSFlags(root)
	addTokenFlags(root)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return ctlFail(cmd, ctlUsagef("%v", err))
	})
	if root.Args == nil {
		root.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return ctlFail(cmd, ctlUnknownCommand(cmd, args[0]))
			}
			return nil
		}
	}
	root.Long += "\n" + strings.Replace(ctlExitCodesHelp, "Exit codes:", "Exit codes of the subcommands:", 1)
	root.AddCommand(
		newJobCommand(),
		newBundleCommand(),
		newPoolCommand(),
		newNodeCommand(),
		newSlotCommand(),
		newClusterCommand(),
		newEventsCommand(),
		newAuditCommand(),
		newOperatorCommand(),
		newACLCommand(),
		newVersionCommand(),
		newDemoCommand(),
	)
	// Add cobra's "completion" group now rather than at Execute, so that
	// ctlRejectUnknownSubcommands covers it too.
	root.InitDefaultCompletionCmd()
	ctlRejectUnknownSubcommands(root)
}

// ctlRejectUnknownSubcommands makes every command group below root (a
// command with subcommands and no Run of its own: job, node, slot, demo,
// completion) refuse an unknown subcommand with a usage error, as the
// root does; cobra would print the group's help and exit 0. A group run
// without arguments still prints its help.
func ctlRejectUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		ctlRejectUnknownSubcommands(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return ctlFail(cmd, ctlUnknownCommand(cmd, args[0]))
		}
	}
}

// ctlUnknownCommand is the usage error of an unknown subcommand name of
// cmd, with cobra's suggestions of similar names.
func ctlUnknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return ctlUsagef("%s", msg)
}

// ctlEnv is what an operator subcommand needs when it runs.
type ctlEnv struct {
	cmd      *cobra.Command
	out      io.Writer // the command's standard output
	errOut   io.Writer // the command's standard error
	url      string    // --manager-url, after NORSK_MANAGER_URL
	timeout  time.Duration
	jsonOut  bool
	now      func() time.Time
	settings client.Settings
}

// ctlNowKey is the context key of the clock tests inject (a func() time.Time).
type ctlNowKey struct{}

// newCtlEnv reads the persistent flags of cmd.
func newCtlEnv(cmd *cobra.Command) (*ctlEnv, error) {
	e := &ctlEnv{cmd: cmd, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), now: time.Now}
	if now, ok := cmd.Context().Value(ctlNowKey{}).(func() time.Time); ok {
		e.now = now
	}
	e.url = ctlURL(cmd)
	if _, err := client.ParseURL(e.url); err != nil {
		return nil, ctlUsagef("--%s: %v", ctlFlagManagerURL, err)
	}
	if f := cmd.Flag(ctlFlagTimeout); f != nil {
		d, err := time.ParseDuration(f.Value.String())
		if err != nil || d < 0 {
			return nil, ctlUsagef("--%s: %q is not a non-negative duration (e.g. 30s)", ctlFlagTimeout, f.Value.String())
		}
		e.timeout = d
	}
	if f := cmd.Flag(ctlFlagOutput); f != nil {
		switch f.Value.String() {
		case "text":
		case "json":
			e.jsonOut = true
		default:
			return nil, ctlUsagef("--%s: %q is not \"text\" or \"json\"", ctlFlagOutput, f.Value.String())
		}
	}
	e.settings = client.Settings{
		URL:     e.url,
		Timeout: e.timeout,
		Logger:  slog.New(newCtlLogHandler(e.errOut, slog.LevelWarn)),
	}
	tlsCfg, err := ctlTLSConfig(cmd)
	if err != nil {
		return nil, err
	}
	e.settings.TLS = tlsCfg
	if e.settings.Token, err = ctlToken(cmd); err != nil {
		return nil, err
	}
	return e, nil
}

// connect opens a client with the environment's settings. The caller closes
// it.
func (e *ctlEnv) connect(ctx context.Context) (*client.NorskManager, error) {
	m, err := client.Connect(ctx, e.settings)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", e.url, err)
	}
	return m, nil
}

// ctlRun adapts an operator command body: it builds the environment, runs
// fn and turns its error into a message on standard error and an exit code.
func ctlRun(fn func(ctx context.Context, e *ctlEnv, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		e, err := newCtlEnv(cmd)
		if err != nil {
			return ctlFail(cmd, err)
		}
		return ctlFail(cmd, fn(cmd.Context(), e, args))
	}
}

// ctlWithClient is ctlRun for commands that talk to the manager.
func ctlWithClient(fn func(ctx context.Context, e *ctlEnv, m *client.NorskManager, args []string) error) func(*cobra.Command, []string) error {
	return ctlRun(func(ctx context.Context, e *ctlEnv, args []string) error {
		m, err := e.connect(ctx)
		if err != nil {
			return err
		}
		// Closing only releases the connection; its error cannot change
		// the command's outcome.
		defer func() { _ = m.Close() }()
		return fn(ctx, e, m, args)
	})
}

// ctlUsageError is a bad command line.
type ctlUsageError struct{ msg string }

func (e *ctlUsageError) Error() string { return e.msg }

// ctlUsagef returns a *ctlUsageError.
func ctlUsagef(format string, args ...any) error {
	return &ctlUsageError{msg: fmt.Sprintf(format, args...)}
}

// ctlSubjectError names what a failed call was about ("job abc"), for the
// message shown to the operator.
type ctlSubjectError struct {
	subject string
	err     error
}

func (e *ctlSubjectError) Error() string { return e.subject + ": " + e.err.Error() }
func (e *ctlSubjectError) Unwrap() error { return e.err }

// ctlAbout wraps a non-nil err with the subject it concerns.
func ctlAbout(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &ctlSubjectError{subject: fmt.Sprintf(format, args...), err: err}
}

// ctlArgs returns a cobra.PositionalArgs that requires exactly the named
// arguments and reports a usage error naming the missing or extra ones.
func ctlArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return ctlFail(cmd, ctlUsagef("missing argument %s", strings.Join(names[len(args):], " ")))
		case len(args) > len(names):
			return ctlFail(cmd, ctlUsagef("unexpected argument %q", args[len(names)]))
		}
		for i, a := range args {
			if strings.TrimSpace(a) == "" {
				return ctlFail(cmd, ctlUsagef("argument %s is empty", names[i]))
			}
		}
		return nil
	}
}

// ctlFail reports err on the command's standard error and returns the
// *exitError carrying its exit code; nil stays nil, and an *exitError (already
// reported) is returned as is.
func ctlFail(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*exitError](err); ok {
		return err
	}
	msg, code := ctlDescribe(cmd, err)
	fmt.Fprintln(cmd.ErrOrStderr(), "norsk-ctl: "+msg)
	if code == ctlExitUsage {
		if _, ok := errors.AsType[*ctlUsageError](err); ok {
			fmt.Fprintf(cmd.ErrOrStderr(), "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return &exitError{code: code}
}

// ctlDescribe turns err into the operator's message and the exit code.
func ctlDescribe(cmd *cobra.Command, err error) (string, int) {
	if ue, ok := errors.AsType[*ctlUsageError](err); ok {
		return ue.msg, ctlExitUsage
	}
	ce, ok := errors.AsType[*client.CallError](err)
	if !ok {
		if errors.Is(err, context.Canceled) {
			return "interrupted", ctlExitInterrupted
		}
		return err.Error(), ctlExitFailure
	}
	subject := ""
	if se, ok := errors.AsType[*ctlSubjectError](err); ok {
		subject = se.subject
	}
	st := ce.GRPCStatus()
	detail := func(category string, code int) (string, int) {
		msg := category
		if subject != "" {
			msg += ": " + subject
		}
		switch {
		case ce.Local:
			// gRPC's own message (connection refused, no manager serving,
			// the call's deadline), never quoted as the manager's.
			if m := ce.ConnectionSummary(); m != "" {
				msg += " (" + m + ")"
			}
		default:
			if m := ctlManagerMessage(st.Message()); m != "" {
				msg += " (manager said: " + m + ")"
			}
		}
		return msg, code
	}
	// The manager that answered, else the addresses of the command.
	at := ctlURL(cmd)
	if ce.Addr != "" {
		at = ce.Addr
	}
	switch st.Code() {
	case codes.NotFound:
		return detail("not found", ctlExitNotFound)
	case codes.AlreadyExists:
		return detail("already exists", ctlExitExists)
	case codes.FailedPrecondition, codes.Aborted:
		return detail("precondition failed", ctlExitPrecondition)
	case codes.InvalidArgument:
		return detail("invalid request", ctlExitUsage)
	case codes.OutOfRange:
		return detail("out of range", ctlExitUsage)
	case codes.Unauthenticated, codes.PermissionDenied:
		return detail("not authorised", ctlExitUnauthorised)
	case codes.Unavailable:
		return detail("manager unavailable at "+at, ctlExitUnavailable)
	case codes.DeadlineExceeded:
		return detail("no answer from the manager at "+at+" within --timeout", ctlExitUnavailable)
	case codes.Canceled:
		return "interrupted", ctlExitInterrupted
	case codes.ResourceExhausted:
		return detail("resource exhausted", ctlExitFailure)
	case codes.Unimplemented:
		return detail("the manager at "+at+" does not implement "+ce.Method, ctlExitFailure)
	}
	return detail(strings.ToLower(st.Code().String()), ctlExitFailure)
}

// ctlManagerMessage shortens a status message for the operator: gRPC's
// retry wraps the last attempt's error ("max retries exhausted: failed after
// 2 attempts: rpc error: code = Unavailable desc = no quorum"); only the
// innermost description is the manager's.
func ctlManagerMessage(m string) string {
	const desc = "desc = "
	if i := strings.LastIndex(m, desc); i >= 0 {
		return m[i+len(desc):]
	}
	return m
}

// ctlURL is the manager address of the command: --manager-url if given,
// else $NORSK_MANAGER_URL, else the flag's default, else client.DefaultURL.
func ctlURL(cmd *cobra.Command) string {
	url := ""
	if f := cmd.Flag(ctlFlagManagerURL); f != nil {
		url = f.Value.String()
		if env := os.Getenv(ctlEnvManagerURL); env != "" && !f.Changed {
			url = env
		}
	}
	if strings.TrimSpace(url) == "" {
		url = client.DefaultURL
	}
	return url
}

// withExitCodes appends the exit-code table to a command's long help.
func withExitCodes(cmd *cobra.Command) *cobra.Command {
	cmd.Long += "\n" + ctlExitCodesHelp
	return cmd
}
