package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/norsk-oss/norsk-manager/actors/job"
	"github.com/norsk-oss/norsk-manager/proto/commonpb"
	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// Caller makes recorded calls through one manager only (it never fails
// over: a client that keeps talking to one manager is what exposes a
// stale manager). Each call has its own deadline. A Caller is used by one
// goroutine at a time.
type Caller struct {
	// ID is the client number recorded with each operation.
	ID int
	// Manager is the name of the manager it talks to.
	Manager string
	api     managerpb.ManagerClient
	conn    *grpc.ClientConn
	rec     *Recorder
	timeout time.Duration
	seq     int
}

// Dial returns a Caller for the manager named name at the API address
// addr, recording into rec, each call bounded by timeout. The connection
// retries with at most 250 ms between attempts, so that a restarted
// manager is used again at once.
func Dial(id int, name, addr string, rec *Recorder, timeout time.Duration) (*Caller, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("dial %s at %s: %w", name, addr, err)
	}
	return &Caller{ID: id, Manager: name, api: managerpb.NewManagerClient(conn), conn: conn, rec: rec, timeout: timeout}, nil
}

// Close closes the connection.
func (c *Caller) Close() error { return c.conn.Close() }

// payload returns a write id no other write of the run uses.
func (c *Caller) payload() string {
	c.seq++
	return fmt.Sprintf("c%d-%d", c.ID, c.seq)
}

// definition is the job a write sends, and the hash the manager gives it.
func definition(key, payload string) (*managerpb.Job, int64) {
	j := &managerpb.Job{JobId: &commonpb.JobId{JobId: key}, Description: payload}
	return j, job.Hash(j)
}

// do runs call with the caller's deadline and records the operation;
// finish turns call's error into the Output.
func (c *Caller) do(in Input, call func(ctx context.Context) error, finish func(error) Output) Op {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	op := Op{Client: c.ID, Manager: c.Manager, Input: in, Call: c.rec.Now()}
	err := call(ctx)
	op.Return = c.rec.Now()
	op.Output = finish(err)
	c.rec.Add(op)
	return op
}

// Read is JobById(key).
func (c *Caller) Read(key string) Op {
	var resp *managerpb.JobByIdResponse
	return c.do(Input{Kind: Read, Key: key}, func(ctx context.Context) error {
		var err error
		resp, err = c.api.JobById(ctx, &commonpb.JobId{JobId: key})
		return err
	}, func(err error) Output {
		out := ClassifyRead(err)
		if out.Found {
			j := resp.GetJob().GetJob()
			out.Hash, out.Payload = j.GetCurrentHash(), j.GetDescription()
		}
		return out
	})
}

// Create is CreateJob(key) with a fresh payload.
func (c *Caller) Create(key string) Op {
	p := c.payload()
	j, h := definition(key, p)
	var resp *managerpb.JobHash
	return c.do(Input{Kind: Create, Key: key, Payload: p, NewHash: h}, func(ctx context.Context) error {
		var err error
		resp, err = c.api.CreateJob(ctx, j)
		return err
	}, func(err error) Output {
		out := Classify(Create, err)
		if err == nil {
			out.Hash = resp.GetHash()
		}
		return out
	})
}

// Update is UpdateJob(key) from current_hash from, with a fresh payload.
func (c *Caller) Update(key string, from int64) Op {
	p := c.payload()
	j, h := definition(key, p)
	j.CurrentHash = from
	var resp *managerpb.JobHash
	return c.do(Input{Kind: Update, Key: key, FromHash: from, Payload: p, NewHash: h}, func(ctx context.Context) error {
		var err error
		resp, err = c.api.UpdateJob(ctx, j)
		return err
	}, func(err error) Output {
		out := Classify(Update, err)
		if err == nil {
			out.Hash = resp.GetHash()
		}
		return out
	})
}

// Delete is DeleteJob(key).
func (c *Caller) Delete(key string) Op {
	return c.do(Input{Kind: Delete, Key: key}, func(ctx context.Context) error {
		_, err := c.api.DeleteJob(ctx, &commonpb.JobId{JobId: key})
		return err
	}, func(err error) Output { return Classify(Delete, err) })
}

// knowledge is what a client believes about a job from its last answer.
type knowledge struct {
	known  bool // false: re-read before writing
	exists bool
	hash   int64
}

// learn is what op's answer tells its client about the job.
func learn(op Op) knowledge {
	in, out := op.Input, op.Output
	switch {
	case out.Outcome == Unknown:
		return knowledge{}
	case in.Kind == Read && out.Found:
		return knowledge{known: true, exists: true, hash: out.Hash}
	case in.Kind == Read:
		return knowledge{known: true}
	case out.Outcome == OK && (in.Kind == Create || in.Kind == Update):
		return knowledge{known: true, exists: true, hash: out.Hash}
	case out.Outcome == OK && in.Kind == Delete, out.Claim == ClaimAbsent:
		return knowledge{known: true}
	}
	return knowledge{} // a refusal: re-read, as the manager's messages say
}

// Mix is the workload's choice of call when the client believes the job
// exists (otherwise it creates it, or reads when it knows nothing).
type Mix struct {
	// Update, Delete are the probabilities of an UpdateJob and of a
	// DeleteJob; the rest are reads.
	Update, Delete float64
}

// DefaultMix is mostly compare-and-set updates, a quarter reads and a
// few deletes (which make the next client create the job again).
var DefaultMix = Mix{Update: 0.70, Delete: 0.03}

// Workload runs one goroutine per Caller until Stop.
type Workload struct {
	stopCh chan struct{} // closed by Stop
	wg     sync.WaitGroup
	once   sync.Once
}

// StartWorkload starts the clients: each picks a job of keys at random
// and, by what it last learnt about it, reads it (nothing known), creates
// it (absent: 80 %, else reads) or updates, reads or deletes it by mix;
// then waits up to think (uniformly). After an Unknown answer it waits
// 100–300 ms more, as a client backing off would. seed makes each
// client's choices reproducible (not the answers, nor the interleaving).
func StartWorkload(callers []*Caller, keys []string, mix Mix, think time.Duration, seed uint64) *Workload {
	w := &Workload{stopCh: make(chan struct{})}
	for _, c := range callers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.client(c, keys, mix, think, rand.New(rand.NewPCG(seed, uint64(c.ID))))
		}()
	}
	return w
}

// Stop stops issuing calls and waits for the calls under way (each ends
// by its deadline). Idempotent.
func (w *Workload) Stop() {
	w.once.Do(func() { close(w.stopCh) })
	w.wg.Wait()
}

func (w *Workload) client(c *Caller, keys []string, mix Mix, think time.Duration, rng *rand.Rand) {
	known := map[string]knowledge{}
	for {
		select {
		case <-w.stopCh:
			return
		default:
		}
		key := keys[rng.IntN(len(keys))]
		op := next(c, rng, key, known[key], mix)
		known[key] = learn(op)
		pause := time.Duration(0)
		if think > 0 {
			pause = time.Duration(rng.Int64N(int64(think)))
		}
		if op.Output.Outcome == Unknown {
			pause += 100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond)))
		}
		if !w.wait(pause) {
			return
		}
	}
}

// next makes the client's next call on key.
func next(c *Caller, rng *rand.Rand, key string, k knowledge, mix Mix) Op {
	switch {
	case !k.known:
		return c.Read(key)
	case !k.exists && rng.Float64() < 0.8:
		return c.Create(key)
	case !k.exists:
		return c.Read(key)
	}
	switch r := rng.Float64(); {
	case r < mix.Update:
		return c.Update(key, k.hash)
	case r < mix.Update+mix.Delete:
		return c.Delete(key)
	}
	return c.Read(key)
}

// wait waits d; false if Stop was called meanwhile.
func (w *Workload) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stopCh:
		return false
	case <-t.C:
		return true
	}
}
