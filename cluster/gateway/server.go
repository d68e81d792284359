package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/actors"
	"github.com/norsk-oss/norsk-manager/persistence"
	"github.com/norsk-oss/norsk-manager/proto/internalpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Config configures the gateway.
type Config struct {
	Router actors.Router
	Store  *persistence.Store
	// Journal is the write path of pools (pools.go), which have no grain;
	// the grains' journal. Nil: pool writes answer Unimplemented.
	Journal  persistence.Journal
	Liveness *actors.Liveness
	Logger   *slog.Logger
	// Version is answered by Manager.Version and CreateStatusChannel.
	Version *managerpb.VersionInfo
	// Clock returns the current time; nil means time.Now.
	Clock func() time.Time
	// DialCheckTimeout bounds the TCP probe of a registering worker's
	// dial-back address. Default 3 s; negative disables the probe.
	DialCheckTimeout time.Duration
	// Events configures EventStream.
	Events EventStreamConfig
	// Limits bounds event streams per caller and registrations per
	// address (limits.go).
	Limits LimitsConfig
	// Barrier, if set, is called before every read of the store (JobById,
	// JobSearch, listings, token lookups, event-stream snapshots and
	// resumes): in an HA cluster it waits until the local replica has
	// applied every write acknowledged before the call. Its error (no
	// leader) is answered as Unavailable.
	Barrier func(ctx context.Context) error
	// BarrierTimeout bounds how long a read waits for Barrier (a leader
	// to be elected, the local replica to catch up) before it answers
	// Unavailable, so that a client of several managers retries on
	// another one instead of waiting out its whole deadline on a manager
	// cut off from the leader. Default 5 s.
	BarrierTimeout time.Duration
	// LeaderKnown, if set, reports whether this manager knows a Raft
	// leader. Every write (a grain command) first checks it: a manager that
	// knows none (cut off from the quorum, or an election in progress)
	// waits at most LeaderWait for one and then answers Unavailable, saying
	// nothing was done, instead of letting the write wait out the grain
	// timeout. Nil: a single manager, always its own leader.
	LeaderKnown func() bool
	// LeaderWait bounds how long a write waits for LeaderKnown to become
	// true (an election usually takes well under a second). Default 1 s;
	// negative: do not wait.
	LeaderWait time.Duration
	// SecurityGroups, if set, looks a job's extra security groups up in
	// the regions of its pool's AWS tiers for CreateJob's and UpdateJob's
	// warnings (job_warnings.go); nil: no warnings.
	SecurityGroups SecurityGroupChecker
	// Placement, if set, returns the placement engine running on this
	// manager, or nil when it runs none (a follower): GetPlacement's
	// fresher source for the last attempts. Nil: GetPlacement answers from
	// the store only.
	Placement func() PlacementExplainer
	// LiveView, if set, returns the liveness of every node's worker
	// session across the cluster (each manager knows only the sessions of
	// the node grains it hosts); nil uses Liveness alone.
	LiveView func(ctx context.Context) map[string]actors.NodeLiveness
	// Members answers ClusterMembers; nil means a single manager (it
	// answers with itself).
	Members func(ctx context.Context) (*managerpb.ClusterMembersResponse, error)
	// ACL configures the ACL token methods (acl.go).
	ACL ACLConfig
	// MaxSendMsgSize is the API server's send limit in bytes (0: not
	// known); a page of a listing stays below it (paging.go).
	MaxSendMsgSize int
	// MaxListReplyBytes is the byte budget of one page of a listing
	// (ListNodes, ListClusterNodes, ListBundles, ListPools,
	// ListAuditEntries). Default DefaultMaxListReplyBytes, just under the
	// 4 MiB a default gRPC client receives.
	MaxListReplyBytes int
}

// Server implements managerpb.ManagerServer.
type Server struct {
	managerpb.UnimplementedManagerServer
	cfg Config
	log *slog.Logger
	// subscribers counts the event streams being served; budget accounts
	// the bytes they hold; snapshotTurns bounds the snapshots read at once
	// (eventstream.go, eventbudget.go).
	subscribers   atomic.Int64
	budget        *streamBudget
	snapshotTurns chan struct{}
	// snapshotting is set while a SnapshotSave streams a backup.
	snapshotting atomic.Bool
	// streams counts event streams per caller; registers rate-limits
	// ClusterMemberRegister per address (limits.go).
	streams   *callerStreams
	registers *registerLimiter
	// searches counts JobSearch calls per caller and in all (jobsearch.go).
	searches *searchSlots
}

var _ managerpb.ManagerServer = (*Server)(nil)

// New returns a gateway; Register it on a gRPC server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.BarrierTimeout <= 0 {
		cfg.BarrierTimeout = 5 * time.Second
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = time.Second
	}
	if cfg.DialCheckTimeout == 0 {
		cfg.DialCheckTimeout = 3 * time.Second
	}
	if cfg.Version == nil {
		cfg.Version = &managerpb.VersionInfo{}
	}
	cfg.Events.defaults()
	cfg.Limits.defaults()
	return &Server{cfg: cfg, log: cfg.Logger,
		budget: newStreamBudget(cfg.Events.MaxTotalBytes), snapshotTurns: make(chan struct{}, cfg.Events.MaxConcurrentSnapshots),
		streams: newCallerStreams(cfg.Limits.MaxEventStreamsPerCaller), registers: newRegisterLimiter(cfg.Limits, cfg.Clock),
		searches: newSearchSlots(cfg.Limits.MaxJobSearchesPerCaller, cfg.Limits.MaxJobSearches)}
}

// Subscribers returns how many event streams are being served.
func (s *Server) Subscribers() int64 { return s.subscribers.Load() }

// JobSearches returns how many JobSearch calls are being served.
func (s *Server) JobSearches() int { return s.searches.running() }

// EventStreamBytes returns the bytes the event streams hold, counted as
// EventStreamConfig.MaxTotalBytes bounds them.
func (s *Server) EventStreamBytes() int64 { return s.budget.Held() }

// Register registers the Manager service on gs, each request checked as
// it is decoded (checkedServiceDesc: InvalidArgument naming the field for
// invalid UTF-8 or a map or list over its limit).
func (s *Server) Register(gs *grpc.Server) { gs.RegisterService(checkedServiceDesc(), s) }

// view reads the store after the Barrier (if any).
func (s *Server) view(ctx context.Context, fn func(r *persistence.Reader) error) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.cfg.Store.View(fn)
}

// liveView returns the liveness of every node.
func (s *Server) liveView(ctx context.Context) map[string]actors.NodeLiveness {
	if s.cfg.LiveView != nil {
		return s.cfg.LiveView(ctx)
	}
	return s.cfg.Liveness.Snapshot()
}

// barrier runs Config.Barrier for at most BarrierTimeout, as an
// Unavailable status on failure; the caller's own cancellation or deadline
// keeps its code.
func (s *Server) barrier(ctx context.Context) error {
	if s.cfg.Barrier == nil {
		return nil
	}
	bctx, cancel := context.WithTimeout(ctx, s.cfg.BarrierTimeout)
	defer cancel()
	if err := s.cfg.Barrier(bctx); err != nil {
		if ctx.Err() != nil {
			return toStatus(ctx.Err())
		}
		return status.Errorf(codes.Unavailable, "this manager cannot read the cluster's state now (no leader or no quorum); retry or use another manager: %v", err)
	}
	return nil
}

// errNoLeader is the answer to a write on a manager that knows no leader.
const errNoLeader = "this manager knows no Raft leader (no quorum?); nothing was done, retry on another manager"

// leaderPoll is how often a write waiting for a leader checks LeaderKnown.
const leaderPoll = 20 * time.Millisecond

// requireLeader returns nil once a Raft leader is known (at once without
// Config.LeaderKnown), and Unavailable if none is known within LeaderWait;
// the caller's own cancellation or deadline keeps its code.
func (s *Server) requireLeader(ctx context.Context) error {
	if s.cfg.LeaderKnown == nil || s.cfg.LeaderKnown() {
		return nil
	}
	if s.cfg.LeaderWait > 0 {
		deadline := time.NewTimer(s.cfg.LeaderWait)
		defer deadline.Stop()
		tick := time.NewTicker(leaderPoll)
		defer tick.Stop()
	wait:
		for {
			select {
			case <-ctx.Done():
				return toStatus(ctx.Err())
			case <-deadline.C:
				break wait
			case <-tick.C:
				if s.cfg.LeaderKnown() {
					return nil
				}
			}
		}
	}
	return status.Error(codes.Unavailable, errNoLeader)
}

// request sends a command to a grain once a leader is known (every grain
// command is a write).
func (s *Server) request(ctx context.Context, kind, id string, msg proto.Message) (*internalpb.Reply, error) {
	if err := s.requireLeader(ctx); err != nil {
		return nil, err
	}
	r, err := s.cfg.Router.Request(ctx, kind, id, msg)
	return r, replyStatus(r, err)
}

// newRequestID returns a random id for a grain command.
func newRequestID() string { return newUUID() }

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("gateway: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *Server) job(ctx context.Context, id string, cmd *internalpb.JobCommand) (*internalpb.Reply, error) {
	cmd.JobId = id
	if cmd.RequestId == "" {
		cmd.RequestId = newRequestID()
	}
	cmd.Audit = jobAudit(ctx, id, cmd)
	return s.request(ctx, actors.KindJob, id, cmd)
}

func (s *Server) node(ctx context.Context, id string, cmd *internalpb.NodeCommand) (*internalpb.Reply, error) {
	cmd.NodeId = id
	if cmd.RequestId == "" {
		cmd.RequestId = newRequestID()
	}
	cmd.Audit = nodeAudit(ctx, id, cmd)
	return s.request(ctx, actors.KindNode, id, cmd)
}

// CreateStatusChannel sends Hello with the runtime version, then keeps the
// stream open until the client goes away.
func (s *Server) CreateStatusChannel(_ *emptypb.Empty, stream managerpb.Manager_CreateStatusChannelServer) error {
	if err := stream.Send(&managerpb.NorskStatusEvent{Message: &managerpb.NorskStatusEvent_Hello{Hello: &managerpb.Hello{Version: s.cfg.Version.GetVersion()}}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Version returns the API level and the manager's build version.
func (s *Server) Version(context.Context, *emptypb.Empty) (*managerpb.VersionInfo, error) {
	return s.cfg.Version, nil
}

// CreateJob stores a new job. An empty job id is replaced by a random UUID;
// the output fields state and terminal_state are ignored
// (validate_output.go). InvalidArgument for an id outside the id rule
// (checkNewID) or a bad definition; AlreadyExists if the id is taken.
// It fills in and clears fields of j itself, not of a copy: the request is
// the call's own (gRPC decodes a fresh message per call) and the job grain
// copies the definition it stores (issue 22 §2: one copy per create, not
// two).
func (s *Server) CreateJob(ctx context.Context, j *managerpb.Job) (*managerpb.JobHash, error) {
	if j.GetJobId().GetJobId() == "" {
		j.JobId = &commonJobID{JobId: newUUID()}
	}
	id, err := newJobID("job.job_id", j.GetJobId())
	if err != nil {
		return nil, err
	}
	clearJobOutputs(j)
	if err := validateJob(j); err != nil {
		return nil, err
	}
	r, err := s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Create{Create: &internalpb.CreateJob{Job: j}}})
	if err != nil {
		return nil, err
	}
	s.sendWarnings(ctx, "CreateJob", s.jobWarnings(ctx, id, j))
	return r.GetJobHash(), nil
}

// UpdateJob replaces a job's definition; current_hash must be the hash last
// returned (FailedPrecondition otherwise, naming the current hash). state
// is ignored; terminal_state must be absent (clears the verdict) or the
// stored one (InvalidArgument otherwise; validate_output.go).
func (s *Server) UpdateJob(ctx context.Context, j *managerpb.Job) (*managerpb.JobHash, error) {
	id, err := jobID("job.job_id", j.GetJobId())
	if err != nil {
		return nil, err
	}
	if err := validateJob(j); err != nil {
		return nil, err
	}
	if err := s.checkUpdateTerminal(ctx, id, j); err != nil {
		return nil, err
	}
	r, err := s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Update{Update: &internalpb.UpdateJob{Job: j}}})
	if err != nil {
		return nil, err
	}
	s.sendWarnings(ctx, "UpdateJob", s.jobWarnings(ctx, id, j))
	return r.GetJobHash(), nil
}

// DeleteJob deletes a job without instances (FailedPrecondition naming
// them otherwise).
func (s *Server) DeleteJob(ctx context.Context, in *commonJobID) (*emptypb.Empty, error) {
	id, err := jobID("job_id", in)
	if err != nil {
		return nil, err
	}
	_, err = s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Delete{Delete: &internalpb.DeleteJob{}}})
	return empty(err)
}

// CompleteJob stops every instance of the job and moves it to POST.
func (s *Server) CompleteJob(ctx context.Context, in *commonJobID) (*emptypb.Empty, error) {
	id, err := jobID("job_id", in)
	if err != nil {
		return nil, err
	}
	_, err = s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Complete{Complete: &internalpb.CompleteJob{}}})
	return empty(err)
}

// StartJob runs (job, role) on an online node.
func (s *Server) StartJob(ctx context.Context, in *managerpb.StartJobRequest) (*emptypb.Empty, error) {
	id, err := jobID("job_id", in.GetJobId())
	if err != nil {
		return nil, err
	}
	if err := checkStartRole(in.GetRole()); err != nil {
		return nil, err
	}
	node, err := nodeID("node_id", in.GetNodeId())
	if err != nil {
		return nil, err
	}
	_, err = s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Start{Start: &internalpb.StartJob{Role: in.GetRole(), NodeId: node}}})
	return empty(err)
}

// StopJob stops (job, role) on the node it runs on.
func (s *Server) StopJob(ctx context.Context, in *managerpb.StopJobRequest) (*emptypb.Empty, error) {
	id, err := jobID("job_id", in.GetJobId())
	if err != nil {
		return nil, err
	}
	if err := checkRole(in.GetRole()); err != nil {
		return nil, err
	}
	node, err := nodeID("node_id", in.GetNodeId())
	if err != nil {
		return nil, err
	}
	_, err = s.job(ctx, id, &internalpb.JobCommand{Cmd: &internalpb.JobCommand_Stop{Stop: &internalpb.StopJob{Role: in.GetRole(), NodeId: node}}})
	return empty(err)
}

// JobById returns a job with its history and instances; environment
// values redacted for a caller below operator (redact.go).
func (s *Server) JobById(ctx context.Context, in *commonJobID) (*managerpb.JobByIdResponse, error) {
	id, err := jobID("job_id", in)
	if err != nil {
		return nil, err
	}
	rec, err := s.readJob(ctx, id)
	if err != nil {
		return nil, err
	}
	return redactFor(s, ctx, &managerpb.JobByIdResponse{Job: rec.GetJob(), Instances: runningJobs(rec), LastFailures: rec.GetLastFailures(), Migrations: rec.GetMigrations()}), nil
}

func empty(err error) (*emptypb.Empty, error) {
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// probeDialBack checks that a registering worker's address accepts TCP
// connections, so that an unreachable address is refused at registration
// rather than discovered as a node that never starts.
func (s *Server) probeDialBack(ctx context.Context, address string, port uint32) error {
	if s.cfg.DialCheckTimeout < 0 {
		return nil
	}
	target := net.JoinHostPort(address, strconv.Itoa(int(port)))
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DialCheckTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", target)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition,
			"cannot reach the worker at %s to dial it back: %v (check the worker's --listen / --advertise address)", target, err)
	}
	return conn.Close()
}

// readJob reads job id's record from the store (behind the read barrier,
// as view does). A missing job is NotFound "job %q not found"; other
// failures are mapped by toStatus.
func (s *Server) readJob(ctx context.Context, id string) (*internalpb.JobRecord, error) {
	var rec *internalpb.JobRecord
	err := s.view(ctx, func(r *persistence.Reader) error {
		var err error
		rec, _, err = r.Job(id)
		return err
	})
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "job %q not found", id)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return rec, nil
}
